"""Pictures of the mechanism: one speculative step (`plot_step`), a step's cache rollback
(`CacheWatch`, `plot_rollback`), and a token tree beside its ancestry mask (`plot_tree`).

Each returns a record of what it drew; the cells use the trace's colours (`COLOURS`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from specdec_lab.display.figures import axes_or_own_figure
from specdec_lab.engine.sessions import tree_ancestry, tree_depths

COLOURS = {  # the trace's colours, for the pictures
    "accepted": "#1a7f37",
    "rejected": "#cf222e",
    "discarded": "#8c959f",
    "correction": "#0969da",
    "bonus": "#8250df",
}
_DRAFTED = "#fff8c5"  # a drafted token before the verdict
_CACHED = "#dafbe1"  # a position held in a KV cache
_CROPPED = "#ffebe9"  # a position a rollback removes
_SUBSCRIPTS = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def _box(ax: Any, x: float, y: float, text: str, face: str, edge: str = "#57606a", **kw) -> Any:
    """A token cell centred on (x, y), one unit wide; returns the patch."""
    from matplotlib.patches import FancyBboxPatch

    line = {"linestyle": kw.pop("linestyle", "-"), "linewidth": kw.pop("linewidth", 1.0)}
    patch = FancyBboxPatch(
        (x - 0.42, y - 0.3), 0.84, 0.6, boxstyle="round,pad=0.02", fc=face, ec=edge, **line
    )
    patch.set_gid(kw.pop("gid", None))
    ax.add_patch(patch)
    ax.text(x, y, text, ha="center", va="center", fontsize=kw.pop("fontsize", "small"), **kw)
    return patch


def _short(text: str, width: int = 8) -> str:
    """A token's text as a cell label: whitespace made visible, long pieces cut."""
    text = text.replace("\n", "⏎").replace(" ", "·") if text.strip() != text or not text else text
    return text if len(text) <= width else text[: width - 1] + "…"


def _as_list(values: Any) -> list:
    """`values.tolist()` for a tensor or an array, `list(values)` otherwise."""
    return values.tolist() if hasattr(values, "tolist") else list(values)


# ----------------------------------------------------------------------------------------- one step


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


_STEP_ROWS = {"draft": 3.0, "target": 2.0, "verdict": 1.0, "emit": 0.0}  # y of each row
_VERDICT = {"accepted": "✓ kept", "rejected": "✗ rejected", "discarded": "not\nexamined"}


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
    `context`: the last few accepted token ids, shown before the drafts.
    """
    decode = decode if decode is not None else str
    drawn = _step_record(step, accept_probs)
    g, n = drawn.gamma, drawn.n_accepted
    left = -len(context) - 0.5
    with axes_or_own_figure(ax, figsize=(1.1 * (g + len(context)) + 4.5, 3.4)) as ax:
        _label_step_rows(ax, drawn, left)
        _draw_context(ax, context, decode)
        _draw_drafts_and_verdicts(ax, drawn, decode)
        _draw_target_call(ax, g)
        _draw_emitted(ax, drawn, decode)
        ax.set_xlim(left - 0.2, g + 2.6)
        ax.set_ylim(-0.6, 3.6)
        ax.axis("off")
        title = title or f"one step: {n} of {g} drafts kept, {n + 1} tokens for one target call"
        ax.set_title(title, fontsize="medium")
    return drawn


def _step_record(step: Any, accept_probs: Sequence[float] | None) -> StepPlot:
    """The verdict on each draft and the tokens the step emits, read from its record."""
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
    return StepPlot(g, n, drafts, kinds, emitted, g + 1, probs)


def _label_step_rows(ax: Any, drawn: StepPlot, left: float) -> None:
    """Each row's name, left of the context."""
    g, n = drawn.gamma, drawn.n_accepted
    labels = {
        "draft": f"1. draft: {g} call{'s' * (g != 1)} of q",
        "target": f"2. target: ONE call, {g + 1} positions",
        "verdict": "3. accept or reject",
        "emit": f"4. emitted: {n + 1} token{'s' * (n != 0)}",
    }
    for name, y in _STEP_ROWS.items():
        ax.text(left - 0.3, y, labels[name], ha="right", va="center", fontsize="small")


