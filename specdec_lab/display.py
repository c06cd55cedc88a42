"""Presentation helpers for the notebooks: accept/reject traces, law/TV plots, and pictures.

Notation of Leviathan et al. 2023 (arXiv:2211.17192): p = target, q = draft, γ = draft length.

- `trace(steps)` turns the `decoding.Step`s of a speculative run into a `Trace`, which renders as
  coloured HTML in a notebook (`_repr_html_`), with ANSI colours in a terminal (`.ansi()`), and as
  plain text with markers (`str`). Accepted drafts are green, the rejected draft is red and struck
  through, drafts after it (never examined) are grey and struck through, the target's
  correction after a rejection is blue and the bonus token after a fully accepted step is purple.
- `plot_law` and `plot_tv_vs_n` draw an empirical distribution against the exact law, and the
  total variation (TV) distance against the sample size with its 1/√N bound. They draw onto the
  `ax` they are given (the caller owns and shows the figure), or onto a new figure that is closed
  before returning, and they return the plotted numbers so notebooks assert on data, not pixels.
- `plot_step(step)` draws one speculative step from its `decoding.Step` record: the γ drafts,
  the ONE target call over γ+1 positions, the verdict on each draft, and the tokens it emits.
- `CacheWatch(session)` records a session's cache length around every `crop`; `plot_rollback`
  draws the caches before and after a step's rollback from those records.
- `plot_tree(tree)` draws a token tree (`tree.TokenTree`) beside its ancestry mask.
- `plot_side_by_side(rows)` draws methods' tokens per target call and tokens per second.
- `plot_engines(engines)` draws engines' plain and speculative tokens per second beside their
  verification curves r(k).
- `plain_log_ticks(ax)` labels log axes with plain numbers.

Nothing here changes a result or draws random numbers. (`measure.preview.first_look` runs a pair
and shows it with `trace`.)
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specdec_lab import data
from specdec_lab.engine.sessions import tree_ancestry, tree_depths
from specdec_lab.proof.stats import tv_distance, tv_tolerance

KINDS = ("accepted", "rejected", "discarded", "correction", "bonus")
"""What happened to a token in a speculative step (see `trace`)."""

OUTPUT_KINDS = ("accepted", "correction", "bonus")
"""The kinds that end up in the generated sequence."""

_HTML_STYLE = {
    "accepted": "color:#1a7f37; background:rgba(26,127,55,0.12)",
    "rejected": "color:#cf222e; background:rgba(207,34,46,0.12); text-decoration:line-through",
    "discarded": "color:#8c959f; text-decoration:line-through",
    "correction": "color:#0969da; background:rgba(9,105,218,0.12); font-weight:bold",
    "bonus": "color:#8250df; background:rgba(130,80,223,0.12); font-weight:bold",
}
ANSI = {  # SGR codes: 9 = strike-through, 1 = bold
    "accepted": "32",
    "rejected": "31;9",
    "discarded": "90;9",
    "correction": "1;34",
    "bonus": "1;35",
}
_PLAIN = {  # how `str(trace)` marks each kind without colour
    "accepted": "{}",
    "rejected": "~{}~",
    "discarded": "~{}~",
    "correction": "[{}]",
    "bonus": "<{}>",
}
LEGEND = {
    "accepted": "accepted draft",
    "rejected": "rejected draft",
    "discarded": "discarded draft",
    "correction": "target correction",
    "bonus": "bonus token",
}


@dataclass(frozen=True)
class Piece:
    """One token of a trace: its id, its text, what happened to it, and its step index."""

    token: int
    text: str
    kind: str
    step: int


@dataclass(frozen=True, repr=False)
class Trace:
    """A speculative run, token by token. Render it by leaving it last in a notebook cell.

    `pieces` lists every drafted or emitted token in order; `output_tokens` is the generated
    sequence (accepted drafts, corrections and bonus tokens), equal to `Generation.tokens`.
    """

    pieces: tuple[Piece, ...]
    prompt: str = ""
    sep: str = " "
    separators: bool = True

    @property
    def output_tokens(self) -> list[int]:
        return [p.token for p in self.pieces if p.kind in OUTPUT_KINDS]

    @property
    def output_text(self) -> str:
        return self.sep.join(p.text for p in self.pieces if p.kind in OUTPUT_KINDS)

    def counts(self) -> dict[str, int]:
        """How many tokens of each kind (every kind present, zeros included)."""
        out = dict.fromkeys(KINDS, 0)
        for p in self.pieces:
            out[p.kind] += 1
        return out

    def _join(self, render: Callable[[Piece], str], bar: str, prompt: str) -> str:
        parts: list[str] = [prompt] if prompt else []
        for i, piece in enumerate(self.pieces):
            if i and self.separators and piece.step != self.pieces[i - 1].step:
                parts.append(bar)
            parts.append(render(piece))
        return self.sep.join(parts)

    def plain(self) -> str:
        """Uncoloured text: ~rejected~, [correction], <bonus>, and | between steps."""
        return self._join(lambda p: _PLAIN[p.kind].format(p.text), "|", self.prompt)

    def ansi(self) -> str:
        """Text with ANSI colour codes, for `print` in a terminal."""
        prompt = f"\x1b[2m{self.prompt}\x1b[0m" if self.prompt else ""
        return self._join(
            lambda p: f"\x1b[{ANSI[p.kind]}m{p.text}\x1b[0m", "\x1b[90m|\x1b[0m", prompt
        )

    def html(self) -> str:
        """A self-contained HTML fragment (inline styles only) with a legend of counts."""

        def span(p: Piece) -> str:
            title = f"step {p.step}: {LEGEND[p.kind]}"
            return (
                f'<span style="{_HTML_STYLE[p.kind]}; border-radius:3px; padding:0 1px" '
                f'title="{title}">{html.escape(p.text)}</span>'
            )

        bar = '<span style="color:#8c959f">│</span>'
        prompt = (
            f'<span style="opacity:0.6">{html.escape(self.prompt)}</span>' if self.prompt else ""
        )
        body = self._join(span, bar, prompt)
        counts = self.counts()
        legend = " · ".join(
            f'<span style="{_HTML_STYLE[k]}">{LEGEND[k]}</span> {counts[k]}' for k in KINDS
        )
        return (
            '<div style="font-family:monospace; line-height:1.9; white-space:pre-wrap">'
            f"{body}</div>"
            f'<div style="font-family:sans-serif; font-size:0.85em; margin-top:4px">{legend}</div>'
        )

    def _repr_html_(self) -> str:
        return self.html()

    def __str__(self) -> str:
        return self.plain()

    def __repr__(self) -> str:  # the text/plain fallback of a notebook: short and readable
        counts = ", ".join(f"{k} {n}" for k, n in self.counts().items())
        return f"Trace({counts}):\n{self.plain()}"


def trace(
    steps: Iterable[Any],
    decode: Callable[[int], str] | None = None,
    *,
    prompt: str = "",
    sep: str = " ",
    separators: bool = True,
) -> Trace:
    """Build a `Trace` from `decoding.Step`s (`Generation.stats.steps`, or collected by `on_step`).

    A step that kept n of its γ drafts shows drafts[:n] as accepted; if n < γ, drafts[n] as
    rejected and drafts[n+1:] as discarded, then the target's token as a correction; if n = γ,
    the target's token as the bonus. `decode` maps a token id to its text (default: the id);
    use `sep=""` for tokenizer pieces that carry their own spaces.
    """
    decode = decode if decode is not None else str
    pieces: list[Piece] = []
    for i, step in enumerate(steps):
        drafts = [int(t) for t in step.draft_tokens]
        n = int(step.n_accepted)
        if not 0 <= n <= len(drafts):
            raise ValueError(f"step {i} accepts {n} of {len(drafts)} drafts")
        kinds = ["accepted"] * n
        if n < len(drafts):
            kinds += ["rejected"] + ["discarded"] * (len(drafts) - n - 1)
        pieces += [Piece(t, decode(t), k, i) for t, k in zip(drafts, kinds, strict=True)]
        last = "bonus" if n == len(drafts) else "correction"
        pieces.append(Piece(int(step.next_token), decode(int(step.next_token)), last, i))
    return Trace(tuple(pieces), prompt=prompt, sep=sep, separators=separators)


# --------------------------------------------------------------------------------------------
# Distributions and TV
# --------------------------------------------------------------------------------------------


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
    """Bars of an empirical distribution next to the exact law over the same outcomes.

    exact, empirical: (k,) probabilities. Draws onto `ax` if given (the caller shows the figure);
    otherwise onto a new figure that is closed before returning.
    """
    import matplotlib.pyplot as plt

    exact = np.asarray(exact, dtype=float)
    empirical = np.asarray(empirical, dtype=float)
    if exact.shape != empirical.shape or exact.ndim != 1:
        raise ValueError(f"need two (k,) arrays, got {exact.shape} and {empirical.shape}")
    labels = [str(i) for i in range(len(exact))] if labels is None else [str(s) for s in labels]
    if len(labels) != len(exact):
        raise ValueError(f"{len(labels)} labels for {len(exact)} outcomes")
    tv = tv_distance(empirical, exact)
    own = ax is None
    if own:
        fig, ax = plt.subplots()
    x = np.arange(len(exact))
    ax.bar(x - 0.2, exact, width=0.4, label="exact law", color="#8c959f")
    ax.bar(x + 0.2, empirical, width=0.4, label="empirical", color="#0969da")
    ax.set_xticks(x, labels, rotation=90 if len(labels) > 12 else 0, fontsize="small")
    ax.set_ylabel("probability")
    ax.set_title(f"{title + ': ' if title else ''}TV = {tv:.3f}", fontsize="medium")
    ax.legend(fontsize="small")
    if own:
        plt.close(fig)
    return LawPlot(labels=labels, exact=exact, empirical=empirical, tv=tv)


def prefix_tv(outcomes: Sequence[int] | np.ndarray, exact: Sequence[float], ns: Iterable[int]):
    """TV between the law of the first n outcomes and `exact`, for each n in `ns`.

    outcomes: (N,) integer outcomes in [0, k); exact: (k,). Returns a float array, one per n.
    """
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
    """TV against the number of samples on log-log axes, with the bound `stats.tv_tolerance`.

    The bound √((k ln 2 + ln(1/δ)) / (2N)) is the TV a correct sampler stays below with
    probability ≥ 1 − δ; a broken sampler's TV levels off at its true distance and crosses it.
    """
    import matplotlib.pyplot as plt

    ns = np.asarray(ns, dtype=float)
    curves = {name: np.asarray(tv, dtype=float) for name, tv in curves.items()}
    for name, tv in curves.items():
        if tv.shape != ns.shape:
            raise ValueError(f"curve {name!r} has shape {tv.shape}, ns has {ns.shape}")
    bound = np.array([tv_tolerance(int(n), delta, n_outcomes) for n in ns])
    own = ax is None
    if own:
        fig, ax = plt.subplots()
    for name, tv in curves.items():
        ax.loglog(ns, tv, "o-", ms=3, label=name)
    ax.loglog(ns, bound, "k--", label=f"bound (δ = {delta:g}) ∝ 1/√N")
    ax.set_xlabel("samples N")
    ax.set_ylabel("TV(empirical, exact)")
    ax.legend(fontsize="small")
    if own:
        plt.close(fig)
    return TVPlot(ns=ns, curves=curves, bound=bound, delta=delta, n_outcomes=n_outcomes)


# --------------------------------------------------------------------------------------------
# Pictures of the mechanism
# --------------------------------------------------------------------------------------------

COLOURS = {  # the trace's colours, for the pictures
    "accepted": "#1a7f37",
    "rejected": "#cf222e",
    "discarded": "#8c959f",
    "correction": "#0969da",
    "bonus": "#8250df",
}
_DRAFTED = "#fff8c5"  # a drafted token before the verdict


def _box(ax: Any, x: float, y: float, text: str, face: str, edge: str = "#57606a", **kw) -> Any:
    """A token cell centred on (x, y), one unit wide; returns the patch."""
    from matplotlib.patches import FancyBboxPatch

    gid = kw.pop("gid", None)
    patch = FancyBboxPatch(
        (x - 0.42, y - 0.3),
        0.84,
        0.6,
        boxstyle="round,pad=0.02",
        facecolor=face,
        edgecolor=edge,
        linestyle=kw.pop("linestyle", "-"),
        linewidth=kw.pop("linewidth", 1.0),
    )
    patch.set_gid(gid)
    ax.add_patch(patch)
    ax.text(x, y, text, ha="center", va="center", fontsize=kw.pop("fontsize", "small"), **kw)
    return patch


def _short(text: str, width: int = 8) -> str:
    """A token's text as a cell label: whitespace made visible, long pieces cut."""
    text = text.replace("\n", "⏎").replace(" ", "·") if text.strip() != text or not text else text
    return text if len(text) <= width else text[: width - 1] + "…"


