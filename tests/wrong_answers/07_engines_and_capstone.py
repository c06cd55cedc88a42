"""Plausible wrong answers to the exercises of notebooks/07_engines_and_capstone.ipynb.

tests/test_exercises.py binds each one to the exercise's answer names in the student notebook and
re-runs the check cell, which must fail with an ``AssertionError("Exercise N: ...")``.
See `specdec_lab.course.exercises` for the format.
"""

from specdec_lab import theory
from specdec_lab.course import capstone


def drafted_share(num_drafts, accepted_per_pos):
    """Accepted over drafted tokens: vLLM's draft acceptance rate, llama.cpp's accept %."""
    return sum(accepted_per_pos) / (num_drafts * len(accepted_per_pos))


def first_position(num_drafts, accepted_per_pos):
    """The per-position rate at position 0 only."""
    return accepted_per_pos[0] / num_drafts


def mean_of_conditionals(num_drafts, accepted_per_pos):
    """The average of the per-position conditional rates a_k / a_(k-1): each position weighted
    alike, however few steps reached it."""
    before = [num_drafts, *accepted_per_pos[:-1]]
    rates = [a / b if b else 0.0 for a, b in zip(accepted_per_pos, before, strict=True)]
    return sum(rates) / len(rates)


def examines_after_the_last(num_drafts, accepted_per_pos):
    """Off by one: counts an examination after a fully accepted step (there is no draft γ + 1)."""
    return sum(accepted_per_pos) / (num_drafts + sum(accepted_per_pos))


def inverts_acceptance_length(num_drafts, accepted_per_pos):
    """Inverts (1 − α^(γ+1)) / (1 − α) at the mean acceptance length: the model's α, not the
    counted one (they differ when α changes with the position)."""
    length = 1 + sum(accepted_per_pos) / num_drafts
    return theory.alpha_from_tokens_per_call(length, len(accepted_per_pos))


def over_gamma_plus_one(num_drafts, accepted_per_pos):
    """(mean acceptance length − 1) / (γ + 1): the off-by-one γ vs γ + 1."""
    return sum(accepted_per_pos) / num_drafts / (len(accepted_per_pos) + 1)


def _right(num_drafts, accepted_per_pos):
    return sum(accepted_per_pos) / (num_drafts + sum(accepted_per_pos[:-1]))


WRONG_ANSWERS = {
    "7.1": {
        "accepted over drafted (accept %)": {"alpha_from_counters": drafted_share},
        "position 0 only": {"alpha_from_counters": first_position},
        "mean of per-position conditional rates": {"alpha_from_counters": mean_of_conditionals},
        "examines a draft after the last": {"alpha_from_counters": examines_after_the_last},
        "inverts the mean acceptance length": {"alpha_from_counters": inverts_acceptance_length},
        "divides by γ + 1": {"alpha_from_counters": over_gamma_plus_one},
        "right α̂, but c and r counted as left out": {
            "alpha_from_counters": _right,
            "prediction_7_1": "α̂ is higher",
            "left_out_7_1": {"c", "r", "overhead", "varying α"},
        },
        "right α̂, but only the overhead left out": {
            "alpha_from_counters": _right,
            "prediction_7_1": "α̂ is higher",
            "left_out_7_1": {"overhead"},
        },
        "right α̂, but the bonus token counted as left out": {
            "alpha_from_counters": _right,
            "prediction_7_1": "α̂ is higher",
            "left_out_7_1": {"bonus", "overhead", "varying α"},
        },
    },
}


def _speedups(alpha, se, c, r, gamma):
    lo, hi = max(alpha - 2 * se, 0.0), min(alpha + 2 * se, 1.0)
    return {
        "gamma": gamma,
        "predicted": theory.speedup(alpha, gamma, c, r),
        "predicted_low": theory.speedup(lo, gamma, c, r),
        "predicted_high": theory.speedup(hi, gamma, c, r),
    }


def free_verification(alpha, alpha_se, c, curve):
    """Ignores the measured curve: r = 1, the paper's assumption."""
    gamma = max(range(1, len(curve)), key=lambda g: theory.speedup(alpha, g, c))
    return _speedups(alpha, alpha_se, c, 1.0, gamma)


def off_by_one_verify(alpha, alpha_se, c, curve):
    """Prices a step's verification at t(γ) / t(1), curve[γ − 1]: γ tokens instead of γ + 1."""
    gamma = max(range(1, len(curve)), key=lambda g: theory.speedup(alpha, g, c, curve[g - 1]))
    return _speedups(alpha, alpha_se, c, curve[gamma - 1], gamma)


def most_tokens(alpha, alpha_se, c, curve):
    """Picks the γ with the most tokens per call: every draft looks free (over-speculating)."""
    gamma = len(curve) - 1
    return _speedups(alpha, alpha_se, c, curve[gamma], gamma)


def best_of_range(alpha, alpha_se, c, curve):
    """Right γ, but quotes the top of the range as the prediction (a best-of)."""
    gamma = max(range(1, len(curve)), key=lambda g: theory.speedup(alpha, g, c, curve[g]))
    plan = _speedups(alpha, alpha_se, c, curve[gamma], gamma)
    plan["predicted"] = plan["predicted_high"]
    return plan


def one_standard_error(alpha, alpha_se, c, curve):
    """Right γ and prediction, but a range of ± 1 standard error."""
    gamma = max(range(1, len(curve)), key=lambda g: theory.speedup(alpha, g, c, curve[g]))
    return _speedups(alpha, alpha_se / 2, c, curve[gamma], gamma)


def re_optimises_the_ends(alpha, alpha_se, c, curve):
    """Chooses a new best γ at each end of the range (the range of a different plan)."""
    plan = best_of_range(alpha, alpha_se, c, curve)
    plan["predicted"] = theory.speedup(alpha, plan["gamma"], c, curve[plan["gamma"]])
    lo, hi = max(alpha - 2 * alpha_se, 0.0), min(alpha + 2 * alpha_se, 1.0)
    plan["predicted_low"] = max(theory.speedup(lo, g, c, curve[g]) for g in range(1, len(curve)))
    plan["predicted_high"] = max(theory.speedup(hi, g, c, curve[g]) for g in range(1, len(curve)))
    return plan


def library_plan(alpha, alpha_se, c, curve):
    """Right, but by calling the library's plan: the exercise is to make it."""
    return capstone.best_plan(alpha, alpha_se, c, curve)


WRONG_ANSWERS["7.2"] = {
    "calls capstone.best_plan": library_plan,
    "ignores the verification curve (r = 1)": free_verification,
    "verification priced at t(γ) (off by one)": off_by_one_verify,
    "most tokens per call": most_tokens,
    "the top of the range as the prediction": best_of_range,
    "± 1 SE instead of ± 2 SE": one_standard_error,
    "a new γ at each end of the range": re_optimises_the_ends,
}
