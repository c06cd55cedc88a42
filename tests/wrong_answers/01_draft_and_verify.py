"""Plausible wrong answers to the exercises of notebooks/01_draft_and_verify.ipynb.

tests/course/test_exercises.py binds each one to the exercise's answer name in the student notebook and
re-runs the check cell, which must fail with an ``AssertionError("Exercise N: ...")``.
See `specdec_lab.course.exercises` for the format.
"""

import torch

from specdec_lab import sampling, verify


def _first_rejection(draft_tokens, q_probs, p_probs, generator, ratio=None):
    """Coins up front, as the exercise asks; the number of drafts kept."""
    gamma = len(draft_tokens)
    idx = torch.arange(gamma)
    u = torch.rand(gamma, generator=generator)  # (γ,)
    p_x, q_x = p_probs[idx, draft_tokens], q_probs[idx, draft_tokens]  # (γ,)
    accept = u * q_x < p_x if ratio is None else u < ratio(p_x, q_x)
    return gamma if bool(accept.all()) else int((~accept).nonzero()[0])


def correction_from_p(draft_tokens, q_probs, p_probs, generator=None):
    """Forgets the residual: after a rejection, samples the correction from p itself."""
    n = _first_rejection(draft_tokens, q_probs, p_probs, generator)
    return n, sampling.sample(p_probs[n], generator)


def correction_from_q(draft_tokens, q_probs, p_probs, generator=None):
    """After a rejection, samples the correction from the draft q."""
    n = _first_rejection(draft_tokens, q_probs, p_probs, generator)
    if n == len(draft_tokens):
        return n, sampling.sample(p_probs[n], generator)
    return n, sampling.sample(q_probs[n], generator)


def inverted_ratio(draft_tokens, q_probs, p_probs, generator=None):
    """Keeps a draft with probability min(1, q/p): the ratio upside down."""
    n = _first_rejection(
        draft_tokens, q_probs, p_probs, generator, ratio=lambda p, q: (q / p).clamp(max=1)
    )
    if n == len(draft_tokens):
        return n, sampling.sample(p_probs[n], generator)
    return n, sampling.sample(verify.residual_distribution(p_probs[n], q_probs[n]), generator)


def bonus_off_by_one(draft_tokens, q_probs, p_probs, generator=None):
    """Off-by-one γ: the bonus token is drawn from row γ − 1 of p instead of row γ."""
    n = _first_rejection(draft_tokens, q_probs, p_probs, generator)
    if n == len(draft_tokens):
        return n, sampling.sample(p_probs[n - 1], generator)
    return n, sampling.sample(verify.residual_distribution(p_probs[n], q_probs[n]), generator)


def no_nan_guard(p, q):
    """norm(max(0, p − q)) with no guard: 0/0 = NaN when p = q."""
    residual = (p - q).clamp_min(0)
    return residual / residual.sum()


def uniform_fallback(p, q):
    """Guards 0/0, but falls back to the uniform distribution instead of p."""
    residual = (p - q).clamp_min(0)
    if residual.sum() <= 0:
        return torch.full_like(p, 1 / p.shape[0])
    return residual / residual.sum()


def absolute_difference(p, q):
    """norm(|p − q|): forgets the max(0, ·)."""
    residual = (p - q).abs()
    return residual / residual.sum()


def delegates(draft_tokens, q_probs, p_probs, generator=None):
    """Calls the library function the exercise asks to write out."""
    return verify.rejection_sample(draft_tokens, q_probs, p_probs, generator)


def delegates_in_disguise(draft_tokens, q_probs, p_probs, generator=None):
    """Reaches the library function through an alias, so that its name is not in the source."""
    rule = getattr(verify, "rejection_" + "sample")
    return rule(draft_tokens, q_probs, p_probs, generator)


def residual_delegates(p, q):
    """Calls verify.residual_distribution, the function the exercise asks to write."""
    return verify.residual_distribution(p, q)


def off_by_one(alpha, gamma):
    """Counts tokens per step (n + 1) instead of drafts kept: γ − E[tokens per step]."""
    return gamma - (1 - alpha ** (gamma + 1)) / (1 - alpha)


def independent_rejections(alpha, gamma):
    """Forgets that a step stops at its first rejection: each draft lost with prob. 1 − α."""
    return gamma * (1 - alpha)


def forgets_the_cap(alpha, gamma):
    """E[n] of an unlimited run of accepts, α / (1 − α), as if γ were infinite."""
    return gamma - alpha / (1 - alpha)


WRONG_ANSWERS = {
    "1.1": {
        "correction from p (forgets the residual)": correction_from_p,
        "correction from q": correction_from_q,
        "min(1, q/p)": inverted_ratio,
        "bonus from row γ − 1 (off-by-one γ)": bonus_off_by_one,
        "delegates to verify.rejection_sample": delegates,
        "delegates through an alias": delegates_in_disguise,
    },
    "1.2": {
        "no NaN guard": no_nan_guard,
        "uniform fallback": uniform_fallback,
        "|p − q| instead of max(0, p − q)": absolute_difference,
        "delegates to verify.residual_distribution": residual_delegates,
    },
    "1.3": {  # two answer names: the prediction stays as the student left it
        "γ − E[tokens per step] (off by one)": {"predicted_discarded": off_by_one},
        "γ(1 − α) (no stop at the first rejection)": {
            "predicted_discarded": independent_rejections
        },
        "γ − α/(1 − α) (forgets the cap at γ)": {"predicted_discarded": forgets_the_cap},
    },
}
