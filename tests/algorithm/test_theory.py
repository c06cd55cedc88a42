"""The closed-form theory, checked against brute force and known limits."""

import math

import pytest

from specdec_lab import theory


def test_expected_tokens_limits_and_series() -> None:
    assert theory.expected_tokens(0.0, 5) == 1.0
    assert theory.expected_tokens(1.0, 5) == 6.0
    for alpha in [0.1, 0.5, 0.9]:
        series = sum(alpha**i for i in range(6))  # 1 + α + ... + α^γ
        assert theory.expected_tokens(alpha, 5) == pytest.approx(series)


def test_speedup_and_optimal_gamma() -> None:
    assert theory.speedup(0.8, 4, 0.0) == pytest.approx(theory.expected_tokens(0.8, 4))
    g = theory.optimal_gamma(0.8, 0.1)
    assert all(theory.speedup(0.8, g, 0.1) >= theory.speedup(0.8, k, 0.1) for k in range(1, 65))
    assert theory.optimal_gamma(0.95, 0.01) > theory.optimal_gamma(0.6, 0.2)


def test_best_gamma_reads_the_measured_verify_curve() -> None:
    flat = [1.0] * 17
    assert theory.best_gamma(0.8, 0.1, flat)[0] == theory.optimal_gamma(0.8, 0.1, max_gamma=16)
    # a CPU whose verify cost doubles past 3 tokens: γ = 2 is best though flat would take more
    cliff = [1.0, 1.05, 1.1] + [2.2] * 14
    gamma, gain = theory.best_gamma(0.8, 0.05, cliff)
    assert gamma == 2 and gain == pytest.approx(theory.speedup(0.8, 2, 0.05, 1.1))
    assert max(theory.speedup(0.8, g, 0.05, cliff[g]) for g in range(1, 17)) == gain
    # α below what one extra token costs: plain decoding is the plan
    assert theory.best_gamma(0.3, 0.05, [1.0, 1.4, 1.6, 1.8]) == (0, 1.0)
    assert theory.best_gamma(0.9, 0.0, [1.0]) == (0, 1.0)  # nothing measured beyond one token


def test_a_rounds_cold_first_draft_is_charged_once_per_round() -> None:
    """`first`: a round's first drafting step costs more than the others (the verify pushed the
    draft's weights out of the cache). It is paid once per round, whatever γ is."""
    alpha, c, r = 0.7, 0.07, 1.15
    assert theory.speedup(alpha, 4, c, r, first=c) == theory.speedup(alpha, 4, c, r)
    for gamma in (1, 4, 8):  # first + (γ - 1) c + r, against γc + r without it
        want = theory.expected_tokens(alpha, gamma) / (0.15 + (gamma - 1) * c + r)
        assert theory.speedup(alpha, gamma, c, r, first=0.15) == pytest.approx(want)
    assert theory.speedup(alpha, 0, c, r, first=5.0) == 1 / r  # no draft, no first step
    curve = [1.0, 1.1, 1.12, 1.14, 1.16, 1.18, 1.2, 1.22, 1.24]
    warm, cold = theory.best_gamma(alpha, c, curve), theory.best_gamma(alpha, c, curve, 0.3)
    assert cold[1] < warm[1] and cold[0] >= warm[0]  # a fixed cost per round favours longer drafts
    for bad in (-0.1, float("inf"), float("nan"), "0.1"):
        with pytest.raises(ValueError, match="first"):
            theory.speedup(alpha, 4, c, r, first=bad)


def test_the_loops_own_work_is_charged_per_round_and_per_plain_token() -> None:
    """`loop` (a round's work outside the forwards) adds to a round's cost; `plain_loop` (plain
    decoding's, per token) to what each token saves. Both in one-token target forwards."""
    alpha, c, r, first = 0.7, 0.07, 1.15, 0.15
    tokens = theory.expected_tokens(alpha, 4)
    got = theory.round_speedup(tokens, 4, c, r, first, loop=0.06, plain_loop=0.04)
    assert got == pytest.approx(tokens * 1.04 / (first + 3 * c + r + 0.06))
    assert theory.round_speedup(tokens, 4, c, r, first) == pytest.approx(
        tokens / (first + 3 * c + r)
    )
    curve = [1.0, 1.1, 1.12, 1.14, 1.16, 1.18, 1.2, 1.22, 1.24]
    free, paid = theory.best_gamma(alpha, c, curve), theory.best_gamma(alpha, c, curve, loop=0.2)
    assert paid[1] < free[1] and paid[0] >= free[0]  # a cost per round favours longer drafts
    for bad in (-0.01, float("inf"), float("nan")):
        for name in ("loop", "plain_loop"):
            with pytest.raises(ValueError, match=name):
                theory.round_speedup(tokens, 4, c, r, **{name: bad})


