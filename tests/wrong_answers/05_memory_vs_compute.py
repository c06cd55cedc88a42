"""Plausible wrong answers to the exercises of notebooks/05_memory_vs_compute.ipynb.

tests/course/test_exercises.py binds each one to the exercise's answer name in the student notebook and
re-runs the check cell, which must fail with an ``AssertionError("Exercise N: ...")``.
See `specdec_lab.course.exercises` for the format.
"""

from specdec_lab import theory
from specdec_lab.course import checks
from specdec_lab.measure import profiling


def reading(example_k, own_k=1):
    """`knees_5_1` with `example_k` read off the worked sweep and `own_k` off every model of the
    CPU ladder (the check reads the worked sweep first, so that is where these fail). Given as
    {answer name: value}: a bare dict would be taken for a dict of answer names."""
    knees = {checks.WORKED_KNEE_NAME: example_k} | {name: own_k for name in profiling.CPU_LADDER}
    return {"knees_5_1": knees}


def free_verification(alpha, c, ks, latencies):
    """r = 1 for every γ: the paper's assumption, whatever the device measured."""
    return max((k - 1 for k in ks if k >= 2), key=lambda g: theory.speedup(alpha, g, c))


def verify_k_equals_gamma(alpha, c, ks, latencies):
    """Off-by-one: takes the latency at k = γ as the cost of verifying γ drafts."""
    t1 = latencies[0]
    cost = {k: t / t1 for k, t in zip(ks, latencies, strict=True) if k >= 1}
    return max(cost, key=lambda g: theory.speedup(alpha, g, c, cost[g]))


def inverted_c(alpha, c, ks, latencies):
    """Uses 1 / c: the cost ratio upside down."""
    t1 = latencies[0]
    cost = {k - 1: t / t1 for k, t in zip(ks, latencies, strict=True) if k >= 2}
    return max(cost, key=lambda g: theory.speedup(alpha, g, 1 / c, cost[g]))


WRONG_ANSWERS = {
    "5.1": {  # the worked curve: 1.00 0.96 1.03 1.06 1.14 1.07 1.90 at k = 1, 2, ..., 64
        # divided by the k = 1 median (18.0 ms, two busy repeats) the row stays under 1.09
        "normalised by the noisy k = 1 median: γ = 63 for free": reading(64),
        "the fastest k (the minimum)": reading(2),
        "k = 1 for every curve": reading(1),
        "the first k outside the band (one grid step too far)": reading(16),
        "ignores the first crossing: the later dip back in": reading(32),
        "interpolates between grid points": reading(12),
        "γ = knee − 1 instead of the knee k": reading(7),
        "one number, not a dict of curves": 8,
    },
    "5.2": {  # two answer names: the prediction stays as the student left it
        "free verification (r = 1)": {"best_gamma_on_device": free_verification},
        "latency at k = γ (off by one)": {"best_gamma_on_device": verify_k_equals_gamma},
        "c upside down": {"best_gamma_on_device": inverted_c},
    },
}