def _draw_context(ax: Any, context: Sequence[int], decode: Callable[[int], str]) -> None:
    """The accepted text so far, on the draft row, left of the drafts."""
    y = _STEP_ROWS["draft"]
    for x, token in enumerate(context, start=-len(context)):
        text = _short(decode(int(token)))
        ax.text(x, y, text, ha="center", va="center", fontsize="small", color="#57606a")


def _draw_drafts_and_verdicts(ax: Any, drawn: StepPlot, decode: Callable[[int], str]) -> None:
    """Row 1, each draft; row 3 below it, its verdict (with P(keep) if it was examined)."""
    probs = drawn.accept_probs
    for i, (token, kind) in enumerate(zip(drawn.draft_tokens, drawn.draft_kinds, strict=True)):
        _box(ax, i, _STEP_ROWS["draft"], _short(decode(token)), _DRAFTED, gid=f"draft:{i}")
        examined = probs is not None and kind != "discarded"
        text = _VERDICT[kind] + (f"\nP(keep) {min(probs[i], 1.0):.2f}" if examined else "")
        colour, gid = COLOURS[kind], f"verdict:{i}:{kind}"
        style = {"color": colour, "fontsize": "x-small", "linewidth": 1.5}
        _box(ax, i, _STEP_ROWS["verdict"], text, "white", colour, gid=gid, **style)


def _draw_target_call(ax: Any, gamma: int) -> None:
    """Row 2: one box for the ONE target call, spanning its γ+1 scored positions p₁..p_γ+1."""
    from matplotlib.patches import FancyBboxPatch

    y = _STEP_ROWS["target"]
    call = FancyBboxPatch(
        (-0.45, y - 0.3), gamma + 0.9, 0.6, boxstyle="round,pad=0.02", fc="#ddf4ff", ec="#0969da"
    )
    call.set_gid(f"target-call:{gamma + 1}")
    ax.add_patch(call)
    for i in range(gamma + 1):
        label = f"p{str(i + 1).translate(_SUBSCRIPTS)}"
        ax.text(i, y, label, ha="center", va="center", fontsize="small", color="#0969da")


def _draw_emitted(ax: Any, drawn: StepPlot, decode: Callable[[int], str]) -> None:
    """Row 4: the tokens the step emits, and where its last one comes from."""
    y = _STEP_ROWS["emit"]
    for col, token, kind in drawn.emitted:
        text, colour, gid = _short(decode(token)), COLOURS[kind], f"emit:{col}:{kind}"
        _box(ax, col, y, text, colour, colour, color="white", fontweight="bold", gid=gid)
    last = drawn.emitted[-1][2]
    source = {"bonus": "bonus: from p at γ+1", "correction": "correction: from the residual"}
    x = drawn.n_accepted + 0.55
    ax.text(x, y, source[last], va="center", fontsize="x-small", color=COLOURS[last])


# --------------------------------------------------------------------------------------- a rollback


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
    decode = decode if decode is not None else str
    prefix = [int(t) for t in prefix]
    drawn = _rollback_record(prefix, step, caches)
    figsize = (0.75 * len(drawn.scored) + 3.5, 1.1 * len(caches) * 2 + 0.6)
    with axes_or_own_figure(ax, figsize=figsize) as ax:
        bottom = _draw_caches(ax, drawn, decode)
        _frame_rollback(ax, drawn, len(prefix), bottom)
    return drawn


