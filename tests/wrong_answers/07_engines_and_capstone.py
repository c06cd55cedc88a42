"""Plausible wrong answers to the exercises of notebooks/07_engines_and_capstone.ipynb.

tests/course/test_exercises.py binds each one to the exercise's answer names in the student notebook and
re-runs the check cell, which must fail with an ``AssertionError("Exercise N: ...")``.
See `specdec_lab.course.exercises` for the format.
"""

from specdec_lab import theory
from specdec_lab.measure import capstone


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


def _examined(num_drafts, accepted_per_pos):
    return num_drafts + sum(accepted_per_pos[:-1])  # Exercise 7.1's count: every draft γ long


def no_interval(num_drafts, num_draft_tokens, accepted_per_pos):
    """Exercise 7.1's α̂ at both ends: ignores that some drafts were shorter than γ."""
    alpha = sum(accepted_per_pos) / _examined(num_drafts, accepted_per_pos)
    return alpha, alpha


def accept_share_low(num_drafts, num_draft_tokens, accepted_per_pos):
    """accept % (accepted over drafted tokens) as the low end."""
    gamma, accepted = len(accepted_per_pos), sum(accepted_per_pos)
    short = min(gamma * num_drafts - num_draft_tokens, accepted_per_pos[0] - accepted_per_pos[-1])
    return accepted / num_draft_tokens, accepted / (_examined(num_drafts, accepted_per_pos) - short)


def uncapped_short(num_drafts, num_draft_tokens, accepted_per_pos):
    """Counts γN − D short drafts accepted to their end, whatever the per-position counts say."""
    gamma, accepted = len(accepted_per_pos), sum(accepted_per_pos)
    examined = _examined(num_drafts, accepted_per_pos)
    return accepted / examined, accepted / (examined - (gamma * num_drafts - num_draft_tokens))


def capped_by_unfinished_drafts(num_drafts, num_draft_tokens, accepted_per_pos):
    """Caps the short drafts by the N − a_{γ−1} drafts not accepted at position γ − 1, forgetting
    that one accepted to its end accepted its first token too (a_0 − a_{γ−1})."""
    gamma, accepted = len(accepted_per_pos), sum(accepted_per_pos)
    examined = _examined(num_drafts, accepted_per_pos)
    short = min(gamma * num_drafts - num_draft_tokens, num_drafts - accepted_per_pos[-1])
    return accepted / examined, accepted / (examined - short)


def every_unfinished_draft_short(num_drafts, num_draft_tokens, accepted_per_pos):
    """Counts every draft not accepted at position γ − 1 as short, ignoring γN − D."""
    accepted, examined = sum(accepted_per_pos), _examined(num_drafts, accepted_per_pos)
    return accepted / examined, accepted / (examined - (num_drafts - accepted_per_pos[-1]))


def short_drafts_examined_more(num_drafts, num_draft_tokens, accepted_per_pos):
    """Adds the short drafts to the examined ones instead of removing them."""
    gamma, accepted = len(accepted_per_pos), sum(accepted_per_pos)
    examined = _examined(num_drafts, accepted_per_pos)
    short = min(gamma * num_drafts - num_draft_tokens, accepted_per_pos[0] - accepted_per_pos[-1])
    return accepted / (examined + short), accepted / examined


def ends_swapped(num_drafts, num_draft_tokens, accepted_per_pos):
    """Right ends, wrong order: (high, low)."""
    return tuple(reversed(_alpha_range(num_drafts, num_draft_tokens, accepted_per_pos)))


def _alpha_range(num_drafts, num_draft_tokens, accepted_per_pos):
    gamma, accepted = len(accepted_per_pos), sum(accepted_per_pos)
    examined = _examined(num_drafts, accepted_per_pos)
    short = min(gamma * num_drafts - num_draft_tokens, accepted_per_pos[0] - accepted_per_pos[-1])
    return accepted / examined, accepted / (examined - short)


def library_range(num_drafts, num_draft_tokens, accepted_per_pos):
    """Right, but by calling the library's version: the exercise is to derive it."""
    return capstone.alpha_range(num_drafts, num_draft_tokens, accepted_per_pos)


WRONG_ANSWERS["7.3"] = {
    "calls capstone.alpha_range": {"alpha_range": library_range},
    "no interval: Exercise 7.1's α̂ twice": {"alpha_range": no_interval},
    "accept % as the low end": {"alpha_range": accept_share_low},
    "γN − D short drafts, uncapped": {"alpha_range": uncapped_short},
    "every unfinished draft counted short": {"alpha_range": every_unfinished_draft_short},
    "short drafts capped by N − a_{γ−1}": {"alpha_range": capped_by_unfinished_drafts},
    "short drafts add examinations": {"alpha_range": short_drafts_examined_more},
    "(high, low)": {"alpha_range": ends_swapped},
    "right range, a prediction that is not a choice": {
        "alpha_range": _alpha_range,
        "prediction_7_3": "5.44",
    },
}


