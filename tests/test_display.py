"""Presentation helpers: traces tell the truth about a run, plots return what they drew."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from specdec_lab import decoding, display
from specdec_lab.proof import mock, stats

STEPS = [
    decoding.Step(draft_tokens=[1, 2, 3], n_accepted=1, next_token=4),  # reject at the 2nd draft
    decoding.Step(draft_tokens=[5, 6], n_accepted=2, next_token=7),  # all accepted: bonus
    decoding.Step(draft_tokens=[], n_accepted=0, next_token=8),  # γ = 0 at the token budget
]


def test_trace_kinds_follow_the_acceptance_rule() -> None:
    t = display.trace(STEPS)
    kinds = [(p.token, p.kind, p.step) for p in t.pieces]
    assert kinds == [
        (1, "accepted", 0),
        (2, "rejected", 0),
        (3, "discarded", 0),
        (4, "correction", 0),
        (5, "accepted", 1),
        (6, "accepted", 1),
        (7, "bonus", 1),
        (8, "bonus", 2),
    ]
    assert t.output_tokens == [1, 4, 5, 6, 7, 8]
    assert t.counts() == {
        "accepted": 3,
        "rejected": 1,
        "discarded": 1,
        "correction": 1,
        "bonus": 2,
    }


def test_trace_renderings() -> None:
    t = display.trace(STEPS, decode=lambda i: "abcdefghi"[i], prompt="P")
    assert str(t) == "P b ~c~ ~d~ [e] | f g <h> | <i>"
    assert t.output_text == "b e f g h i"
    ansi = t.ansi()
    assert "\x1b[31;9mc\x1b[0m" in ansi and "\x1b[32mb\x1b[0m" in ansi
    html = t._repr_html_()
    assert html.count("line-through") >= 2 + 2  # two struck tokens + the legend's two entries
    assert "rejected draft</span> 1" in html
    no_bars = display.trace(STEPS, separators=False, sep="")
    assert str(no_bars) == "1~2~~3~[4]56<7><8>"


def test_trace_escapes_html() -> None:
    t = display.trace([decoding.Step([0], 1, 1)], decode=lambda i: ["<b>", "&"][i])
    html = t.html()
    assert "&lt;b&gt;" in html and "&amp;" in html and "<b>" not in html


def test_trace_rejects_impossible_steps() -> None:
    with pytest.raises(ValueError, match="accepts 3 of 2"):
        display.trace([decoding.Step([1, 2], 3, 0)])


def test_trace_of_a_real_run_reproduces_its_tokens(gen: torch.Generator) -> None:
    target = mock.MockLM(vocab_size=6, seed=0)
    draft = mock.MockDraft(target, quality=0.5)
    seen = []
    out = decoding.speculative_generate(
        target, draft, torch.tensor([0]), 25, gamma=3, generator=gen, on_step=seen.append
    )
    t = display.trace(seen)
    assert t.output_tokens == out.tokens.tolist()
    assert t.counts()["accepted"] == sum(out.stats.accepted)
    assert t.counts()["correction"] + t.counts()["bonus"] == len(out.stats.steps)


def test_plot_law_returns_its_data_and_closes_its_figure() -> None:
    before = plt.get_fignums()
    exact, emp = [0.5, 0.25, 0.25], [0.4, 0.35, 0.25]
    data = display.plot_law(exact, emp, labels=["a", "b", "c"], title="t")
    assert plt.get_fignums() == before
    assert data.labels == ["a", "b", "c"]
    assert data.tv == pytest.approx(0.1)
    np.testing.assert_allclose(data.exact, exact)


def test_plot_law_draws_on_a_given_axis() -> None:
    fig, ax = plt.subplots()
    display.plot_law([0.5, 0.5], [1.0, 0.0], ax=ax)
    assert len(ax.patches) == 4  # two bars per outcome
    plt.close(fig)
    with pytest.raises(ValueError):
        display.plot_law([0.5, 0.5], [1.0, 0.0, 0.0])


def test_prefix_tv_matches_direct_computation() -> None:
    rng = np.random.default_rng(0)
    exact = np.array([0.2, 0.3, 0.5])
    outcomes = rng.choice(3, size=500, p=exact)
    ns = [1, 10, 100, 500]
    got = display.prefix_tv(outcomes, exact, ns)
    for n, tv in zip(ns, got, strict=True):
        assert tv == pytest.approx(stats.tv_distance(stats.frequencies(outcomes[:n], 3), exact))
    with pytest.raises(ValueError):
        display.prefix_tv(outcomes, exact, [501])


def test_plot_tv_vs_n_bound_is_stats_tolerance() -> None:
    before = plt.get_fignums()
    ns = [10, 100, 1000]
    data = display.plot_tv_vs_n(ns, {"x": [0.3, 0.1, 0.03]}, delta=1e-6, n_outcomes=4)
    assert plt.get_fignums() == before
    for n, b in zip(ns, data.bound, strict=True):
        assert b == pytest.approx(stats.tv_tolerance(n, 1e-6, 4))
    assert data.bound[0] / data.bound[-1] == pytest.approx(10.0)  # 1/√N over a factor of 100
    with pytest.raises(ValueError):
        display.plot_tv_vs_n(ns, {"x": [0.1]}, delta=1e-6, n_outcomes=4)


def test_trace_repr_is_short_and_readable() -> None:
    text = repr(display.trace(STEPS))
    assert text.startswith("Trace(accepted 3, rejected 1, discarded 1, correction 1, bonus 2)")
    assert text.endswith(str(display.trace(STEPS)))


def _labels(ax, which: str, minor: bool) -> list[str]:
    axis = ax.xaxis if which == "x" else ax.yaxis
    return [t.get_text() for t in axis.get_ticklabels(minor=minor) if t.get_text()]


def test_plain_log_ticks_label_without_powers() -> None:
    fig, ax = plt.subplots()
    ax.plot([1, 2, 4, 64], [1, 1.5, 3, 4])  # y spans less than a decade
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    display.plain_log_ticks(ax)
    fig.canvas.draw()
    x, y_minor = _labels(ax, "x", False), _labels(ax, "y", True)
    plt.close(fig)
    assert "64" in x and "4" in x and "3" in y_minor  # plain numbers, minor ticks included
    assert not any("^" in s or "×" in s or "times" in s for s in x + y_minor), x + y_minor
    with pytest.raises(ValueError, match="axis"):
        display.plain_log_ticks(ax, "z")


@pytest.mark.parametrize(("minor", "labelled"), [(None, False), (False, False), (True, True)])
def test_plain_log_ticks_minor_labels_on_a_wide_axis(minor, labelled) -> None:
    fig, ax = plt.subplots()
    ax.plot([0.3, 10.0], [1, 2])  # x spans more than a decade
    ax.set_xscale("log")
    display.plain_log_ticks(ax, "x", minor=minor)
    fig.canvas.draw()
    major, minor_labels = _labels(ax, "x", False), _labels(ax, "x", True)
    plt.close(fig)
    assert "1" in major and "10" in major
    assert bool(minor_labels) == labelled, minor_labels
