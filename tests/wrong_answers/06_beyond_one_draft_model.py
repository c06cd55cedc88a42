"""Plausible wrong answers to the exercises of notebooks/06_beyond_one_draft_model.ipynb.

tests/course/test_exercises.py binds each one to the exercise's answer name in the student notebook and
re-runs the check cell, which must fail with an ``AssertionError("Exercise N: ...")``.
See `specdec_lab.course.exercises` for the format.
"""

import torch

# --- Exercise 6.1: one of k candidates survives ----------------------------------------------


def _alpha(p, q):
    return float(torch.minimum(p, q).sum())


def independent_trials(p, q, k):
    """Treats the k rounds as k independent tries at the same α: the residual never changes."""
    return 1 - (1 - _alpha(p, q)) ** k


def k_times_alpha(p, q, k):
    """Adds the chances up."""
    return min(1.0, k * _alpha(p, q))


def alpha_only(p, q, k):
    """Ignores the extra candidates."""
    return _alpha(p, q)


def unnormalised_residual(p, q, k):
    """Moves on with max(0, p − q) without renormalising it."""
    reject = 1.0
    for _ in range(k):
        reject *= 1 - float(torch.minimum(p, q).sum())
        p = (p - q).clamp_min(0)
    return 1 - reject


# --- Exercise 6.2: the tree attention mask -----------------------------------------------------


def causal(parents):
    """The ordinary causal mask: every earlier node, cousins included."""
    n = len(parents)
    return torch.ones(n, n, dtype=torch.bool).tril()


def parent_only(parents):
    """Itself and its parent, forgetting the grandparents."""
    n = len(parents)
    mask = torch.eye(n, dtype=torch.bool)
    for i, parent in enumerate(parents):
        if parent >= 0:
            mask[i, parent] = True
    return mask


def ancestors_without_self(parents):
    """The ancestors, but not the node itself."""
    n = len(parents)
    mask = torch.eye(n, dtype=torch.bool)
    for i, parent in enumerate(parents):
        if parent >= 0:
            mask[i] |= mask[parent]
    return mask & ~torch.eye(n, dtype=torch.bool)


def delegates(parents):
    """Calls sessions.tree_ancestry, the function the exercise asks to write."""
    from specdec_lab.engine import sessions

    return sessions.tree_ancestry(parents)


WRONG_ANSWERS = {
    "6.1": {  # two answer names: the prediction stays as the student left it
        "independent trials, 1 − (1 − α)^k": {"accept_any": independent_trials},
        "k·α": {"accept_any": k_times_alpha},
        "α only": {"accept_any": alpha_only},
        "unnormalised residual": {"accept_any": unnormalised_residual},
    },
    "6.2": {
        "causal mask": causal,
        "parent only": parent_only,
        "ancestors without self": ancestors_without_self,
        "delegates to sessions.tree_ancestry": delegates,
    },
}
