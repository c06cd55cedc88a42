"""Measured methods and engines side by side, and the caveat that goes with greedy numbers."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specdec_lab import data
from specdec_lab.display.figures import axes_or_own_figure


@dataclass
class SideBySide:
    """What `plot_side_by_side` drew: methods (rows, top to bottom) and temperatures (bars);
    tokens_per_call, tokens_per_second and speedup (tokens per second over the baseline's at
    the same temperature: the length of a right-hand bar) are (methods, temperatures) arrays.
    Given per-prompt tokens per second, prompt_speedup is (methods, temperatures, prompts):
    each prompt's tokens per second over the baseline's on the same prompt (the dots), and
    low and high its least and greatest over the prompts (the whiskers); else all three None.
    legend: the one legend, drawn beside the right-hand axes, off the bars."""

    methods: list[str]
    temperatures: list[float]
    tokens_per_call: np.ndarray
    tokens_per_second: np.ndarray
    speedup: np.ndarray
    baseline: str
    prompt_speedup: np.ndarray | None = None
    low: np.ndarray | None = None
    high: np.ndarray | None = None
    legend: Any = None


def _side_by_side_cells(rows: list[tuple], baseline: str):
    """(methods, temperatures, {(T, method): (tokens/call, tokens/s, per-prompt tokens/s)})."""
    if any(len(r) not in (4, 5) for r in rows) or len({len(r) for r in rows}) > 1:
        raise ValueError(
            "each row is (temperature, method, tokens per target call, tokens/s), every row "
            "followed by its per-prompt tokens/s or none"
        )
    methods = list(dict.fromkeys(str(r[1]) for r in rows))
    temperatures = list(dict.fromkeys(float(r[0]) for r in rows))
    cells: dict[tuple[float, str], tuple[float, float, np.ndarray]] = {}
    for t, name, tpc, tps, *prompts in rows:
        key = (float(t), str(name))
        if key in cells:
            raise ValueError(f"two rows for {name!r} at T = {t:g}")
        cells[key] = (float(tpc), float(tps), np.asarray(prompts[0] if prompts else [], float))
    missing = [f"{m!r} at T = {t:g}" for t in temperatures for m in methods if (t, m) not in cells]
    if missing:
        raise ValueError(f"no row for {', '.join(missing)}")
    if baseline not in methods:
        raise ValueError(f"the baseline {baseline!r} is not among the methods {methods}")
    if len({c[2].shape for c in cells.values()}) > 1:
        raise ValueError("every row needs tokens/s on the same prompts")
    if any(np.any(cells[t, baseline][2] <= 0) for t in temperatures):
        raise ValueError(f"the baseline {baseline!r} needs tokens/s above 0 on every prompt")
    return methods, temperatures, cells


def plot_side_by_side(
    rows: Iterable[Sequence[Any]],
    *,
    baseline: str = "autoregressive",
    axes: Sequence[Any] | None = None,
) -> SideBySide:
    """Two panels from measured rows (temperature, method, tokens per target call, tokens/s
    [, tokens/s on each prompt]).

    Left: tokens per target call, what a method buys. Right: what it costs, as each method's
    speedup over `baseline` at its temperature (its tokens per second over the baseline's),
    the baseline at 1 as a dashed line. Given each prompt's tokens per second (the same prompts
    in every row), each prompt's speedup against the baseline on that prompt is a dot, and a
    whisker spans their least to their greatest: the spread the ranking must exceed. Every
    method needs a row at every temperature. The legend sits beside the right panel, off the
    bars. `axes`: two axes.
    """
    methods, temperatures, cells = _side_by_side_cells([tuple(r) for r in rows], baseline)
    per_call = np.array([[cells[t, m][0] for t in temperatures] for m in methods])
    per_second = np.array([[cells[t, m][1] for t in temperatures] for m in methods])
    speedup = per_second / per_second[methods.index(baseline)]
    prompt_speedup = low = high = None
    if cells[temperatures[0], baseline][2].size:
        prompt_speedup = np.array(
            [[cells[t, m][2] / cells[t, baseline][2] for t in temperatures] for m in methods]
        )
        low, high = prompt_speedup.min(axis=2), prompt_speedup.max(axis=2)

    figsize = (12, 0.5 * len(methods) * len(temperatures) + 1.5)
    with axes_or_own_figure(axes, 1, 2, figsize=figsize) as axes:
        ax_call, ax_time = axes
        y = np.arange(len(methods))
        height = 0.8 / len(temperatures)
        colours = ["#0969da", "#bf8700", "#8250df", "#1a7f37"]
        handles = []
        for j, t in enumerate(temperatures):
            offset = (j - (len(temperatures) - 1) / 2) * height
            label = "greedy (T = 0)" if t == 0 else f"T = {t:g}"
            colour = colours[j % len(colours)]
            handles.append(
                ax_call.barh(y + offset, per_call[:, j], height, color=colour, label=label)
            )
            ax_time.barh(y + offset, speedup[:, j], height, color=colour, label=label)
            ends = speedup[:, j]
            if prompt_speedup is not None:
                spread = ax_time.hlines(y + offset, low[:, j], high[:, j], color="k", lw=1.2)
                spread.set(gid=f"spread:{t:g}", label="least to greatest over the prompts")
                dots = ax_time.scatter(
                    prompt_speedup[:, j].ravel(),
                    np.repeat(y + offset, prompt_speedup.shape[2]),
                    s=9,
                    color="k",
                    zorder=3,
                    gid=f"prompts:{t:g}",
                    label="one prompt",
                )
                ends = np.maximum(ends, high[:, j])
            for x, yy, s in zip(ends, y + offset, speedup[:, j], strict=True):
                ax_time.annotate(
                    f"{s:.2f}×",
                    (x, yy),
                    xytext=(3, 0),
                    textcoords="offset points",
                    va="center",
                    fontsize="x-small",
                )
        if prompt_speedup is not None:
            handles += [dots, spread]
        for ax in axes:
            ax.set_yticks(y, methods)
            ax.invert_yaxis()
        ax_call.axvline(1, color="k", lw=0.8)
        ax_time.axvline(1, color="k", ls="--", lw=0.8)
        ax_call.set(xlabel="tokens per target call (what it buys)")
        ax_time.set(xlabel=f"speedup over {baseline}: bar all prompts, dot each (what it costs)")
        right = max(speedup.max(), high.max() if high is not None else 0)
        ax_time.set_xlim(0, right * 1.18)
        ax_time.set_yticklabels([])
        legend = ax_time.legend(
            handles=handles,
            loc="upper left",
            bbox_to_anchor=(1.02, 1.0),
            borderaxespad=0,
            fontsize="small",
        )
    return SideBySide(
        methods,
        temperatures,
        per_call,
        per_second,
        speedup,
        baseline,
        prompt_speedup,
        low,
        high,
        legend,
    )


@dataclass
class EnginePlot:
    """What `plot_engines` drew, one entry per engine (top to bottom): plain and speculative
    tokens per second, their ratio, and the verification curve r(k) = t(k) / t(1) at `ks`."""

    names: list[str]
    plain: np.ndarray  # (engines,) tokens per second
    speculative: np.ndarray  # (engines,) tokens per second
    speedup: np.ndarray  # (engines,) speculative / plain
    ks: list[int]
    r: np.ndarray  # (engines, len(ks))


def plot_engines(engines: dict[str, dict[str, Any]], *, axes: Sequence[Any] | None = None):
    """Two panels comparing engines on one pair: {name: {"plain": tokens/s, "speculative":
    tokens/s, "ks": [k, ...], "t_k": [seconds of a forward over k new tokens, ...]}}.

    Left: each engine's plain and speculative tokens per second, the speculative bar labelled
    with its speedup. Right: r(k) = t(k) / t(1), what verifying k − 1 drafts costs in one-token
    forwards, against r = 1 (free verification). Every engine needs the same ks, starting at 1.
    """
    names = list(engines)
    if not names:
        raise ValueError("no engines to plot")
    ks = [int(k) for k in engines[names[0]]["ks"]]
    for name, e in engines.items():
        if [int(k) for k in e["ks"]] != ks or len(e["t_k"]) != len(ks):
            raise ValueError(f"{name!r}: every engine needs t_k at the same ks {ks}")
    if ks[0] != 1:
        raise ValueError(f"ks must start at 1 (r is relative to one token), got {ks}")
    plain = np.array([float(engines[n]["plain"]) for n in names])
    speculative = np.array([float(engines[n]["speculative"]) for n in names])
    r = np.array([np.asarray(engines[n]["t_k"], float) / engines[n]["t_k"][0] for n in names])
    speedup = speculative / plain

    with axes_or_own_figure(axes, 1, 2, figsize=(11, 0.6 * len(names) + 2.2)) as axes:
        ax_speed, ax_r = axes
        y = np.arange(len(names))
        ax_speed.barh(y - 0.2, plain, 0.4, color="#8c959f", label="plain")
        bars = ax_speed.barh(y + 0.2, speculative, 0.4, color="#1a7f37", label="speculative")
        ax_speed.bar_label(bars, [f"{s:.2f}×" for s in speedup], fontsize="small", padding=2)
        ax_speed.set_yticks(y, names)
        ax_speed.invert_yaxis()
        ax_speed.set_xlim(0, max(plain.max(), speculative.max()) * 1.2)
        ax_speed.set(xlabel="tokens per second (× = speculative over plain)")
        ax_speed.legend(fontsize="small", loc="lower right")
        for name, row in zip(names, r, strict=True):
            ax_r.plot(ks, row, "o-", label=name)
        ax_r.axhline(1, color="gray", ls="--", lw=1, label="free verification")
        ax_r.set(xlabel="tokens per forward k", ylabel="r(k) = t(k) / t(1)")
        ax_r.set_xticks(ks, [str(k) for k in ks])
        ax_r.legend(fontsize="small")
    return EnginePlot(names, plain, speculative, speedup, ks, r)


def greedy_loop_note(training_log: str | Path | None = None) -> str:
    """One sentence, read from the training log ("quality"), on how much the embedded target's
    greedy text repeats itself: print it beside every greedy measurement."""
    quality = data.load_training_log(training_log)["quality"]["data/models/target"]
    return (
        "Greedy caveat: this target's greedy text loops. Over {n}-token greedy continuations of "
        "the 8 code prompts, a median {own:.0%} of 4-grams repeat an earlier one (human-written "
        "code: {human:.0%}; data/models/training.json), so greedy numbers flatter every drafter "
        "that copies repeats."
    ).format(
        n=quality["new_tokens"],
        own=quality["greedy_repeated_4gram_median"],
        human=quality["human_code_repeated_4gram_median"],
    )