@dataclass
class StepPlot:
    """What `plot_step` drew. Columns: drafts at 0..γ-1, the bonus position at γ.

    draft_kinds[i] is "accepted", "rejected" or "discarded" (never examined); emitted lists
    (column, token, kind) for the tokens the step adds to the text, kind "accepted",
    "correction" or "bonus"; scored is the number of positions the ONE target call scored (γ+1).
    """

    gamma: int
    n_accepted: int
    draft_tokens: list[int]
    draft_kinds: list[str]
    emitted: list[tuple[int, int, str]]
    scored: int
    accept_probs: list[float] | None

    @property
    def emitted_tokens(self) -> list[int]:
        return [token for _, token, _ in self.emitted]


def plot_step(
    step: Any,
    decode: Callable[[int], str] | None = None,
    *,
    context: Sequence[int] = (),
    accept_probs: Sequence[float] | None = None,
    ax: Any = None,
    title: str | None = None,
) -> StepPlot:
    """One speculative step as a schematic, from its record (`decoding.Step`).

    Four rows, top to bottom, as the step runs: 1. the draft proposes γ tokens (γ draft calls);
    2. the target scores the γ+1 positions after the accepted text in ONE call; 3. the verdict
    on each draft (kept, rejected, or never examined after a rejection), with min(1, p/q) if
    `accept_probs` (γ,) gives it; 4. the tokens the step emits: the kept drafts, then the
    target's correction at the rejected position or its bonus token after the last draft.
    `context`: the last few accepted token ids, shown before the drafts. Draws onto `ax` if
    given, else onto a new figure that is closed before returning.
    """
    import matplotlib.pyplot as plt

    decode = decode if decode is not None else str
    drafts = [int(t) for t in step.draft_tokens]
    g, n = len(drafts), int(step.n_accepted)
    if not 0 <= n <= g:
        raise ValueError(f"the step accepts {n} of {g} drafts")
    probs = None if accept_probs is None else [float(a) for a in accept_probs]
    if probs is not None and len(probs) != g:
        raise ValueError(f"{len(probs)} acceptance probabilities for {g} drafts")
    kinds = ["accepted"] * n + (["rejected"] + ["discarded"] * (g - n - 1) if n < g else [])
    last = "bonus" if n == g else "correction"
    emitted = [(i, drafts[i], "accepted") for i in range(n)] + [(n, int(step.next_token), last)]

    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(1.1 * (g + len(context)) + 4.5, 3.4))
    rows = {"draft": 3.0, "target": 2.0, "verdict": 1.0, "emit": 0.0}
    left = -len(context) - 0.5
    labels = {
        "draft": f"1. draft: {g} call{'s' * (g != 1)} of q",
        "target": f"2. target: ONE call, {g + 1} positions",
        "verdict": "3. accept or reject",
        "emit": f"4. emitted: {n + 1} token{'s' * (n != 0)}",
    }
    for name, y in rows.items():
        ax.text(left - 0.3, y, labels[name], ha="right", va="center", fontsize="small")
    for j, token in enumerate(context):  # the accepted text so far, on the draft row
        x = j - len(context)
        ax.text(
            x,
            rows["draft"],
            _short(decode(int(token))),
            ha="center",
            va="center",
            fontsize="small",
            color="#57606a",
        )
    for i, token in enumerate(drafts):
        _box(ax, i, rows["draft"], _short(decode(token)), _DRAFTED, gid=f"draft:{i}")
        mark = {"accepted": "✓ kept", "rejected": "✗ rejected", "discarded": "not\nexamined"}
        examined = probs is not None and kinds[i] != "discarded"
        text = mark[kinds[i]] + (f"\nP(keep) {min(probs[i], 1.0):.2f}" if examined else "")
        _box(
            ax,
            i,
            rows["verdict"],
            text,
            "white",
            COLOURS[kinds[i]],
            color=COLOURS[kinds[i]],
            fontsize="x-small",
            gid=f"verdict:{i}:{kinds[i]}",
            linewidth=1.5,
        )
    from matplotlib.patches import FancyBboxPatch

    call = FancyBboxPatch(
        (-0.45, rows["target"] - 0.3),
        g + 0.9,
        0.6,
        boxstyle="round,pad=0.02",
        facecolor="#ddf4ff",
        edgecolor="#0969da",
    )
    call.set_gid(f"target-call:{g + 1}")
    ax.add_patch(call)
    for i in range(g + 1):
        ax.text(
            i,
            rows["target"],
            f"p{_subscript(i + 1)}",
            ha="center",
            va="center",
            fontsize="small",
            color="#0969da",
        )
    for col, token, kind in emitted:
        _box(
            ax,
            col,
            rows["emit"],
            _short(decode(token)),
            COLOURS[kind],
            COLOURS[kind],
            color="white",
            fontweight="bold",
            gid=f"emit:{col}:{kind}",
        )
    ax.text(
        n + 0.55,
        rows["emit"],
        {"bonus": "bonus: from p at γ+1", "correction": "correction: from the residual"}[last],
        va="center",
        fontsize="x-small",
        color=COLOURS[last],
    )
    ax.set_xlim(left - 0.2, g + 2.6)
    ax.set_ylim(-0.6, 3.6)
    ax.axis("off")
    ax.set_title(
        title or f"one step: {n} of {g} drafts kept, {n + 1} tokens for one target call",
        fontsize="medium",
    )
    if own:
        plt.close(fig)
    return StepPlot(g, n, drafts, kinds, emitted, g + 1, probs)


