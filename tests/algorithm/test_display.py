"""Presentation helpers: traces tell the truth about a run, plots return what they drew."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from specdec_lab import decoding, display, drafters, sampling, tree
from specdec_lab.engine import sessions
from specdec_lab.measure import preview
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


# --- pictures of the mechanism: a step, a rollback, a tree, methods side by side --------------


def _gids(ax) -> dict[str, object]:
    return {p.get_gid(): p for p in ax.patches if p.get_gid()}


def _texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def test_plot_step_draws_its_record() -> None:
    fig, ax = plt.subplots()
    drawn = display.plot_step(
        STEPS[0], decode=lambda i: "abcdefghi"[i], context=[0], accept_probs=[1.0, 0.25, 0.5], ax=ax
    )
    gids = _gids(ax)
    plt.close(fig)
    assert drawn.draft_kinds == ["accepted", "rejected", "discarded"]
    assert drawn.emitted == [(0, 1, "accepted"), (1, 4, "correction")]
    assert drawn.scored == 4  # one target call over γ + 1 positions
    assert {g for g in gids if g.startswith("draft:")} == {"draft:0", "draft:1", "draft:2"}
    assert {g for g in gids if g.startswith("verdict:")} == {
        "verdict:0:accepted",
        "verdict:1:rejected",
        "verdict:2:discarded",
    }
    assert {g for g in gids if g.startswith("emit:")} == {"emit:0:accepted", "emit:1:correction"}
    assert gids["target-call:4"].get_width() == pytest.approx(3 + 0.9)  # spans γ + 1 columns
    colour = matplotlib.colors.to_hex(gids["emit:1:correction"].get_facecolor())
    assert colour == display.COLOURS["correction"]
    texts = _texts(ax)
    labels = [t for t in texts if len(t) == 1]
    assert labels == ["a", "b", "c", "d", "b", "e"]  # the context, the drafts, what is emitted
    assert any("P(keep) 0.25" in t for t in texts)  # the rejected draft's min(1, p/q)
    assert not any("0.50" in t for t in texts)  # a draft never examined shows no probability


def test_plot_step_bonus_and_empty_steps() -> None:
    full = display.plot_step(STEPS[1])
    assert full.draft_kinds == ["accepted", "accepted"] and full.emitted[-1] == (2, 7, "bonus")
    none = display.plot_step(STEPS[2])  # γ = 0 at the token budget: only the bonus, 1 position
    assert none.emitted == [(0, 8, "bonus")] and none.scored == 1
    with pytest.raises(ValueError, match="accepts 3 of 2"):
        display.plot_step(decoding.Step([1, 2], 3, 0))
    with pytest.raises(ValueError, match="2 acceptance probabilities for 3"):
        display.plot_step(STEPS[0], accept_probs=[1.0, 0.5])


def test_plot_step_of_a_real_run_emits_its_tokens(gen: torch.Generator) -> None:
    target = mock.MockLM(vocab_size=6, seed=0)
    draft = mock.MockDraft(target, quality=0.5)
    seen = []
    out = decoding.speculative_generate(
        target, draft, torch.tensor([0]), 30, gamma=3, generator=gen, on_step=seen.append
    )
    drawn = [display.plot_step(s) for s in seen]
    assert sum((d.emitted_tokens for d in drawn), []) == out.tokens.tolist()
    assert sum(d.scored for d in drawn) == sum(out.stats.gammas) + out.stats.target_calls
    trace = display.trace(seen)
    kinds = [k for d in drawn for k in d.draft_kinds + [d.emitted[-1][2]]]
    assert kinds == [p.kind for p in trace.pieces]  # the same verdicts as the coloured trace


def _one_step(target, draft, ids, gamma, gen, want):
    """Run library steps on watched mock sessions until one matches `want(step)`."""
    p_watch = display.CacheWatch(sessions.open_session(target))
    q_watch = display.CacheWatch(sessions.open_session(draft))
    drafter = drafters.ModelDrafter(q_watch)
    cfg = sampling.SamplingConfig(1.0)
    for _ in range(200):
        before = ids
        ids, step = decoding.speculative_step(p_watch, drafter, ids, gamma, cfg, gen)
        if want(step):
            caches = {"target": p_watch.crops[-1], "draft": q_watch.crops[-1]}
            return before, step, caches, ids
    raise AssertionError("no such step in 200")


@pytest.mark.parametrize("case", ["rejection", "bonus"])
def test_plot_rollback_of_a_real_step(gen: torch.Generator, case: str) -> None:
    target = mock.MockLM(vocab_size=3, sharpness=1.0, seed=0)
    draft = mock.MockDraft(target, quality=0.2, seed=1)
    gamma = 3
    want = (lambda s: s.bonus) if case == "bonus" else (lambda s: 1 <= s.n_accepted < gamma - 1)
    prefix, step, caches, new_ids = _one_step(target, draft, torch.tensor([0, 1]), gamma, gen, want)
    fig, ax = plt.subplots()
    drawn = display.plot_rollback(prefix, step, caches, decode="abc".__getitem__, ax=ax)
    gids = _gids(ax)
    plt.close(fig)
    length, n = len(prefix), step.n_accepted
    assert drawn.accepted == new_ids.tolist() and drawn.new_position == len(new_ids) - 1
    assert drawn.scored == prefix.tolist() + step.draft_tokens
    # The contract: the target saw prefix + γ drafts and keeps prefix + n; the draft never saw
    # its last draft, so it keeps at most that much.
    assert caches["target"] == (length + gamma, length + n)
    assert caches["draft"] == (length + gamma - 1, min(length + gamma - 1, length + n))
    for name, (before, after) in caches.items():
        assert drawn.kept[name] == after and drawn.cropped[name] == list(range(after, before))
        assert drawn.scored[:after] == drawn.accepted[:after]  # kept positions hold kept tokens
        drawn_cropped = [
            g for g in gids if g.startswith(f"{name}:before") and g.endswith("cropped")
        ]
        assert len(drawn_cropped) == before - after
        assert f"{name}:after the crop:{len(new_ids) - 1}:new" in gids
    assert drawn.new_kind == ("bonus" if case == "bonus" else "correction")


def test_plot_rollback_refuses_an_impossible_cache() -> None:
    step = decoding.Step([1, 2], 1, 0)  # accepted sequence: [5, 1, 0]
    with pytest.raises(ValueError, match="no model has seen the new token"):
        display.plot_rollback([5], step, {"target": (3, 3)})
    with pytest.raises(ValueError, match="after ≤ before"):
        display.plot_rollback([5], step, {"target": (1, 2)})
    with pytest.raises(TypeError, match="cached"):
        display.CacheWatch(object())


def _ancestors(parents: list[int], i: int) -> set[int]:
    out = {i}
    while parents[i] >= 0:
        i = parents[i]
        out.add(i)
    return out


def test_plot_tree_draws_every_edge_and_the_ancestry_mask() -> None:
    parents = [-1, -1, 0, 0, 1, 2, 2]
    tokens = torch.tensor([10, 11, 12, 13, 14, 15, 16])
    tt = tree.TokenTree(tokens, parents, torch.zeros(7, 20))
    fig, axes = plt.subplots(1, 2)
    drawn = display.plot_tree(tt, decode=lambda t: f"t{t}", root="R", axes=axes)
    edges = {line.get_gid() for line in axes[0].lines}
    image = np.asarray(axes[1].images[0].get_array())
    plt.close(fig)
    want = np.array([[j in _ancestors(parents, i) for j in range(7)] for i in range(7)])
    np.testing.assert_array_equal(drawn.mask, want)
    np.testing.assert_array_equal(image, want)  # what is on screen is the mask
    assert edges == {f"edge:{p}:{i}" for i, p in enumerate(parents)}
    assert drawn.depths == [1, 1, 2, 2, 2, 3, 3] and drawn.xy[:, 0].tolist() == drawn.depths
    for i, p in enumerate(parents):  # a parent sits between its first and last child
        kids = [k for k, q in enumerate(parents) if q == i]
        if kids:
            assert drawn.xy[kids[0], 1] <= drawn.xy[i, 1] <= drawn.xy[kids[-1], 1]
        assert p < i
    assert drawn.labels[3] == "3: t13" and "R" in [t.get_text() for t in axes[0].texts]


def test_plot_tree_marks_empty_slots() -> None:
    tt = tree.TokenTree(
        torch.tensor([4, 0]), [-1, -1], torch.zeros(2, 5), alive=torch.tensor([True, False])
    )
    drawn = display.plot_tree(tt)
    assert drawn.labels == ["0: 4", "1: (empty)"]
    with pytest.raises(ValueError, match="3 tokens for 2 parents"):
        display.plot_tree(tree.TokenTree(torch.tensor([1, 2, 3]), [-1, 0], torch.zeros(3, 4)))


ROWS = [
    (0.0, "autoregressive", 1.0, 50.0),
    (0.0, "chain", 3.0, 75.0),
    (1.0, "autoregressive", 1.0, 40.0),
    (1.0, "chain", 2.0, 30.0),
]


def test_plot_side_by_side_plots_the_rows() -> None:
    fig, axes = plt.subplots(1, 2)
    drawn = display.plot_side_by_side(ROWS, axes=axes)
    widths = [[p.get_width() for p in ax.patches] for ax in axes]
    plt.close(fig)
    assert drawn.methods == ["autoregressive", "chain"] and drawn.temperatures == [0.0, 1.0]
    np.testing.assert_allclose(drawn.tokens_per_call, [[1, 1], [3, 2]])
    np.testing.assert_allclose(drawn.tokens_per_second, [[50, 40], [75, 30]])
    np.testing.assert_allclose(drawn.speedup, [[1, 1], [1.5, 0.75]])
    assert widths == [[1.0, 3.0, 1.0, 2.0], [1.0, 1.5, 1.0, 0.75]]  # bars: T = 0, then T = 1
    labels = [t.get_text() for t in axes[1].texts]
    assert "1.50×" in labels and "0.75×" in labels
    assert drawn.prompt_speedup is None and drawn.low is None and drawn.high is None


# Per-prompt tokens/s on three prompts; the pooled tokens/s are total tokens over total seconds
# (16 tokens a prompt): autoregressive 0.5, 0.25, 1 s; chain 0.25, 0.5, 0.4 s greedy.
PROMPT_ROWS = [
    (0.0, "autoregressive", 1.0, 48 / 1.75, [32.0, 64.0, 16.0]),
    (0.0, "chain", 3.0, 48 / 1.15, [64.0, 32.0, 40.0]),
    (1.0, "autoregressive", 1.0, 48 / 1.75, [32.0, 64.0, 16.0]),
    (1.0, "chain", 2.0, 48 / 2.0, [16.0, 64.0, 32.0]),
]


def _segments(ax, gid):
    (found,) = [c for c in ax.collections if c.get_gid() == gid]
    return found


def test_plot_side_by_side_draws_each_prompts_speedup_and_its_spread() -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    drawn = display.plot_side_by_side(PROMPT_ROWS, axes=axes)
    fig.canvas.draw()
    # Chain against autoregressive on the same prompt: greedy 64/32, 32/64, 40/16; T = 1 16/32,
    # 64/64, 32/16. Its whisker spans the least to the greatest; autoregressive's is the point 1.
    want = {0.0: [2.0, 0.5, 2.5], 1.0: [0.5, 1.0, 2.0]}
    np.testing.assert_allclose(drawn.prompt_speedup[1], [want[0.0], want[1.0]])
    np.testing.assert_allclose(drawn.prompt_speedup[0], np.ones((2, 3)))
    np.testing.assert_allclose(drawn.low, [[1, 1], [0.5, 0.5]])
    np.testing.assert_allclose(drawn.high, [[1, 1], [2.5, 2.0]])
    np.testing.assert_allclose(drawn.speedup[1], [1.75 / 1.15, 1.75 / 2.0])  # the bars: pooled
    for t in (0.0, 1.0):  # what is on screen is what it returned
        whiskers = _segments(axes[1], f"spread:{t:g}").get_segments()
        np.testing.assert_allclose(
            [[seg[0][0], seg[1][0]] for seg in whiskers], [[1, 1], [min(want[t]), max(want[t])]]
        )
        assert whiskers[0][0][1] == whiskers[0][1][1] < whiskers[1][0][1]  # level, one row each
        dots = _segments(axes[1], f"prompts:{t:g}").get_offsets()
        np.testing.assert_allclose(np.asarray(dots)[3:, 0], want[t])  # chain's three prompts
    renderer = fig.canvas.get_renderer()
    legend = drawn.legend.get_window_extent(renderer)
    for ax in axes:  # the legend lies off the bars: outside both data areas
        assert not legend.overlaps(ax.get_window_extent(renderer))
    assert [t.get_text() for t in drawn.legend.get_texts()] == [
        "greedy (T = 0)",
        "T = 1",
        "one prompt",
        "least to greatest over the prompts",
    ]
    plt.close(fig)


def test_plot_side_by_side_refuses_ragged_prompts() -> None:
    with pytest.raises(ValueError, match="same prompts"):
        display.plot_side_by_side(PROMPT_ROWS[:3] + [(1.0, "chain", 2.0, 24.0, [16.0, 64.0])])
    with pytest.raises(ValueError, match="every row"):
        display.plot_side_by_side(PROMPT_ROWS[:3] + [(1.0, "chain", 2.0, 24.0)])
    with pytest.raises(ValueError, match="above 0"):
        display.plot_side_by_side([(0.0, "autoregressive", 1.0, 1.0, [1.0, 0.0])])


def test_plot_side_by_side_refuses_incomplete_rows() -> None:
    with pytest.raises(ValueError, match="no row for 'chain' at T = 1"):
        display.plot_side_by_side(ROWS[:3])
    with pytest.raises(ValueError, match="two rows"):
        display.plot_side_by_side(ROWS + ROWS[:1])
    with pytest.raises(ValueError, match="baseline"):
        display.plot_side_by_side(ROWS, baseline="tree")
    with pytest.raises(ValueError, match="each row"):
        display.plot_side_by_side([(0.0, "autoregressive", 1.0)])


ENGINES = {
    "C++ engine": {"plain": 400.0, "speculative": 300.0, "ks": [1, 2, 5], "t_k": [2.0, 3.0, 6.0]},
    "our loop": {"plain": 100.0, "speculative": 150.0, "ks": [1, 2, 5], "t_k": [4.0, 4.4, 5.0]},
}


def test_plot_engines_plots_each_engine() -> None:
    fig, axes = plt.subplots(1, 2)
    drawn = display.plot_engines(ENGINES, axes=axes)
    widths = [p.get_width() for p in axes[0].patches]
    lines = [list(line.get_ydata()) for line in axes[1].lines[:2]]
    labels = [t.get_text() for t in axes[0].texts]
    plt.close(fig)
    assert drawn.names == ["C++ engine", "our loop"] and drawn.ks == [1, 2, 5]
    np.testing.assert_allclose(drawn.speedup, [0.75, 1.5])
    assert widths == [400.0, 100.0, 300.0, 150.0]  # plain bars, then speculative bars
    assert labels == ["0.75×", "1.50×"]
    np.testing.assert_allclose(lines, [[1.0, 1.5, 3.0], [1.0, 1.1, 1.25]])  # r(k) = t(k) / t(1)
    np.testing.assert_allclose(drawn.r, lines)


def test_plot_engines_refuses_mismatched_curves() -> None:
    with pytest.raises(ValueError, match="same ks"):
        display.plot_engines(ENGINES | {"other": ENGINES["our loop"] | {"ks": [1, 3, 5]}})
    with pytest.raises(ValueError, match="start at 1"):
        display.plot_engines({"x": ENGINES["our loop"] | {"ks": [2, 3, 5]}})
    with pytest.raises(ValueError, match="no engines"):
        display.plot_engines({})


def _mock_pair(vocab: int = 12):
    """A pair-shaped object over mock models: what `first_look` reads of `models.Pair`."""
    from types import SimpleNamespace

    target = mock.MockLM(vocab_size=vocab, seed=0)
    letters = "abcdefghijklmnopqrstuvwxyz"[:vocab]
    return SimpleNamespace(
        target=target,
        draft=mock.MockDraft(target, quality=0.8, seed=1),
        device=torch.device("cpu"),
        vocab_size=vocab,
        encode=lambda text: torch.tensor([letters.index(c) for c in text]),
        decode=lambda ids: "".join(letters[int(i)] for i in ids),
    )


def test_first_look_reports_the_runs_it_made() -> None:
    pair = _mock_pair()
    look = preview.first_look(pair, "abc", max_new_tokens=30, gamma=3, rounds=2)
    spec, ar = look.speculative.stats, look.autoregressive.stats
    ref = decoding.autoregressive_generate(pair.target, pair.encode("abc"), 30, temperature=0)
    assert look.identical and look.speculative.tokens.tolist() == ref.tokens.tolist()  # greedy
    assert look.trace.output_tokens == look.speculative.tokens.tolist()  # the speculative run
    assert look.trace.prompt == "abc" and look.trace.counts()["accepted"] == sum(spec.accepted)
    assert ar.target_calls == 30 and spec.target_calls == len(spec.steps) < 30
    assert look.tokens_per_call == 30 / spec.target_calls > 1
    assert look.rounds == 2 and set(look.seconds) == {"speculative", "autoregressive"}
    assert look.speedup == look.seconds["autoregressive"] / look.seconds["speculative"]
    printed = "\n".join(look.lines)  # every number it prints is one it measured
    assert f"{look.tokens_per_call:.2f} tokens per target call" in printed
    assert f"{spec.target_calls} speculative vs 30 autoregressive" in printed
    assert "identical to the target's own greedy output: True" in printed
    assert f"speedup {look.speedup:.2f}x" in printed and "this machine" in printed
    assert look.html().startswith(look.trace.html()) and str(look).endswith(look.lines[-1])


def test_first_look_times_the_fastest_round_after_an_untimed_warm_up(monkeypatch) -> None:
    from specdec_lab.measure import timing

    fake = {  # method -> seconds, one per call, in order: the warm-up first, then 3 rounds
        "speculative": [100.0, 3.0, 1.0, 2.0],
        "autoregressive": [100.0, 4.0, 6.0, 5.0],
    }
    real_run_timed = timing.run_timed

    def run_timed(pair, ids, draft, n_new, gamma, clock, temperature, generator, runtime):
        out, _ = real_run_timed(pair, ids, draft, n_new, gamma, clock, temperature, generator)
        return out, fake["autoregressive" if draft is None else "speculative"].pop(0)

    monkeypatch.setattr(timing, "run_timed", run_timed)
    look = preview.first_look(_mock_pair(), "ab", max_new_tokens=20, rounds=3)
    assert all(not left for left in fake.values())  # one warm-up each, then three rounds each
    assert look.seconds == {"speculative": 1.0, "autoregressive": 4.0}  # each its fastest
    assert look.speedup == 4.0  # fastest against fastest, the warm-up left out
    assert "speculative 1000 ms, autoregressive 4000 ms, speedup 4.00x" in look.lines[-1]


def test_first_look_sampled_uses_one_seed_and_says_equality_is_not_required() -> None:
    pair = _mock_pair()
    a = preview.first_look(pair, "ab", max_new_tokens=25, rounds=1, temperature=1.0, seed=3)
    b = preview.first_look(pair, "ab", max_new_tokens=25, rounds=1, temperature=1.0, seed=3)
    assert a.speculative.tokens.tolist() == b.speculative.tokens.tolist()  # seeded: repeatable
    assert "sampled at T = 1" in a.lines[0] and "not required" in a.lines[0]


def test_first_look_refuses_no_rounds() -> None:
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        preview.first_look(_mock_pair(), "ab", rounds=0)
