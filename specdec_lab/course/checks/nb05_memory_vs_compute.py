"""The checks of notebooks/05_memory_vs_compute.ipynb: Exercises 5.1 (reading the knee) and 5.2
(choosing γ for the device)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from specdec_lab import theory
from specdec_lab.course.checks.harness import call_answer, require_prediction
from specdec_lab.measure import profiling

# The library function that finds a knee, captured before any check can patch it.
_FIND_KNEE = profiling.find_knee
GAMMA_SHIFT_CHOICES = ("smaller", "the same", "larger")

WORKED_KNEE_NAME = "worked example"
WORKED_KNEE_KS = (1, 2, 4, 8, 16, 32, 64)
WORKED_KNEE_FASTEST_MS = (10.0, 9.6, 10.3, 10.6, 11.4, 10.7, 19.0)
WORKED_KNEE_MEDIAN_MS = (18.0, 9.8, 10.5, 10.9, 11.6, 11.0, 19.6)
"""Exercise 5.1's made-up sweep: the fastest and the median of three interleaved repeats at each k,
in ms; load met two of the k = 1 repeats. Read the robust way, t(k) / t(1) on the fastest repeats
(1.00 0.96 1.03 1.06 1.14 1.07 1.90), its fastest k is 2, it leaves a 10% band at k = 16 and dips
back in at 32: its knee is 8. Divided by the k = 1 median (18.0) instead, the row stays under 1.09
up to k = 64: the knee moves to 64, "γ = 63 for free"."""
KNEE_READING_MARGIN = 0.02
"""A reading counts when it is the knee for some band edge within this of 1 + tol."""


def _acceptable_knees(ks: list[int], curve: list[float], tol: float) -> set[int]:
    """The knees of `curve` for every band edge 1 + t, t within `KNEE_READING_MARGIN` of tol."""
    edges = np.linspace(tol - KNEE_READING_MARGIN, tol + KNEE_READING_MARGIN, 41)
    return {_FIND_KNEE(ks, curve, float(t)) for t in edges}


def _median_reading(
    ks: list[int], median: list[float] | None, fastest: list[float], tol: float, got: int
) -> str | None:
    """Why `got` is wrong when it is the knee of the curve divided by the k = 1 *median*."""
    if median is None or got != _FIND_KNEE(ks, [t / median[0] for t in median], tol):
        return None  # not the knee of t(k) / median t(1)
    return (
        f"k = {got} is the knee of the row divided by the k = 1 median ({median[0]:.3g} ms), which "
        f"load pushed above the fastest k = 1 repeat ({fastest[0]:.3g} ms) and which shrinks every "
        "ratio of the row. Divide by the fastest repeat: t(k) / t(1) on the fastest repeats"
    )


def _misreading(ks: list[int], curve: list[float], tol: float, got: int) -> str:
    """What reading `got` off `curve` most likely did wrong, in words."""
    ratios = [t / curve[0] for t in curve]
    out = next((i for i, r in enumerate(ratios) if r > 1 + tol), None)
    if out is not None and got == ks[out]:
        return (
            f"k = {got} is the first k outside the band (t/t(1) = {ratios[out]:.2f}): the knee "
            "is the last k inside it"
        )
    if out is not None and ks.index(got) > out:
        return (
            f"the curve leaves the band at k = {ks[out]}; a later k that dips back in does not "
            "count"
        )
    if got == ks[int(np.argmin(curve))]:
        return f"k = {got} is the fastest k, not the last one inside the band"
    return f"the curve is still inside the band (t/t(1) <= {1 + tol:.2f}) after k = {got}"


def exercise_5_1(
    knees: Any,
    ks: list[int],
    fastest_ms: dict[str, list[float]],
    tol: float,
    predicted_knee: int,
    median_ms: dict[str, list[float]] | None = None,
) -> dict[str, int]:
    """Exercise 5.1: the knees read off the worked sweep and off every measured curve, the knee of
    t(k) / t(1) on the *fastest* repeats (`fastest_ms`, ms at each k of `ks`: load can inflate a
    median of three, not their minimum) within `KNEE_READING_MARGIN`; given `median_ms`, a reading
    that only fits the median-normalised row is told so. `predicted_knee`: the roofline's, for
    the largest (last) model."""
    names = [WORKED_KNEE_NAME, *fastest_ms]
    assert isinstance(knees, dict), (
        f"Exercise 5.1: knees_5_1 must be a dict {{curve name: k}}, got {type(knees).__name__}"
    )
    assert set(knees) == set(names), (
        f"Exercise 5.1: knees_5_1 needs exactly the keys {names}, got {sorted(knees)}"
    )
    if missing := [name for name in names if knees[name] is None]:
        raise NotImplementedError(f"Exercise 5.1: read the knee of {missing} into knees_5_1")
    curves = {WORKED_KNEE_NAME: (list(WORKED_KNEE_KS), list(WORKED_KNEE_FASTEST_MS))}
    curves |= {name: (list(ks), list(ms)) for name, ms in fastest_ms.items()}
    medians = {WORKED_KNEE_NAME: list(WORKED_KNEE_MEDIAN_MS)} | dict(median_ms or {})
    for name in names:
        grid, curve = curves[name]
        got = knees[name]
        if isinstance(got, bool) or not isinstance(got, (int, np.integer)) or got not in grid:
            raise AssertionError(
                f"Exercise 5.1: {name}: {got!r} is not a k of the grid {grid}; the knee is a k "
                "that was measured"
            )
        if int(got) not in _acceptable_knees(grid, curve, tol):
            why = _median_reading(grid, medians.get(name), curve, tol, int(got))
            why = why or _misreading(grid, curve, tol, int(got))
            raise AssertionError(f"Exercise 5.1: {name}: {why}")
    largest = list(fastest_ms)[-1]
    for name in fastest_ms:
        k = int(knees[name])
        free = f"verifies γ = {k - 1} drafts for free" if k > 1 else "verifies nothing for free"
        print(f"{name:>14}: knee k = {k}, so it {free} (γ drafts are a k = γ + 1 forward)")
    print(f"the roofline predicted k = {predicted_knee} for {largest} (section 2)")
    print("Exercise 5.1: correct!")
    return {name: int(knees[name]) for name in names}


def exercise_5_2(
    best_gamma_on_device: Callable[..., int],
    prediction: str,
    curve: dict[str, list],
    c: float,
    draft_name: str,
    target_name: str,
) -> dict[float, tuple[int, int]]:
    """Exercise 5.2 on worked curves, then on the measured curve of the largest model: the
    learner's γ must be the best on that curve. Returns {α: (γ with the measured r, γ at r = 1)}."""
    ks = [1, 2, 4, 8, 16, 32, 64]
    for a, cc, lat, want in [
        (0.9, 0.02, [1.0, 1.0, 1.0, 1.0, 2.0, 4.0, 8.0], 7),  # free up to k = 8, then linear
        (0.8, 0.1, [1.0, 1.02, 1.05, 1.6, 2.8, 5.5, 11.0], 3),
    ]:
        got = call_answer("5.2", best_gamma_on_device, a, cc, list(ks), list(lat))
        assert got == want, (
            f"Exercise 5.2: with α={a}, c={cc} and latencies {lat}, the best γ is {want}, got {got}"
        )
    ks, lat = curve["ks"], curve["latency_s"]
    out = {}
    for a in (0.6, 0.8):
        got = call_answer("5.2", best_gamma_on_device, a, c, list(ks), list(lat))
        assert got + 1 in ks, f"Exercise 5.2: γ = {got} was not measured (γ + 1 is not in ks)"
        r_got = lat[ks.index(got + 1)] / lat[0]
        for k, t in zip(ks[1:], lat[1:], strict=True):
            assert (
                theory.speedup(a, got, c, r_got) >= theory.speedup(a, k - 1, c, t / lat[0]) - 1e-12
            ), f"Exercise 5.2: at α={a}, γ = {k - 1} beats your γ = {got} on the measured curve"
        free = max((k - 1 for k in ks[1:]), key=lambda g: theory.speedup(a, g, c))
        out[a] = (got, free)
    require_prediction("5.2", prediction, GAMMA_SHIFT_CHOICES)
    for a, (got, free) in out.items():
        print(
            f"α = {a}, c = {c:.3f} (draft {draft_name}, target {target_name}): best γ {got} with "
            f"your r(γ), {free} if verification were free (r = 1)"
        )
    print(f"you predicted: {prediction} than with r = 1")
    print("Exercise 5.2: correct!")
    return out