def _subscript(number: int) -> str:
    return str(number).translate(str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉"))


_CACHED = "#dafbe1"  # a position held in a KV cache
_CROPPED = "#ffebe9"  # a position a rollback removes


class CacheWatch:
    """A session that records its cache length around every `crop`, and is otherwise the session.

    `crops` lists (cached before, cached after) per crop, read from the session's own `cached`
    counter; every other attribute and method is the wrapped session's. Pass it wherever a
    session goes (`decoding.speculative_step`, `drafters.ModelDrafter(watch)`).
    """

    def __init__(self, session: Any) -> None:
        if not hasattr(session, "cached"):
            raise TypeError(f"{type(session).__name__} has no `cached` counter to watch")
        self.session = session
        self.crops: list[tuple[int, int]] = []

    def crop(self, length: int) -> None:
        before = self.session.cached
        self.session.crop(length)
        self.crops.append((before, self.session.cached))

    def __getattr__(self, name: str) -> Any:  # only called for what CacheWatch itself lacks
        return getattr(self.session, name)


@dataclass
class RollbackPlot:
    """What `plot_rollback` drew, per session name: the cache length before and after the crop,
    the positions kept and cropped, and where the new token goes (position, id and kind)."""

    scored: list[int]
    accepted: list[int]
    caches: dict[str, tuple[int, int]]
    kept: dict[str, int]
    cropped: dict[str, list[int]]
    new_position: int
    new_token: int
    new_kind: str


def plot_rollback(
    prefix: Sequence[int] | Any,
    step: Any,
    caches: dict[str, tuple[int, int]],
    decode: Callable[[int], str] | None = None,
    *,
    ax: Any = None,
) -> RollbackPlot:
    """The KV caches of one step before and after its rollback, one pair of rows per session.

    prefix: the accepted ids before the step (L,); step: its `decoding.Step`; caches:
    {name: (cached before, cached after)} as `CacheWatch.crops` recorded them. Before: the
    sequence the step scored, prefix + γ drafts, with the positions in the cache filled (green
    kept, red cropped). After: the accepted sequence, prefix + n drafts + the new token, which
    no model has seen yet (blue correction or purple bonus, outlined). Refuses a cache that
    keeps a position holding a token the accepted sequence does not have.
    """
    import matplotlib.pyplot as plt

    decode = decode if decode is not None else str
    prefix = [int(t) for t in prefix]
    drafts = [int(t) for t in step.draft_tokens]
    n = int(step.n_accepted)
    if not 0 <= n <= len(drafts):
        raise ValueError(f"the step accepts {n} of {len(drafts)} drafts")
    scored = prefix + drafts
    accepted = prefix + drafts[:n] + [int(step.next_token)]
    kind = "bonus" if n == len(drafts) else "correction"
    kept, cropped = {}, {}
    for name, (before, after) in caches.items():
        if not 0 <= after <= before <= len(scored):
            raise ValueError(
                f"{name}: cached {before} before and {after} after the crop, with "
                f"{len(scored)} positions scored: need 0 ≤ after ≤ before ≤ {len(scored)}"
            )
        if after > len(accepted) - 1:
            raise ValueError(
                f"{name}: the cache keeps {after} positions, but no model has seen the new token: "
                f"at most {len(accepted) - 1}"
            )
        kept[name], cropped[name] = after, list(range(after, before))

    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(0.75 * len(scored) + 3.5, 1.1 * len(caches) * 2 + 0.6))
    y = 0.0
    for name, (before, after) in caches.items():
        for label, seq in (("before the crop", scored), ("after the crop", accepted)):
            ax.text(
                -0.8,
                y,
                f"{name}, {label}\n(cache: {before if seq is scored else after})",
                ha="right",
                va="center",
                fontsize="small",
            )
            cached = before if seq is scored else after
            for i, token in enumerate(seq):
                text = _short(decode(token), 6)
                if i < cached:
                    gone = seq is scored and i >= after
                    face, gid = (_CROPPED, "cropped") if gone else (_CACHED, "kept")
                    edge = COLOURS["rejected"] if gone else COLOURS["accepted"]
                    _box(
                        ax,
                        i,
                        y,
                        text,
                        face,
                        edge,
                        gid=f"{name}:{label}:{i}:{gid}",
                        fontsize="x-small",
                    )
                elif seq is accepted and i == len(seq) - 1:
                    _box(
                        ax,
                        i,
                        y,
                        text,
                        "white",
                        COLOURS[kind],
                        color=COLOURS[kind],
                        fontweight="bold",
                        linewidth=2,
                        gid=f"{name}:{label}:{i}:new",
                        fontsize="x-small",
                    )
                else:
                    _box(
                        ax,
                        i,
                        y,
                        text,
                        "white",
                        "#8c959f",
                        linestyle="--",
                        color="#57606a",
                        gid=f"{name}:{label}:{i}:unseen",
                        fontsize="x-small",
                    )
            y -= 1.0
        y -= 0.3
    for i in range(max(len(scored), len(accepted))):  # position numbers above the first row
        ax.text(i, 0.5, str(i), ha="center", va="bottom", fontsize="x-small", color="#57606a")
    ax.axvline(len(prefix) - 0.5, color="#57606a", lw=0.8, ls=":")
    ax.text(-0.8, 0.5, "position", ha="right", va="bottom", fontsize="x-small", color="#57606a")
    ax.set_xlim(-0.6, len(scored) + 0.6)
    ax.set_ylim(y + 0.7, 0.9)
    ax.axis("off")
    ax.set_title(
        f"a step that kept {n} of {len(drafts)} drafts (its drafts right of the dotted line)",
        fontsize="medium",
    )
    if own:
        plt.close(fig)
    return RollbackPlot(
        scored, accepted, dict(caches), kept, cropped, len(accepted) - 1, accepted[-1], kind
    )