def _rollback_record(
    prefix: list[int], step: Any, caches: dict[str, tuple[int, int]]
) -> RollbackPlot:
    """The scored and accepted sequences, and what each cache keeps and crops, checked."""
    drafts = [int(t) for t in step.draft_tokens]
    n = int(step.n_accepted)
    if not 0 <= n <= len(drafts):
        raise ValueError(f"the step accepts {n} of {len(drafts)} drafts")
    scored = prefix + drafts
    accepted = prefix + drafts[:n] + [int(step.next_token)]
    kind = "bonus" if n == len(drafts) else "correction"
    new = len(accepted) - 1  # the new token's position
    kept, cropped = {}, {}
    for name, (before, after) in caches.items():
        if not 0 <= after <= before <= len(scored):
            raise ValueError(
                f"{name}: cached {before} before and {after} after the crop, with "
                f"{len(scored)} positions scored: need 0 ≤ after ≤ before ≤ {len(scored)}"
            )
        if after > new:
            raise ValueError(
                f"{name}: the cache keeps {after} positions, but no model has seen the new token: "
                f"at most {new}"
            )
        kept[name], cropped[name] = after, list(range(after, before))
    return RollbackPlot(scored, accepted, dict(caches), kept, cropped, new, accepted[-1], kind)


def _draw_caches(ax: Any, drawn: RollbackPlot, decode: Callable[[int], str]) -> float:
    """Two rows per session, before and after its crop, top down; returns the y below them."""
    y = 0.0
    for name in drawn.caches:
        for before in (True, False):
            _draw_cache_row(ax, y, drawn, name, before, decode)
            y -= 1.0
        y -= 0.3
    return y


def _draw_cache_row(
    ax: Any, y: float, drawn: RollbackPlot, name: str, before: bool, decode: Callable[[int], str]
) -> None:
    """One session's sequence before or after its crop, a cell per position."""
    label = "before the crop" if before else "after the crop"
    cached = drawn.caches[name][0 if before else 1]
    seq = drawn.scored if before else drawn.accepted
    head = f"{name}, {label}\n(cache: {cached})"
    ax.text(-0.8, y, head, ha="right", va="center", fontsize="small")
    for i, token in enumerate(seq):
        if i < cached:
            state = "cropped" if before and i >= drawn.kept[name] else "kept"
        elif not before and i == len(seq) - 1:
            state = "new"
        else:
            state = "unseen"
        face, edge, style = _cache_cell_style(state, drawn.new_kind)
        text, gid = _short(decode(token), 6), f"{name}:{label}:{i}:{state}"
        _box(ax, i, y, text, face, edge, gid=gid, fontsize="x-small", **style)


def _cache_cell_style(state: str, new_kind: str) -> tuple[str, str, dict[str, Any]]:
    """Face, edge and label style of a position: kept in the cache, cropped from it, the new
    token (outlined in its kind's colour), or one the model has not seen."""
    if state == "kept":
        return _CACHED, COLOURS["accepted"], {}
    if state == "cropped":
        return _CROPPED, COLOURS["rejected"], {}
    if state == "new":
        colour = COLOURS[new_kind]
        return "white", colour, {"color": colour, "fontweight": "bold", "linewidth": 2}
    return "white", "#8c959f", {"linestyle": "--", "color": "#57606a"}


def _frame_rollback(ax: Any, drawn: RollbackPlot, n_prefix: int, bottom: float) -> None:
    """Position numbers above the first row, a dotted line before the step's drafts, the title."""
    for i in range(max(len(drawn.scored), len(drawn.accepted))):
        ax.text(i, 0.5, str(i), ha="center", va="bottom", fontsize="x-small", color="#57606a")
    ax.axvline(n_prefix - 0.5, color="#57606a", lw=0.8, ls=":")
    ax.text(-0.8, 0.5, "position", ha="right", va="bottom", fontsize="x-small", color="#57606a")
    ax.set_xlim(-0.6, len(drawn.scored) + 0.6)
    ax.set_ylim(bottom + 0.7, 0.9)
    ax.axis("off")
    gamma = len(drawn.scored) - n_prefix  # scored: prefix + γ drafts
    n = drawn.new_position - n_prefix  # accepted: prefix + n drafts + the new token
    title = f"a step that kept {n} of {gamma} drafts (its drafts right of the dotted line)"
    ax.set_title(title, fontsize="medium")


