"""Plausible wrong answers to the exercises of notebooks/05_memory_vs_compute.ipynb.

tests/test_exercises.py binds each one to the exercise's answer name in the student notebook and
re-runs the check cell, which must fail with an ``AssertionError("Exercise N: ...")``.
See `specdec_lab.course.exercises` for the format.
"""

from specdec_lab import theory


def knee_after_the_crossing(ks, latencies, tol=0.1):
    """Returns the first k above the limit instead of the last k below it (off by one step)."""
    limit = (1 + tol) * latencies[0]
    for k, t in zip(ks, latencies, strict=True):
        if t > limit:
            return k
    return ks[-1]


def last_k_under_the_limit(ks, latencies, tol=0.1):
    """Does not stop at the first crossing: a later noisy dip moves the knee."""
    limit = (1 + tol) * latencies[0]
    return max(k for k, t in zip(ks, latencies, strict=True) if t <= limit)


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


def delegates(ks, latencies, tol=0.1):
    """Calls profiling.find_knee, the function the exercise asks to write."""
    from specdec_lab.measure import profiling

    return profiling.find_knee(ks, latencies, tol)


def limit_counts_as_paid(ks, latencies, tol=0.1):
    """Stops at the first k whose latency reaches (not exceeds) (1 + tol) times k = 1."""
    knee = ks[0]
    for k, t in zip(ks, latencies, strict=True):
        if t >= (1 + tol) * latencies[0]:
            break
        knee = k
    return knee


WRONG_ANSWERS = {
    "5.1": {
        "first k past the limit": knee_after_the_crossing,
        "ignores the first crossing": last_k_under_the_limit,
        "delegates to profiling.find_knee": delegates,
        "the limit itself counts as paid (>= instead of >)": limit_counts_as_paid,
    },
    "5.2": {  # two answer names: the prediction stays as the student left it
        "free verification (r = 1)": {"best_gamma_on_device": free_verification},
        "latency at k = γ (off by one)": {"best_gamma_on_device": verify_k_equals_gamma},
        "c upside down": {"best_gamma_on_device": inverted_c},
    },
}
