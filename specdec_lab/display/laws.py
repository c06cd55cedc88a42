"""Distributions and TV: an empirical law against the exact one, and TV against sample size."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from specdec_lab.display.figures import axes_or_own_figure
from specdec_lab.proof.stats import tv_distance, tv_tolerance


@dataclass
class LawPlot:
    """What `plot_law` drew: outcome labels, the exact law, the empirical law and their TV."""

    labels: list[str]
    exact: np.ndarray
    empirical: np.ndarray
    tv: float


def plot_law(
    exact: Sequence[float] | np.ndarray,
    empirical: Sequence[float] | np.ndarray,
    *,
    ax: Any = None,
    labels: Sequence[str] | None = None,
    title: str | None = None,
) -> LawPlot:
    """Bars of an empirical distribution next to the exact law. exact, empirical: (k,)."""
    exact = np.asarray(exact, dtype=float)
    empirical = np.asarray(empirical, dtype=float)
    if exact.shape != empirical.shape or exact.ndim != 1:
        raise ValueError(f"need two (k,) arrays, got {exact.shape} and {empirical.shape}")
    labels = [str(i) for i in range(len(exact))] if labels is None else [str(s) for s in labels]
    if len(labels) != len(exact):
        raise ValueError(f"{len(labels)} labels for {len(exact)} outcomes")
    tv = tv_distance(empirical, exact)
    with axes_or_own_figure(ax) as ax:
        x = np.arange(len(exact))
        ax.bar(x - 0.2, exact, width=0.4, label="exact law", color="#8c959f")
        ax.bar(x + 0.2, empirical, width=0.4, label="empirical", color="#0969da")
        ax.set_xticks(x, labels, rotation=90 if len(labels) > 12 else 0, fontsize="small")
        ax.set_ylabel("probability")
        ax.set_title(f"{title + ': ' if title else ''}TV = {tv:.3f}", fontsize="medium")
        ax.legend(fontsize="small")
    return LawPlot(labels=labels, exact=exact, empirical=empirical, tv=tv)


def prefix_tv(outcomes: Sequence[int] | np.ndarray, exact: Sequence[float], ns: Iterable[int]):
    """TV between the law of the first n outcomes (N,) in [0, k) and `exact` (k,), per n in `ns`."""
    outcomes = np.asarray(outcomes, dtype=np.int64)
    exact = np.asarray(exact, dtype=float)
    ns = [int(n) for n in ns]
    if any(n < 1 or n > len(outcomes) for n in ns):
        raise ValueError(f"every n must lie in [1, {len(outcomes)}]")
    if outcomes.size and (outcomes.min() < 0 or outcomes.max() >= len(exact)):
        raise ValueError(f"outcomes must lie in [0, {len(exact)})")
    k = len(exact)
    return np.array([tv_distance(np.bincount(outcomes[:n], minlength=k) / n, exact) for n in ns])


@dataclass
class TVPlot:
    """What `plot_tv_vs_n` drew: sample sizes, the TV of each curve, and the bound at each n."""

    ns: np.ndarray
    curves: dict[str, np.ndarray]
    bound: np.ndarray
    delta: float
    n_outcomes: int


def plot_tv_vs_n(
    ns: Sequence[int] | np.ndarray,
    curves: dict[str, Sequence[float] | np.ndarray],
    *,
    delta: float,
    n_outcomes: int,
    ax: Any = None,
) -> TVPlot:
    """TV against the number of samples on log-log axes, with the bound `stats.tv_tolerance`
    that a correct sampler stays below; a broken sampler's TV levels off and crosses it."""
    ns = np.asarray(ns, dtype=float)
    curves = {name: np.asarray(tv, dtype=float) for name, tv in curves.items()}
    for name, tv in curves.items():
        if tv.shape != ns.shape:
            raise ValueError(f"curve {name!r} has shape {tv.shape}, ns has {ns.shape}")
    bound = np.array([tv_tolerance(int(n), delta, n_outcomes) for n in ns])
    with axes_or_own_figure(ax) as ax:
        for name, tv in curves.items():
            ax.loglog(ns, tv, "o-", ms=3, label=name)
        ax.loglog(ns, bound, "k--", label=f"bound (δ = {delta:g}) ∝ 1/√N")
        ax.set_xlabel("samples N")
        ax.set_ylabel("TV(empirical, exact)")
        ax.legend(fontsize="small")
    return TVPlot(ns=ns, curves=curves, bound=bound, delta=delta, n_outcomes=n_outcomes)
