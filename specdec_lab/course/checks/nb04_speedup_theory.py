"""The checks of notebooks/04_speedup_theory.ipynb: Exercises 4.1 (the break-even α), 4.2 (the
best γ from noisy logs), 4.3 (choosing the draft) and 4.4 (choosing the dtype)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from specdec_lab import decoding, theory
from specdec_lab.course.checks.harness import call_answer, refuse_delegation, require_prediction
from specdec_lab.measure import capstone, plan

SPEED_CHOICES = ("faster", "slower")


def exercise_4_1(
    break_even_alpha: Callable[..., float | None],
    prediction: str,
    gamma: int,
    c: float,
    r: float,
    alpha: float,
    measured_gain: float,
) -> float | None:
    """Exercise 4.1 on worked cases, then α* for the measured (γ, c, r) of draft-prose next to
    its α̂ (`alpha`) and its measured speedup on the clock (`measured_gain`)."""
    forbidden = {"alpha_from_tokens_per_call": (theory, "alpha_from_tokens_per_call")}
    guard = refuse_delegation("4.1", break_even_alpha, forbidden, "the inversion")
    for g, cc, rr in [(1, 0.2, 1.0), (4, 0.25, 1.2), (3, 0.1, 1.0), (8, 0.05, 1.5), (2, 0.3, 1.3)]:
        with guard:
            got = call_answer("4.1", break_even_alpha, g, cc, rr)
        assert got is not None and 0 <= got <= 1, (
            f"Exercise 4.1: γ={g}, c={cc}, r={rr} breaks even at some α in [0, 1], got {got}"
        )
        assert abs(theory.speedup(got, g, cc, rr) - 1) < 1e-6, (
            f"Exercise 4.1: at your α* = {got:.4f} (γ={g}, c={cc}, r={rr}) the speedup is "
            f"{theory.speedup(got, g, cc, rr):.4f}, not 1"
        )
    got = call_answer("4.1", break_even_alpha, 1, 0.3)
    assert got is not None and abs(got - 0.3) < 1e-6, (
        f"Exercise 4.1: with γ = 1 and r = 1, α* = c = 0.3; got {got}"
    )
    got = call_answer("4.1", break_even_alpha, 4, 1.0, 1.2)
    assert got is None, f"Exercise 4.1: γc + r = 5.2 > γ + 1 = 5: no α breaks even, got {got}"
    require_prediction("4.1", prediction, SPEED_CHOICES)
    with guard:
        star = break_even_alpha(gamma, c, r)
    verdict = "faster" if star is not None and alpha > star else "slower"
    shown = "none" if star is None else f"{star:.3f}"
    print(
        f"draft-prose on code: α* = {shown}, α̂ = {alpha:.3f}: the formula says {verdict}; you "
        f"predicted {prediction}; the clock measured {measured_gain:.2f}x"
    )
    print("Exercise 4.1: correct!")
    return star


def _acceptable_gammas(alpha: float, se: float, c: float, z: float = 4.0) -> set[int]:
    """Optimal γ for any α within z standard errors of `alpha`."""
    grid = np.linspace(max(alpha - z * se, 1e-3), min(alpha + z * se, 0.999), 200)
    return {theory.optimal_gamma(float(x), c) for x in grid}


def exercise_4_2(
    best_gamma_from_measurements: Callable[[dict, float, float], int],
    logged: dict[int, float],
    t_draft: float,
    t_target: float,
    counts: Any,
) -> int:
    """Exercise 4.2: exact logs on which the plausible wrong fits of α pick another γ, simulated
    noisy logs of a weak draft, and the real logs of §5 (`logged`, with the pooled `counts`).
    Inverting tokens per call is the exercise: `theory.alpha_from_tokens_per_call` is refused."""
    forbidden = {"alpha_from_tokens_per_call": (theory, "alpha_from_tokens_per_call")}
    guard = refuse_delegation(
        "4.2", best_gamma_from_measurements, forbidden, "the inversion of tokens per call"
    )
    cases = []
    for alpha, gammas, c in [(0.72, (1, 3, 8), 0.03), (0.68, (4, 8), 0.02)]:  # exact logs
        exact = {g: theory.expected_tokens(alpha, g) for g in gammas}
        cases.append((exact, c, 1.0, _acceptable_gammas(alpha, 0.005 / 4, c), f"α = {alpha}"))
    weak_steps = {  # α = 0.5, c = 0.25: γ = 1, 2, 3 differ
        g: _simulate_tokens(0.5, g, 400, torch.Generator().manual_seed(g)) for g in (1, 2, 4)
    }
    weak = decoding.GenerationStats(
        accepted=[int(t) - 1 for g in weak_steps for t in weak_steps[g]],
        gammas=[g for g in weak_steps for _ in weak_steps[g]],
    )
    weak_logs = {g: float(t.double().mean()) for g, t in weak_steps.items()}
    weak_se = capstone.binomial_se(weak.acceptance_rate, weak.trials)
    weak_ok = _acceptable_gammas(weak.acceptance_rate, weak_se, 0.25)
    cases.append((weak_logs, 0.25, 4.0, weak_ok, "a weak draft, noisy logs"))
    c, se = t_draft / t_target, capstone.binomial_se(counts.acceptance_rate, counts.trials)
    cases.append(
        (logged, c, t_target, _acceptable_gammas(counts.acceptance_rate, se, c), "§5's logs")
    )
    for tokens_per_call, c, t_t, ok, label in cases:
        with guard:
            got = call_answer(
                "4.2", best_gamma_from_measurements, dict(tokens_per_call), c * t_t, t_t
            )
        shown = {g: round(t, 3) for g, t in tokens_per_call.items()}
        assert got in ok, (
            f"Exercise 4.2 ({label}): for tokens per call {shown} and c = {c:.3f} the best γ is "
            f"{' or '.join(map(str, sorted(ok)))}, got {got}: fit α by inverting "
            "(1 − α^(γ+1)) / (1 − α) for each γ"
        )
    with guard:
        best = best_gamma_from_measurements(dict(logged), t_draft, t_target)
    print(f"on the logs of §5 your best γ is {best}")
    print("Exercise 4.2: correct!")
    return best


def _simulate_tokens(alpha: float, gamma: int, steps: int, generator: torch.Generator):
    """Tokens emitted by `steps` simulated steps, each a chain of Bernoulli(α) coins: (steps,)."""
    accept = (torch.rand(steps, gamma, generator=generator) < alpha).long()  # (steps, γ)
    return accept.cumprod(dim=1).sum(dim=1) + 1  # (steps,)


def exercise_4_3(
    choose_draft: Callable[..., tuple[str, int]],
    prediction: str,
    measured: dict[str, tuple[float, float]],
    r: float,
    gains: dict[str, float],
    gamma: int,
) -> tuple[str, int]:
    """Exercise 4.3 on worked cases where each plausible shortcut (highest α, lowest c, α − c,
    r = 1, ranking the drafts at one γ, then tuning γ) picks another answer; then §6's drafts, the
    `prediction` beside the formula's choice and the clock's ranking at `gamma` (`gains`)."""
    worked = [  # (candidates {name: (α, c)}, r, the best (name, γ), found by searching by hand)
        ({"small": (0.55, 0.02), "mid": (0.8, 0.1), "big": (0.95, 0.5)}, 1.0, ("mid", 6)),
        ({"cheap": (0.6, 0.01), "good": (0.8, 0.2)}, 1.0, ("cheap", 7)),
        ({"cheap": (0.6, 0.01), "good": (0.8, 0.2)}, 2.0, ("good", 6)),  # dear verification
        ({"cheap": (0.8, 0.01), "sharp": (0.95, 0.1)}, 1.0, ("sharp", 15)),  # γ = 4 ranks cheap
        ({"cheap": (0.75, 0.01), "sharp": (0.85, 0.08)}, 1.3, ("cheap", 12)),  # ... and sharp
    ]
    for candidates, rr, want in worked:
        got = tuple(call_answer("4.3", choose_draft, dict(candidates), rr))
        why = ""
        if got[0] != want[0]:
            why = ": compare every draft at its own best γ, not at one γ chosen in advance"
        assert got == want, (
            f"Exercise 4.3: for {candidates} and r = {rr} the best is {want}, got {got}{why}"
        )
    name, g = choose_draft(dict(measured), r)
    best = max(theory.speedup(a, k, c, r) for a, c in measured.values() for k in range(1, 65))
    assert abs(theory.speedup(measured[name][0], g, measured[name][1], r) - best) < 1e-12, (
        f"Exercise 4.3: ({name}, {g}) is not the best prediction for §6's drafts"
    )
    require_prediction("4.3", prediction, list(measured))
    fastest = max(gains, key=gains.get)
    print(
        f"on code, with r = {r:.2f}: you predicted {prediction}; the formula deploys {name} at "
        f"γ = {g}, predicted {best:.2f}x"
    )
    print(
        f"the clock at γ = {gamma} (§6): fastest {fastest} ({gains[fastest]:.2f}x); "
        + ", ".join(f"{n} {gains[n]:.2f}x" for n in sorted(gains, key=gains.get, reverse=True)[1:])
    )
    print("Exercise 4.3: correct!")
    return name, g


def _dtype_name(dtype: object) -> str:
    return str(dtype).removeprefix("torch.")


def exercise_4_4(pick_dtype: Callable[[dict], str], planned: dict[str, dict]) -> str:
    """Exercise 4.4 on worked cases where the highest speedup, the shortest t(1), speedup × t(1)
    and t(1) / speedup each pick another dtype; then each set of `planned` plans ({label: {dtype:
    `plan.Plan`}}: the records' and the learner's device's) against `plan.choose_dtype`. Returns
    the answer's pick on the last set."""
    worked = [  # ({name: (t(1) ms, expected speedup)}, the most tokens per second)
        ({"float32": (56.6, 1.25), "bfloat16": (42.7, 1.0)}, "bfloat16"),  # highest S is slower
        ({"float32": (50.0, 1.6), "bfloat16": (40.0, 1.1)}, "float32"),  # shortest t(1) is slower
        ({"a": (30.0, 1.0), "b": (45.0, 1.8), "c": (36.0, 1.5)}, "c"),
    ]
    for per_dtype, want in worked:
        got = call_answer("4.4", pick_dtype, dict(per_dtype))
        rates = ", ".join(f"{n} {1e3 * s / t:.1f}" for n, (t, s) in per_dtype.items())
        assert got == want, (
            f"Exercise 4.4: for {per_dtype} ((t(1) ms, speedup) per dtype) the most tokens per "
            f"second is {want}, got {got!r}: tokens per second are {rates}"
        )
    got = None
    for label, plans in planned.items():
        per_dtype = {_dtype_name(d): (p.costs.t1_ms, p.predicted) for d, p in plans.items()}
        want = _dtype_name(plan.choose_dtype(plans))
        got = call_answer("4.4", pick_dtype, dict(per_dtype))
        assert got == want, f"Exercise 4.4 ({label}): plan.choose_dtype picks {want}, got {got!r}"
        print(f"{label}: you pick {got}, as plan.choose_dtype does")
    print("Exercise 4.4: correct!")
    return got
