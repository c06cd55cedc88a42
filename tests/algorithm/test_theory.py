"""The closed-form theory, checked against brute force and known limits."""

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
