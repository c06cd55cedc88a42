"""The check of notebooks/03_acceptance_rates.ipynb: Exercise 3.1 (every greedy step predicted
from two forward passes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from specdec_lab.course.checks.harness import call_answer, require_prediction


def exercise_3_1(
    expected_step_tokens: Callable[[torch.Tensor, int], float],
    prediction: float,
    prompts: list[torch.Tensor],
    greedy_runs: list[Any],
    own_sample_alpha: Callable[..., torch.Tensor],
    gamma: int,
) -> float:
    """Exercise 3.1: hand-worked cases, then every full-γ step of the greedy runs predicted from
    α_t at T = 0 along each output. Returns the fraction of steps matched exactly."""
    toy = [  # (alpha_t, γ, expected tokens, what a wrong answer usually forgot)
        (torch.full((4,), 0.5), 4, 1 + 0.5 + 0.25 + 0.125 + 0.0625, "a geometric sum"),
        (torch.tensor([1.0, 1.0, 0.0, 1.0, 1.0]), 4, 3.0, "drafts after a rejection never count"),
        (
            torch.tensor([0.9, 0.1, 1.0, 1.0, 1.0, 1.0]),
            3,
            1 + 0.9 + 0.09 + 0.09,
            "use γ entries only",
        ),
        (torch.tensor([1.0, 1.0, 1.0]), 3, 4.0, "all accepted: the bonus token too"),
    ]
    for alpha_t, g, want, why in toy:
        got = float(call_answer("3.1", expected_step_tokens, alpha_t.clone(), g))
        assert abs(got - want) < 1e-6, (
            f"Exercise 3.1: for α_t = {alpha_t.tolist()} and γ = {g} expect {want:.4f}, got "
            f"{got:.4f} ({why})"
        )
    matches, checked = 0, 0
    for ids, run in zip(prompts, greedy_runs, strict=True):
        # α_t at T = 0 for a draft at each output position: 1 iff the draft's argmax is the target's
        alpha_out = own_sample_alpha(ids, run, temperature=0.0)  # (n_new,)
        pos = 0
        for step in run.stats.steps:
            g, n = len(step.draft_tokens), step.n_accepted
            if g == gamma:
                matches += abs(float(expected_step_tokens(alpha_out[pos:], g)) - (n + 1)) < 1e-6
                checked += 1
            pos += n + 1
    fraction = matches / checked
    assert fraction >= 0.95, (  # a near-tie may flip an argmax between the two computations
        f"Exercise 3.1: your predictions match only {matches} of {checked} greedy steps"
    )
    require_prediction("3.1", prediction)
    print(
        f"your formula predicts {matches} of {checked} full-γ greedy steps exactly ({fraction:.1%}); "
        f"you predicted {prediction:.0%}"
    )
    print("Exercise 3.1: correct!")
    return fraction