@dataclass
class TreePlot:
    """What `plot_tree` drew: the nodes (parents, tokens, labels, depths), where each node sits
    (xy (N, 2): depth, row), the edges (parent, child) with -1 the root, and the ancestry mask
    (N, N) bool, [i, j] True iff node j is node i or one of its ancestors."""

    parents: list[int]
    tokens: list[int]
    labels: list[str]
    depths: list[int]
    xy: np.ndarray
    edges: list[tuple[int, int]]
    mask: np.ndarray


def plot_tree(
    token_tree: Any,
    decode: Callable[[int], str] | None = None,
    *,
    root: str = "root",
    axes: Sequence[Any] | None = None,
) -> TreePlot:
    """A token tree (`tree.TokenTree`: `.tokens`, `.parents`) drawn beside its attention mask.

    Left: the root (the last accepted token, labelled `root`) and every node i as "i: token",
    one column per depth. Right: the mask the target's one forward uses (`sessions.tree_ancestry`):
    row i is True at i and its ancestors. `axes`: two axes to draw on, else a new figure that is
    closed before returning.
    """
    import matplotlib.pyplot as plt

    decode = decode if decode is not None else str
    parents = [int(p) for p in token_tree.parents]
    tokens = [int(t) for t in _as_list(token_tree.tokens)]
    if len(tokens) != len(parents):
        raise ValueError(f"{len(tokens)} tokens for {len(parents)} parents")
    depths = tree_depths(parents).tolist() if parents else []
    mask = tree_ancestry(parents).numpy() if parents else np.zeros((0, 0), dtype=bool)
    alive = getattr(token_tree, "alive", None)
    alive = [True] * len(parents) if alive is None else [bool(a) for a in _as_list(alive)]
    labels = [
        f"{i}: {_short(decode(t), 10)}" if a else f"{i}: (empty)"
        for i, (t, a) in enumerate(zip(tokens, alive, strict=True))
    ]

    children: dict[int, list[int]] = {}
    for i, parent in enumerate(parents):
        children.setdefault(parent, []).append(i)
    rows: dict[int, float] = {}
    next_leaf = [0.0]

    def place(node: int) -> float:  # leaves in depth-first order, a parent between its children
        kids = children.get(node, [])
        if not kids:
            rows[node], next_leaf[0] = next_leaf[0], next_leaf[0] + 1
        else:
            rows[node] = float(np.mean([place(k) for k in kids]))
        return rows[node]

    place(-1)
    xy = np.array([[depths[i], rows[i]] for i in range(len(parents))], dtype=float).reshape(-1, 2)
    edges = [(parent, i) for i, parent in enumerate(parents)]

    own = axes is None
    if own:
        fig, axes = plt.subplots(
            1,
            2,
            figsize=(10, 0.45 * max(len(parents), 4) + 1.2),
            gridspec_kw={"width_ratios": [1.3, 1]},
        )
    ax_tree, ax_mask = axes
    at = {-1: (0.0, rows[-1]), **{i: tuple(xy[i]) for i in range(len(parents))}}
    for parent, child in edges:
        (x0, y0), (x1, y1) = at[parent], at[child]
        (line,) = ax_tree.plot([x0, x1], [y0, y1], color="#8c959f", lw=1, zorder=1)
        line.set_gid(f"edge:{parent}:{child}")
    ax_tree.text(
        *at[-1],
        _short(root, 10),
        ha="center",
        va="center",
        fontsize="small",
        bbox=dict(boxstyle="round", fc="#eaeef2", ec="#57606a"),
        zorder=2,
    )
    for i, label in enumerate(labels):
        ax_tree.text(
            *at[i],
            label,
            ha="center",
            va="center",
            fontsize="small",
            zorder=2,
            color="black" if alive[i] else "#8c959f",
            bbox=dict(
                boxstyle="round",
                fc=_DRAFTED if alive[i] else "white",
                ec="#57606a",
                ls="-" if alive[i] else "--",
            ),
        )
    ax_tree.set_xlim(-0.6, max(depths, default=0) + 0.6)
    ax_tree.set_ylim(next_leaf[0] - 0.4, -0.6)  # first child on top
    ax_tree.set_xticks(range(max(depths, default=0) + 1))
    ax_tree.set_xlabel("depth (position after the root)")
    ax_tree.set_yticks([])
    for side in ("top", "right", "left"):
        ax_tree.spines[side].set_visible(False)
    ax_tree.set_title(f"a token tree, {len(parents)} nodes", fontsize="medium")
    ax_mask.imshow(mask, cmap="Greens", vmin=0, vmax=1.4)
    ax_mask.set_xticks(range(len(parents)), [str(i) for i in range(len(parents))])
    ax_mask.set_yticks(range(len(parents)), labels, fontsize="small")
    ax_mask.set_xlabel("attends to node j")
    ax_mask.set_title("its attention mask: i sees j?", fontsize="medium")
    if own:
        plt.close(fig)
    return TreePlot(parents, tokens, labels, depths, xy, edges, mask)


