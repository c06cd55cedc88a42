"""Plausible wrong answers to the exercises of notebooks/04_speedup_theory.ipynb.

tests/course/test_exercises.py binds each one to the exercise's answer name in the student notebook and
re-runs the check cell, which must fail with an ``AssertionError("Exercise N: ...")``.
See `specdec_lab.course.exercises` for the format.
"""

from specdec_lab import theory


def _invert(tokens, gamma):
    """α with E[tokens](α) = tokens, by bisection (what a student writes; the check refuses the
    library's `theory.alpha_from_tokens_per_call`)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if theory.expected_tokens(mid, gamma) < tokens else (lo, mid)
    return (lo + hi) / 2


def alpha_equals_c(gamma, c, r=1.0):
    """Corollary 3.9 applied blindly: α* = c (true only for γ = 1 and free verification)."""
    return c


def ignores_verify_cost(gamma, c, r=1.0):
    """Solves E[tokens](α) = γc + 1: the paper's free verification, whatever r was measured."""
    cost = gamma * c + 1
    return None if cost >= gamma + 1 else _invert(cost, gamma)


def forgets_the_target_token(gamma, c, r=1.0):
    """Solves E[accepted drafts](α) = γc + r: the notation trap (drops the +1)."""
    cost = gamma * c + r + 1
    return None if cost >= gamma + 1 else _invert(cost, gamma)


def off_by_one_gamma(gamma, c, r=1.0):
    """Inverts the tokens per call of γ − 1 drafts instead of γ."""
    cost = gamma * c + r
    if cost >= gamma:
        return None
    return _invert(cost, gamma - 1) if gamma > 1 else 0.0


def _fit_alpha(tokens_per_call):
    """The right fit (the check refuses the library's inversion, so invert by hand)."""
    alphas = [_invert(t, g) for g, t in tokens_per_call.items()]
    return sum(alphas) / len(alphas)


def library_fit(tokens_per_call, t_draft, t_target):
    """Right, but fits α with the library's inversion: the exercise is to invert E[tokens]."""
    alphas = [theory.alpha_from_tokens_per_call(t, g) for g, t in tokens_per_call.items()]
    alpha = sum(alphas) / len(alphas)
    return max(range(1, 65), key=lambda g: theory.speedup(alpha, g, t_draft / t_target))


def _break_even(gamma, c, r=1.0):
    """A right answer to Exercise 4.1, to pair with a malformed prediction."""
    cost = gamma * c + r
    if cost >= gamma + 1:
        return None
    return 0.0 if cost <= 1 else _invert(cost, gamma)


def inverted_c(tokens_per_call, t_draft, t_target):
    """c = t_target / t_draft: the cost ratio upside down."""
    alpha = _fit_alpha(tokens_per_call)
    return theory.optimal_gamma(alpha, t_target / t_draft)


def zero_based_gamma(tokens_per_call, t_draft, t_target):
    """Returns the index of the best γ in range(64), one less than the γ itself."""
    alpha, c = _fit_alpha(tokens_per_call), t_draft / t_target
    return max(range(64), key=lambda i: theory.speedup(alpha, i + 1, c))


def ignores_draft_cost(tokens_per_call, t_draft, t_target):
    """Maximises tokens per call: every extra draft looks free (over-speculating)."""
    alpha = _fit_alpha(tokens_per_call)
    return max(range(1, 65), key=lambda g: theory.expected_tokens(alpha, g))


def accepted_share(tokens_per_call, t_draft, t_target):
    """α = (tokens per call − 1) / γ: the share of drafts accepted, a biased estimate of α."""
    alpha = sum((t - 1) / g for g, t in tokens_per_call.items()) / len(tokens_per_call)
    return theory.optimal_gamma(alpha, t_draft / t_target)


def endless_draft(tokens_per_call, t_draft, t_target):
    """α = 1 − 1 / tokens per call: inverts the γ → ∞ limit 1 / (1 − α) instead of the formula."""
    alpha = sum(1 - 1 / t for t in tokens_per_call.values()) / len(tokens_per_call)
    return theory.optimal_gamma(alpha, t_draft / t_target)


def naive_alpha(tokens_per_call, t_draft, t_target):
    """α = tokens per call / (γ + 1): reads the share of a full block as the acceptance rate."""
    alpha = sum(t / (g + 1) for g, t in tokens_per_call.items()) / len(tokens_per_call)
    return theory.optimal_gamma(alpha, t_draft / t_target)


def library_inversion(gamma, c, r=1.0):
    """Right, but by calling the library's inversion: the exercise is to invert E[tokens]."""
    cost = gamma * c + r
    if cost >= gamma + 1:
        return None
    return 0.0 if cost <= 1 else theory.alpha_from_tokens_per_call(cost, gamma)


