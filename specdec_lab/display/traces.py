"""Accept/reject traces: a speculative run's tokens, coloured by what happened to each.

`trace(steps)` turns the `decoding.Step`s of a speculative run into a `Trace`, which renders as
coloured HTML in a notebook (`_repr_html_`), with ANSI colours in a terminal (`.ansi()`), and as
plain text with markers (`str`). Accepted drafts are green, the rejected draft is red and struck
through, drafts after it (never examined) are grey and struck through, the target's correction
after a rejection is blue and the bonus token after a fully accepted step is purple.

Plain Python: this module imports neither matplotlib nor numpy.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

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

    __str__ = plain

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
