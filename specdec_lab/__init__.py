"""specdec_lab: the helper package of the specdec-lab speculative decoding course.

Notation follows Leviathan, Kalman & Matias, "Fast Inference from Transformers via Speculative
Decoding" (arXiv:2211.17192): p is the target model's distribution, q the draft model's.
"""

__version__ = "0.1.0"
