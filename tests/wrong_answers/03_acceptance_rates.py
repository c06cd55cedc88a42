"""Plausible wrong answers to the exercises of notebooks/03_acceptance_rates.ipynb.

tests/course/test_exercises.py binds each one to the exercise's answer name in the student notebook and
re-runs the check cell, which must fail with an ``AssertionError("Exercise N: ...")``.
See `specdec_lab.course.exercises` for the format.
"""

import torch

from specdec_lab import theory


def one_alpha_for_the_step(alpha_t, gamma):
    """The constant-α formula at the mean α of the step's positions (forgets that they differ)."""
    return theory.expected_tokens(float(alpha_t[:gamma].mean()), gamma)


def forgets_the_target_token(alpha_t, gamma):
    """Counts accepted drafts only: the notation trap (no +1 for the target's own token)."""
    return torch.cumprod(alpha_t[:gamma].double(), 0).sum().item()


def off_by_one_gamma(alpha_t, gamma):
    """Multiplies γ − 1 positions: never counts the bonus after a fully accepted block."""
    return 1.0 + torch.cumprod(alpha_t[: gamma - 1].double(), 0).sum().item()


def ignores_gamma(alpha_t, gamma):
    """Runs over every position it is given, as if the block had no end."""
    return 1.0 + torch.cumprod(alpha_t.double(), 0).sum().item()


def independent_drafts(alpha_t, gamma):
    """Adds each draft's own α, forgetting that draft i is examined only after 0..i−1 pass."""
    return 1.0 + alpha_t[:gamma].double().sum().item()


WRONG_ANSWERS = {
    "3.1": {  # two answer names: the prediction stays as the student left it
        "one α for the whole step": {"expected_step_tokens": one_alpha_for_the_step},
        "forgets the target's token (+1)": {"expected_step_tokens": forgets_the_target_token},
        "off-by-one γ": {"expected_step_tokens": off_by_one_gamma},
        "ignores γ": {"expected_step_tokens": ignores_gamma},
        "drafts as independent (no stop at the first rejection)": {
            "expected_step_tokens": independent_drafts
        },
    },
}