def _as_list(values: Any) -> list:
    """`values.tolist()` for a tensor or an array, `list(values)` otherwise."""
    return values.tolist() if hasattr(values, "tolist") else list(values)


# --------------------------------------------------------------------------------------------
# Methods side by side
# --------------------------------------------------------------------------------------------


@dataclass
class SideBySide:
    """What `plot_side_by_side` drew: methods (rows, top to bottom) and temperatures (bars);
    tokens_per_call, tokens_per_second and speedup (tokens per second over the baseline's at
    the same temperature) are (methods, temperatures) arrays."""

    methods: list[str]
    temperatures: list[float]
    tokens_per_call: np.ndarray
    tokens_per_second: np.ndarray
    speedup: np.ndarray
    baseline: str


def plot_side_by_side(
    rows: Iterable[Sequence[Any]],
    *,
    baseline: str = "autoregressive",
    axes: Sequence[Any] | None = None,
) -> SideBySide:
    """Two panels from measured rows (temperature, method, tokens per target call, tokens/s).

    Left: tokens per target call, what a method buys. Right: tokens per second, what it costs,
    with each bar's speedup over `baseline` at its temperature and the baseline as a dashed line.
    Every method needs a row at every temperature. `axes`: two axes, else a new figure that is
    closed before returning.
    """
    import matplotlib.pyplot as plt

    rows = [tuple(r) for r in rows]
    if any(len(r) != 4 for r in rows):
        raise ValueError("each row is (temperature, method, tokens per target call, tokens/s)")
    methods = list(dict.fromkeys(str(r[1]) for r in rows))
    temperatures = list(dict.fromkeys(float(r[0]) for r in rows))
    cells: dict[tuple[float, str], tuple[float, float]] = {}
    for t, name, tpc, tps in rows:
        key = (float(t), str(name))
        if key in cells:
            raise ValueError(f"two rows for {name!r} at T = {t:g}")
        cells[key] = (float(tpc), float(tps))
    missing = [f"{m!r} at T = {t:g}" for t in temperatures for m in methods if (t, m) not in cells]
    if missing:
        raise ValueError(f"no row for {', '.join(missing)}")
    if baseline not in methods:
        raise ValueError(f"the baseline {baseline!r} is not among the methods {methods}")
    per_call = np.array([[cells[t, m][0] for t in temperatures] for m in methods])
    per_second = np.array([[cells[t, m][1] for t in temperatures] for m in methods])
    speedup = per_second / per_second[methods.index(baseline)]

    own = axes is None
    if own:
        fig, axes = plt.subplots(1, 2, figsize=(11, 0.5 * len(methods) * len(temperatures) + 1.5))
    ax_call, ax_time = axes
    y = np.arange(len(methods))
    height = 0.8 / len(temperatures)
    colours = ["#0969da", "#bf8700", "#8250df", "#1a7f37"]
    for j, t in enumerate(temperatures):
        offset = (j - (len(temperatures) - 1) / 2) * height
        label = "greedy (T = 0)" if t == 0 else f"T = {t:g}"
        colour = colours[j % len(colours)]
        ax_call.barh(y + offset, per_call[:, j], height, color=colour, label=label)
        bars = ax_time.barh(y + offset, per_second[:, j], height, color=colour, label=label)
        ax_time.bar_label(bars, [f"{s:.2f}×" for s in speedup[:, j]], fontsize="x-small", padding=2)
        ax_time.axvline(per_second[methods.index(baseline), j], color=colour, ls="--", lw=0.8)
    for ax in axes:
        ax.set_yticks(y, methods)
        ax.invert_yaxis()
    ax_call.axvline(1, color="k", lw=0.8)
    ax_call.set(xlabel="tokens per target call (what it buys)")
    ax_time.set(xlabel=f"tokens per second (what it costs; × = vs {baseline})")
    ax_time.set_xlim(0, per_second.max() * 1.18)
    ax_time.set_yticklabels([])
    ax_call.legend(fontsize="small", loc="lower right")
    if own:
        plt.close(fig)
    return SideBySide(methods, temperatures, per_call, per_second, speedup, baseline)


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
    `axes`: two axes, else a new figure that is closed before returning.
    """
    import matplotlib.pyplot as plt

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

    own = axes is None
    if own:
        fig, axes = plt.subplots(1, 2, figsize=(11, 0.6 * len(names) + 2.2))
    ax_speed, ax_r = axes
    y = np.arange(len(names))
    ax_speed.barh(y - 0.2, plain, 0.4, color="#8c959f", label="plain")
    bars = ax_speed.barh(y + 0.2, speculative, 0.4, color="#1a7f37", label="speculative")
    ax_speed.bar_label(
        bars, [f"{s:.2f}×" for s in speculative / plain], fontsize="small", padding=2
    )
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
    if own:
        plt.close(fig)
    return EnginePlot(names, plain, speculative, speculative / plain, ks, r)


# --------------------------------------------------------------------------------------------
# Axes
# --------------------------------------------------------------------------------------------


def plain_log_ticks(ax: Any, axis: str = "both", minor: bool | None = None) -> None:
    """Label a log axis with plain numbers (0.5, 2, 4, 64) instead of 2⁶ or 4×10⁰.

    Major ticks get `{:g}` labels. Minor ticks get them too if `minor` is True, never if False,
    and by default (None) only while the axis spans less than a decade, where the major ticks
    alone would leave it nearly unlabelled. `axis`: "x", "y" or "both".
    """
    from matplotlib.ticker import FuncFormatter

    if axis not in ("x", "y", "both"):
        raise ValueError(f"axis must be 'x', 'y' or 'both', got {axis!r}")
    for name in ("x", "y") if axis == "both" else (axis,):
        which = ax.xaxis if name == "x" else ax.yaxis

        def minor_label(value: float, _: int, which: Any = which) -> str:
            lo, hi = sorted(which.get_view_interval())
            narrow = lo > 0 and np.log10(hi / lo) < 1
            return f"{value:g}" if (minor if minor is not None else narrow) else ""

        which.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        which.set_minor_formatter(FuncFormatter(minor_label))


__all__ = [
    "COLOURS",
    "KINDS",
    "OUTPUT_KINDS",
    "CacheWatch",
    "EnginePlot",
    "LawPlot",
    "Piece",
    "RollbackPlot",
    "SideBySide",
    "StepPlot",
    "TVPlot",
    "Trace",
    "TreePlot",
    "plain_log_ticks",
    "plot_engines",
    "plot_law",
    "plot_rollback",
    "plot_side_by_side",
    "plot_step",
    "plot_tree",
    "plot_tv_vs_n",
    "prefix_tv",
    "trace",
]


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
