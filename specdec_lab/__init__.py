"""specdec_lab: the helper package of the specdec-lab speculative decoding course.

Notation follows Leviathan, Kalman & Matias, "Fast Inference from Transformers via Speculative
Decoding" (arXiv:2211.17192): p is the target model's distribution, q the draft model's.

The map: the package's rooms, in an order in which every room imports only rooms above it. Each
room names the rooms it may import on one line that begins "May import": a package in its own
docstring, the foundation and the algorithm below the map. tests/repo/test_layout.py checks every
import inside the package against these lines.

    the foundation   env       where am I: device, seeding, threads, GPU dry run, synchronise
                     data      where the course's files are: prompts, models, results
                     theory    the closed forms: tokens per call, speedup, the best γ
                     sampling  logits -> the distributions tokens are drawn from
    engine/          how a real model runs under the loop: sessions, the lean Llama forward,
                     the on-device verifier, output logits
    the algorithm    verify    THE acceptance rule, as pure functions of probabilities
                     inputs    the argument checks the loops share
                     drafters  the Drafter protocol: a draft model, prompt lookup, adaptive γ
                     decoding  the loop: one speculative step, autoregressive decoding
                     tree      token trees, verified in one forward
                     heads     the EAGLE-style draft head and its drafter
    proof/           how the course proves the algorithm exact: mock models, statistics, the
                     broken samplers the checks must reject
    display/         traces and plots of runs and proofs
    models/          where weights come from: the pairs, the memory guard, tiny stand-ins
    measure/         numbers on this machine: timing, profiling, records, the benchmark, the
                     capstone's engine counters and report
    course/          what produces the course: the exercises' checks, the workshop, training
    cli/             the command-line tools that `__main__` (`python -m specdec_lab`) runs

    the foundation   May import: nothing; its modules import only each other.
    the algorithm    May import: the foundation and the engine.
"""

__version__ = "0.1.0"