def _speedups(alpha, se, c, r, gamma, first):
    lo, hi = max(alpha - 2 * se, 0.0), min(alpha + 2 * se, 1.0)
    return {
        "gamma": gamma,
        "predicted": theory.speedup(alpha, gamma, c, r, first),
        "predicted_low": theory.speedup(lo, gamma, c, r, first),
        "predicted_high": theory.speedup(hi, gamma, c, r, first),
    }


def _best(alpha, c, curve, first):
    return max(range(1, len(curve)), key=lambda g: theory.speedup(alpha, g, c, curve[g], first))


def free_verification(alpha, alpha_se, c, curve, first):
    """Ignores the measured curve: r = 1, the paper's assumption."""
    gamma = max(range(1, len(curve)), key=lambda g: theory.speedup(alpha, g, c, 1.0, first))
    return _speedups(alpha, alpha_se, c, 1.0, gamma, first)


def off_by_one_verify(alpha, alpha_se, c, curve, first):
    """Prices a step's verification at t(γ) / t(1), curve[γ − 1]: γ tokens instead of γ + 1."""
    gamma = max(
        range(1, len(curve)), key=lambda g: theory.speedup(alpha, g, c, curve[g - 1], first)
    )
    return _speedups(alpha, alpha_se, c, curve[gamma - 1], gamma, first)


def warm_first_step(alpha, alpha_se, c, curve, first):
    """Charges every drafting step c, the first of a round too (the paper's γc): the cold step
    after the target's verify is left out."""
    gamma = _best(alpha, c, curve, None)
    return _speedups(alpha, alpha_se, c, curve[gamma], gamma, None)


def every_step_cold(alpha, alpha_se, c, curve, first):
    """Charges every drafting step the first one's cost: γ · first."""
    gamma = _best(alpha, first, curve, None)
    return _speedups(alpha, alpha_se, first, curve[gamma], gamma, None)


def most_tokens(alpha, alpha_se, c, curve, first):
    """Picks the γ with the most tokens per call: every draft looks free (over-speculating)."""
    gamma = len(curve) - 1
    return _speedups(alpha, alpha_se, c, curve[gamma], gamma, first)


def best_of_range(alpha, alpha_se, c, curve, first):
    """Right γ, but quotes the top of the range as the prediction (a best-of)."""
    gamma = _best(alpha, c, curve, first)
    plan = _speedups(alpha, alpha_se, c, curve[gamma], gamma, first)
    plan["predicted"] = plan["predicted_high"]
    return plan


def one_standard_error(alpha, alpha_se, c, curve, first):
    """Right γ and prediction, but a range of ± 1 standard error."""
    gamma = _best(alpha, c, curve, first)
    return _speedups(alpha, alpha_se / 2, c, curve[gamma], gamma, first)


def re_optimises_the_ends(alpha, alpha_se, c, curve, first):
    """Chooses a new best γ at each end of the range (the range of a different plan)."""
    plan = best_of_range(alpha, alpha_se, c, curve, first)
    plan["predicted"] = theory.speedup(alpha, plan["gamma"], c, curve[plan["gamma"]], first)
    lo, hi = max(alpha - 2 * alpha_se, 0.0), min(alpha + 2 * alpha_se, 1.0)
    gammas = range(1, len(curve))
    plan["predicted_low"] = max(theory.speedup(lo, g, c, curve[g], first) for g in gammas)
    plan["predicted_high"] = max(theory.speedup(hi, g, c, curve[g], first) for g in gammas)
    return plan


def library_plan(alpha, alpha_se, c, curve, first):
    """Right, but by calling the library's plan: the exercise is to make it."""
    return capstone.best_plan(alpha, alpha_se, c, curve, first)


WRONG_ANSWERS["7.2"] = {
    "calls capstone.best_plan": library_plan,
    "ignores the verification curve (r = 1)": free_verification,
    "verification priced at t(γ) (off by one)": off_by_one_verify,
    "the first step charged c (warm)": warm_first_step,
    "every step charged the first's cost": every_step_cold,
    "most tokens per call": most_tokens,
    "the top of the range as the prediction": best_of_range,
    "± 1 SE instead of ± 2 SE": one_standard_error,
    "a new γ at each end of the range": re_optimises_the_ends,
}
