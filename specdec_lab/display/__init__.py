"""Presentation helpers for the notebooks: accept/reject traces, law/TV plots, and pictures.

Notation of Leviathan et al. 2023 (arXiv:2211.17192): p = target, q = draft, γ = draft length.

    traces     `trace(steps)` -> a `Trace`: a run's tokens coloured by what happened to each,
               as HTML in a notebook, ANSI in a terminal, plain text with markers
    laws       `plot_law`, `prefix_tv`, `plot_tv_vs_n`: an empirical distribution against the
               exact law, and the TV distance against the sample size with its 1/√N bound
    mechanism  `plot_step`, `CacheWatch` and `plot_rollback`, `plot_tree`: one speculative
               step, a step's cache rollback, a token tree beside its ancestry mask
    charts     `plot_side_by_side`, `plot_engines`: measured methods and engines side by
               side; `greedy_loop_note`: the caveat to print beside greedy numbers
    figures    `plain_log_ticks(ax)`: log axes labelled with plain numbers; and the rule
               every plot follows (`axes_or_own_figure`)

Every plot draws onto the `ax` (or `axes`) it is given, the caller owning and showing the
figure, or onto a new figure that is closed before returning, and returns the plotted numbers
so notebooks assert on data, not pixels. matplotlib is imported only when a plot draws.

Nothing here changes a result or draws random numbers. Every public name is here: use
`display.trace`, `display.plot_step`.

May import: the foundation, the engine, the algorithm and `proof`; nothing that loads weights,
measures or teaches.
"""

from specdec_lab.display.charts import (
    EnginePlot,
    SideBySide,
    greedy_loop_note,
    plot_engines,
    plot_side_by_side,
)
from specdec_lab.display.figures import plain_log_ticks
from specdec_lab.display.laws import LawPlot, TVPlot, plot_law, plot_tv_vs_n, prefix_tv
from specdec_lab.display.mechanism import (
    COLOURS,
    CacheWatch,
    RollbackPlot,
    StepPlot,
    TreePlot,
    plot_rollback,
    plot_step,
    plot_tree,
)
from specdec_lab.display.traces import ANSI, KINDS, LEGEND, OUTPUT_KINDS, Piece, Trace, trace