def test_a_whole_call_pays_the_prompts_forward_and_the_drafters_start() -> None:
    """`run_speedup`: plain decoding pays the prompt's forward, then one forward per further
    token; a head's call pays the prompt's forward (the first token), then rounds; a draft
    model's first round drafts on its own forward over the prompt (`start`) and is verified by
    the prompt's forward. Long calls approach `round_speedup`; a longer prompt pulls toward 1x."""
    tokens, gamma, c, r = 3.0, 2, 0.1, 1.2  # a round: 2c + r = 1.4 one-token forwards
    plain = 2 + 9  # prefill 2, then 9 more tokens
    head = theory.run_speedup(tokens, gamma, c, r, 10, prefill=2.0)
    assert head == pytest.approx(plain / (2 + 9 / 3 * 1.4))
    model = theory.run_speedup(tokens, gamma, c, r, 10, prefill=2.0, start=0.5)
    assert model == pytest.approx(plain / (2 + 0.5 + 0.1 + (10 - 3) / 3 * 1.4))
    per_round = theory.round_speedup(tokens, gamma, c, r, 0.3, 0.05, 0.02)
    long = theory.run_speedup(tokens, gamma, c, r, 10**6, 2.0, 0.5, 0.3, 0.05, 0.02)
    assert long == pytest.approx(per_round, rel=1e-4)
    short, longer_prompt = (theory.run_speedup(tokens, gamma, c, r, 10, p) for p in (2.0, 20.0))
    assert 1 < longer_prompt < short < theory.round_speedup(tokens, gamma, c, r)
    for start in (None, 0.5):  # one token: the prompt's forward alone, no draft, no start
        assert theory.run_speedup(tokens, gamma, c, r, 1, 2.0, start) == 1.0
    # two tokens: the loop drafts one, so the first round pays no (γ - 1)c
    two = theory.run_speedup(tokens, 4, c, r, 2, 2.0, start=0.5)
    assert two == pytest.approx((2 + 1) / (2 + 0.5))
    for kwargs, name in (
        ({"new_tokens": 0}, "new_tokens"),
        ({"prefill": -1.0}, "prefill"),
        ({"prefill": float("nan")}, "prefill"),
        ({"start": float("inf")}, "start"),
        ({"tokens": 0.5}, "tokens"),
    ):
        args = {"tokens": tokens, "new_tokens": 10, "prefill": 2.0} | kwargs
        with pytest.raises(ValueError, match=name):
            theory.run_speedup(gamma=gamma, c=c, verify_cost=r, **args)


def test_depth_rates_count_each_depth_among_the_rounds_that_reached_it() -> None:
    """h(j): of the rounds that drafted a j-th token after keeping the j - 1 before it, the share
    that kept it. A round the budget cut short says nothing of the depths it did not draft."""
    accepted, gammas = [0, 1, 2, 4, 4, 1], [4, 4, 4, 4, 4, 2]
    rates = theory.depth_rates(accepted, gammas)
    # depth 1: six rounds drafted it, five kept it; depth 2: five reached it (the budget's γ = 2
    # round among them), three kept it; depths 3 and 4: rounds of four drafts only
    assert rates == (5 / 6, 3 / 5, 2 / 3, 1.0)
    assert theory.depth_rates([0], [1]) == (0.0,)
    assert math.isnan(theory.depth_rates([0, 0], [2, 2])[1])  # nobody kept depth 1
    for bad in (([1], [0]), ([1, 2], [3])):
        with pytest.raises(ValueError):
            theory.depth_rates(*bad)


def test_expected_tokens_at_depths_is_the_papers_at_one_rate_and_climbs_with_depth() -> None:
    for alpha in (0.0, 0.3, 0.8, 1.0):
        for gamma in (0, 1, 4, 9):  # past the measured depths: the deepest rate carries on
            got = theory.expected_tokens_at_depths([alpha] * 3, gamma)
            assert got == pytest.approx(theory.expected_tokens(alpha, gamma))
    climbing = (0.6, 0.7, 0.8, 0.9)
    assert theory.expected_tokens_at_depths(climbing, 4) == pytest.approx(
        1 + 0.6 + 0.6 * 0.7 + 0.6 * 0.7 * 0.8 + 0.6 * 0.7 * 0.8 * 0.9
    )
    assert theory.expected_tokens_at_depths((0.5, math.nan), 2) == pytest.approx(1.75)
    for bad in ((), (math.nan,), (1.2,)):
        with pytest.raises(ValueError, match="rates"):
            theory.expected_tokens_at_depths(bad, 2)
    # best_gamma plans from the rates where given: here they reward a longer draft than α does
    curve = [1.0] + [1.1] * 8
    flat = theory.best_gamma(0.6, 0.1, curve)
    deep = theory.best_gamma(0.6, 0.1, curve, rates=(0.6, 0.85, 0.9, 0.9))
    assert deep[0] > flat[0]
    assert deep[1] == pytest.approx(
        theory.round_speedup(
            theory.expected_tokens_at_depths((0.6, 0.85, 0.9, 0.9), deep[0]),
            deep[0],
            0.1,
            1.1,
        )
    )


def test_break_even_rule_matches_gamma_one() -> None:
    # With γ = 1 the speedup (1 + α)/(1 + c) exceeds 1 exactly when α > c.
    for alpha, c in [(0.3, 0.2), (0.2, 0.3), (0.5, 0.49), (0.1, 0.5)]:
        assert theory.breaks_even(alpha, c) == (theory.speedup(alpha, 1, c) > 1)
        assert theory.breaks_even(alpha, c) == (
            max(theory.speedup(alpha, g, c) for g in range(1, 30)) > 1
        )


def test_inverse_of_expected_tokens() -> None:
    for alpha in [0.05, 0.5, 0.93]:
        assert theory.alpha_from_tokens_per_call(
            theory.expected_tokens(alpha, 4), 4
        ) == pytest.approx(alpha, abs=1e-8)


@pytest.mark.parametrize("args", [(-0.1, 3), (1.1, 3), (0.5, -1), (0.5, 2.5)])
def test_bad_theory_input(args) -> None:
    with pytest.raises(ValueError):
        theory.expected_tokens(*args)