# ------------------------------------------------------------------------------------- a token tree


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
    row i is True at i and its ancestors. `axes`: two axes.
    """
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
    rows, n_leaves = _tree_rows(parents)
    xy = np.array([[depths[i], rows[i]] for i in range(len(parents))], dtype=float).reshape(-1, 2)
    edges = [(parent, i) for i, parent in enumerate(parents)]
    drawn = TreePlot(parents, tokens, labels, depths, xy, edges, mask)

    figsize = (10, 0.45 * max(len(parents), 4) + 1.2)
    grid = {"width_ratios": [1.3, 1]}
    with axes_or_own_figure(axes, 1, 2, figsize=figsize, gridspec_kw=grid) as axes:
        ax_tree, ax_mask = axes
        _draw_tree(ax_tree, drawn, alive, _short(root, 10), rows[-1], n_leaves)
        _draw_mask(ax_mask, drawn)
    return drawn


def _tree_rows(parents: list[int]) -> tuple[dict[int, float], float]:
    """The row of every node, -1 the root: the leaves one per row in depth-first order, a parent
    midway between its children. Returns the rows and the number of leaves."""
    children: dict[int, list[int]] = {}
    for i, parent in enumerate(parents):
        children.setdefault(parent, []).append(i)
    rows: dict[int, float] = {}
    next_leaf = [0.0]

    def place(node: int) -> float:
        kids = children.get(node, [])
        if not kids:
            rows[node], next_leaf[0] = next_leaf[0], next_leaf[0] + 1
        else:
            rows[node] = float(np.mean([place(k) for k in kids]))
        return rows[node]

    place(-1)
    return rows, next_leaf[0]


def _draw_tree(
    ax: Any, drawn: TreePlot, alive: list[bool], root: str, root_row: float, n_leaves: float
) -> None:
    """The edges, the root, and every node ("i: token"; an empty slot greyed), one column per
    depth, the first child on top."""
    at = {-1: (0.0, root_row), **{i: tuple(xy) for i, xy in enumerate(drawn.xy)}}
    for parent, child in drawn.edges:
        (x0, y0), (x1, y1) = at[parent], at[child]
        (line,) = ax.plot([x0, x1], [y0, y1], color="#8c959f", lw=1, zorder=1)
        line.set_gid(f"edge:{parent}:{child}")
    root_box = dict(boxstyle="round", fc="#eaeef2", ec="#57606a")
    ax.text(*at[-1], root, ha="center", va="center", fontsize="small", bbox=root_box, zorder=2)
    for i, label in enumerate(drawn.labels):
        face, colour, ls = (_DRAFTED, "black", "-") if alive[i] else ("white", "#8c959f", "--")
        box = dict(boxstyle="round", fc=face, ec="#57606a", ls=ls)
        ax.text(
            *at[i],
            label,
            ha="center",
            va="center",
            fontsize="small",
            zorder=2,
            color=colour,
            bbox=box,
        )
    deepest = max(drawn.depths, default=0)
    ax.set_xlim(-0.6, deepest + 0.6)
    ax.set_ylim(n_leaves - 0.4, -0.6)  # first child on top
    ax.set_xticks(range(deepest + 1))
    ax.set_xlabel("depth (position after the root)")
    ax.set_yticks([])
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.set_title(f"a token tree, {len(drawn.parents)} nodes", fontsize="medium")


def _draw_mask(ax: Any, drawn: TreePlot) -> None:
    """The ancestry mask as an image: row i lit at i and its ancestors."""
    n = len(drawn.parents)
    ax.imshow(drawn.mask, cmap="Greens", vmin=0, vmax=1.4)
    ax.set_xticks(range(n), [str(i) for i in range(n)])
    ax.set_yticks(range(n), drawn.labels, fontsize="small")
    ax.set_xlabel("attends to node j")
    ax.set_title("its attention mask: i sees j?", fontsize="medium")