WRONG_ANSWERS = {
    "4.1": {  # two answer names: the prediction stays as the student left it
        "α* = c": {"break_even_alpha": alpha_equals_c},
        "ignores the verification cost r": {"break_even_alpha": ignores_verify_cost},
        "forgets the target's token (+1)": {"break_even_alpha": forgets_the_target_token},
        "off-by-one γ": {"break_even_alpha": off_by_one_gamma},
        "calls theory.alpha_from_tokens_per_call": {"break_even_alpha": library_inversion},
        "a prediction that is neither 'faster' nor 'slower'": {
            "break_even_alpha": _break_even,
            "prediction_4_1": "about the same",
        },
    },
    "4.2": {
        "c upside down": inverted_c,
        "0-based γ (off by one)": zero_based_gamma,
        "ignores the draft's cost": ignores_draft_cost,
        "α = tokens per call / (γ + 1)": naive_alpha,
        "α = (tokens per call − 1) / γ": accepted_share,
        "α = 1 − 1 / tokens per call": endless_draft,
        "calls theory.alpha_from_tokens_per_call": library_fit,
    },
}


def _best_gamma(alpha, c, r):
    return max(range(1, 65), key=lambda g: theory.speedup(alpha, g, c, r))


def highest_alpha(candidates, r=1.0):
    """Deploys the draft that guesses best, at its best γ: forgets what it costs."""
    name = max(candidates, key=lambda n: candidates[n][0])
    return name, _best_gamma(*candidates[name], r)


def cheapest(candidates, r=1.0):
    """Deploys the cheapest draft, at its best γ: forgets how often it is accepted."""
    name = min(candidates, key=lambda n: candidates[n][1])
    return name, _best_gamma(*candidates[name], r)


def alpha_minus_c(candidates, r=1.0):
    """Ranks drafts by the break-even margin α − c, then picks γ."""
    name = max(candidates, key=lambda n: candidates[n][0] - candidates[n][1])
    return name, _best_gamma(*candidates[name], r)


def free_verification(candidates, r=1.0):
    """Ignores the measured verification cost: r = 1 always."""
    options = [(n, g) for n in candidates for g in range(1, 65)]
    return max(
        options, key=lambda o: theory.speedup(candidates[o[0]][0], o[1], candidates[o[0]][1])
    )


def rank_at_four_then_tune(candidates, r=1.0):
    """Ranks the drafts at γ = 4, then tunes γ for the winner."""
    name = max(candidates, key=lambda n: theory.speedup(*candidates[n][:1], 4, candidates[n][1], r))
    return name, _best_gamma(*candidates[name], r)


def zero_based_choice(candidates, r=1.0):
    """Right draft, but γ as an index into range(64): one less than the best γ."""
    options = [(n, i) for n in candidates for i in range(64)]
    return max(
        options, key=lambda o: theory.speedup(candidates[o[0]][0], o[1] + 1, candidates[o[0]][1], r)
    )


def _choose(candidates, r=1.0):
    """A right answer to Exercise 4.3, to pair with a malformed prediction."""
    options = [(n, g) for n in candidates for g in range(1, 65)]
    return max(
        options, key=lambda o: theory.speedup(candidates[o[0]][0], o[1], candidates[o[0]][1], r)
    )


WRONG_ANSWERS["4.3"] = {  # two answer names: the prediction stays as the student left it
    "highest α": {"choose_draft": highest_alpha},
    "lowest c": {"choose_draft": cheapest},
    "largest α − c": {"choose_draft": alpha_minus_c},
    "ignores the verification cost r": {"choose_draft": free_verification},
    "0-based γ (off by one)": {"choose_draft": zero_based_choice},
    "rank the drafts at γ = 4, then tune γ": {"choose_draft": rank_at_four_then_tune},
    "a prediction that names no draft": {"choose_draft": _choose, "prediction_4_3": "the cheapest"},
}


def highest_speedup(per_dtype):
    """Picks the dtype with the highest expected speedup: forgets that each has its own baseline."""
    return max(per_dtype, key=lambda name: per_dtype[name][1])


def shortest_t1(per_dtype):
    """Picks the dtype with the fastest one-token forward: forgets what speculation adds."""
    return min(per_dtype, key=lambda name: per_dtype[name][0])


def speedup_times_t1(per_dtype):
    """Multiplies where it should divide: speedup × t(1)."""
    return max(per_dtype, key=lambda name: per_dtype[name][1] * per_dtype[name][0])


def t1_over_speedup(per_dtype):
    """Divides the wrong way: the largest t(1) / speedup, i.e. the most time per token."""
    return max(per_dtype, key=lambda name: per_dtype[name][0] / per_dtype[name][1])


WRONG_ANSWERS["4.4"] = {
    "highest speedup": highest_speedup,
    "shortest t(1)": shortest_t1,
    "speedup × t(1)": speedup_times_t1,
    "t(1) / speedup (divided the wrong way)": t1_over_speedup,
}
