"""Proof: how the course shows that speculative decoding samples exactly from the target.

- `mock`: closed-form mock models, whose every distribution is known exactly;
- `stats`: Monte Carlo sizes, goodness of fit against an exact law (scipy.stats), exact
  sequence laws;
- `broken`: deliberately wrong verifiers and drafters, which the same checks must reject.

May import: the algorithm, the engine and the foundation.
"""
