"""Matplotlib plumbing the plots share: whose figure they draw on, and plain log-axis labels.

Both import matplotlib only when called, so importing `display` does not load it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np


@contextmanager
def axes_or_own_figure(axes: Any, *subplots_args: Any, **subplots_kw: Any) -> Iterator[Any]:
    """Yield `axes` (one axes or a sequence of them) if the caller gave them; else the axes of
    a new figure, `plt.subplots(*subplots_args, **subplots_kw)`, closed when the block ends."""
    if axes is not None:
        yield axes
        return
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(*subplots_args, **subplots_kw)
    try:
        yield axes
    finally:
        plt.close(fig)


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
