"""The closed-form theory of speculative decoding (Leviathan et al. 2023, arXiv:2211.17192, §3).

α is the acceptance rate, the expected Σ_x min(p(x), q(x)); γ is the number of drafted tokens;
c is the cost of one draft forward divided by the cost of one target forward.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def _check(alpha: float, gamma: int | None = None, c: float | None = None) -> None:
    if not (isinstance(alpha, (int, float)) and 0.0 <= alpha <= 1.0):
        raise ValueError(f"alpha must lie in [0, 1], got {alpha!r}")
    if gamma is not None and (not isinstance(gamma, int) or gamma < 0):
        raise ValueError(f"gamma must be a non-negative integer, got {gamma!r}")
    if c is not None and not (isinstance(c, (int, float)) and c >= 0 and math.isfinite(c)):
        raise ValueError(f"c must be a finite number >= 0, got {c!r}")


def expected_tokens(alpha: float, gamma: int) -> float:
    """E[tokens per target call] = (1 − α^(γ+1)) / (1 − α)  (Leviathan eq. 1); γ+1 when α = 1."""
    _check(alpha, gamma)
    if alpha == 1.0:
        return float(gamma + 1)
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def speedup(
    alpha: float, gamma: int, c: float, verify_cost: float = 1.0, first: float | None = None
) -> float:
    """Expected walltime improvement (1 − α^(γ+1)) / ((1 − α)(γc + 1))  (Leviathan Thm 3.8).

    The paper assumes the target's forward over γ+1 tokens costs the same as over one token,
    which holds while verification is memory-bound (notebook 05 measures where that stops).
    Departures from the paper, both measured: `verify_cost` = t(γ+1 tokens) / t(1 token)
    replaces that "+1" (the default 1 is the paper's formula); `first`, where given, is the cost
    of a round's first drafting step, which can differ from the others' c: it runs right after
    the target's verify, which has just streamed the target's weights through the cache the
    draft's weights were in (`timing.loop_costs` times it). A round then costs
    first + (γ − 1)c + verify_cost.
    """
    _check(alpha, gamma, c)
    return round_speedup(expected_tokens(alpha, gamma), gamma, c, verify_cost, first)


def _check_cost(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and 0 <= value < math.inf):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


def _round_cost(
    gamma: int, c: float, verify_cost: float, first: float | None, loop: float
) -> float:
    """A round's cost in one-token target forwards: first + (γ − 1)c + verify_cost + loop
    (first None: c; no draft, no drafting step)."""
    _check(0.0, gamma, c)
    if not (isinstance(verify_cost, (int, float)) and 0 < verify_cost < math.inf):
        raise ValueError(f"verify_cost must be a finite number > 0, got {verify_cost!r}")
    if first is not None and not (isinstance(first, (int, float)) and 0 <= first < math.inf):
        raise ValueError(f"first must be a finite number >= 0 or None, got {first!r}")
    _check_cost("loop", loop)
    cold = first - c if first is not None and gamma > 0 else 0.0  # paid once per round
    return gamma * c + cold + verify_cost + loop


def round_speedup(
    tokens: float,
    gamma: int,
    c: float,
    verify_cost: float = 1.0,
    first: float | None = None,
    loop: float = 0.0,
    plain_loop: float = 0.0,
) -> float:
    """`speedup` from the tokens a round yields on average (`expected_tokens`, or
    `expected_tokens_at_depths`) instead of α: tokens / (first + (γ − 1)c + verify_cost).

    `loop` and `plain_loop` are the decoding loops' own work outside every forward (sampling,
    the acceptance rule, bookkeeping), in one-token target forwards: the speculative loop's per
    round, plain decoding's per token (`plan.loop_share` measures both). With them a round
    costs first + (γ − 1)c + verify_cost + loop against tokens · (1 + plain_loop)."""
    cost = _round_cost(gamma, c, verify_cost, first, loop)
    _check_cost("plain_loop", plain_loop)
    return tokens * (1 + plain_loop) / cost


def run_speedup(
    tokens: float,
    gamma: int,
    c: float,
    verify_cost: float,
    new_tokens: int,
    prefill: float,
    start: float | None = None,
    first: float | None = None,
    loop: float = 0.0,
    plain_loop: float = 0.0,
) -> float:
    """`round_speedup` over one whole generation call of `new_tokens` tokens, the prompt's
    forward included, as a clock around the call sees it. Every cost is in one-token target
    forwards; `prefill` is the target's forward over the prompt, which yields the first token.

    Plain decoding: prefill + (new_tokens − 1)(1 + plain_loop). Speculative decoding, where the
    drafter waits for the target's own states (a draft head: `start` None): the prompt's forward
    yields the first token, then rounds yield the rest, tokens per round each, at
    R = first + (γ − 1)c + verify_cost + loop. Where the drafter reads the prompt itself (a draft
    model: `start` is its forward over the prompt, which drafts the first token), the first
    round verifies inside the prompt's forward: prefill + start + (γ − 1)c (γ capped, as the
    loop caps it, at new_tokens − 1), then rounds for the tokens left after the first round's.
    A one-token call is the prompt's forward alone in both: 1.0."""
    if not isinstance(new_tokens, int) or new_tokens < 1:
        raise ValueError(f"new_tokens must be a positive integer, got {new_tokens!r}")
    _check_cost("prefill", prefill)
    if start is not None:
        _check_cost("start", start)
    if not (isinstance(tokens, (int, float)) and 1 <= tokens < math.inf):
        raise ValueError(f"tokens must be a finite number >= 1 (tokens per round), got {tokens!r}")
    rounds = _round_cost(gamma, c, verify_cost, first, loop) / tokens  # per token after the first
    _check_cost("plain_loop", plain_loop)
    if new_tokens == 1:  # the prompt's forward alone: a one-token call drafts nothing
        return 1.0
    plain = prefill + (new_tokens - 1) * (1 + plain_loop)
    if start is None:
        return plain / (prefill + (new_tokens - 1) * rounds)
    drafted = min(gamma, new_tokens - 1)  # the loop's cap on a round's drafts
    opening = prefill + start + max(drafted - 1, 0) * c  # round 1, verified on the prompt
    return plain / (opening + max(new_tokens - tokens, 0.0) * rounds)


def depth_rates(accepted: Sequence[int], gammas: Sequence[int]) -> tuple[float, ...]:
    """h(j) for j = 1 .. max(γ): of the rounds that drafted a j-th token after keeping the j − 1
    before it, the share that kept it too; NaN at a depth no round reached. Rounds that drafted
    fewer tokens (the budget's last one) say nothing of the depths they did not draft.

    The paper's α is one h for every depth. Measured, h can climb with depth (a draft that got
    its first tokens right is on an easy stretch): the embedded pair at T = 1 kept α = 0.68 of
    its drafts at γ = 3 and 0.76 at γ = 5, so α probed at one γ mispredicts the others."""
    if len(accepted) != len(gammas):
        raise ValueError(f"accepted and gammas must pair up, got {len(accepted)} and {len(gammas)}")
    rounds = list(zip(accepted, gammas, strict=True))
    if any(not 0 <= n <= g for n, g in rounds):
        raise ValueError("each round must keep 0 <= accepted <= gamma drafts")
    rates = []
    for j in range(1, max(gammas, default=0) + 1):
        reached = sum(1 for n, g in rounds if g >= j and n >= j - 1)
        kept = sum(1 for n, g in rounds if g >= j and n >= j)
        rates.append(kept / reached if reached else math.nan)
    return tuple(rates)


def expected_tokens_at_depths(rates: Sequence[float], gamma: int) -> float:
    """E[tokens per round] at γ from per-depth acceptance `rates` (`depth_rates`):
    1 + Σ_{j ≤ γ} h(1)···h(j). Depths past the measured ones (or unreached: NaN) take the
    deepest measured rate. With every h = α it is `expected_tokens(α, γ)`."""
    _check(0.0, gamma)
    known = [h for h in rates if not math.isnan(h)]
    if not known or any(not 0.0 <= h <= 1.0 for h in known):
        raise ValueError(f"rates must hold at least one rate in [0, 1], got {rates!r}")
    tokens, survive, last = 1.0, 1.0, known[0]
    for j in range(gamma):
        h = rates[j] if j < len(rates) and not math.isnan(rates[j]) else last
        last = h
        survive *= h
        tokens += survive
    return tokens


def optimal_gamma(alpha: float, c: float, max_gamma: int = 64) -> int:
    """The γ in [1, max_gamma] with the highest expected speedup (found numerically)."""
    _check(alpha, None, c)
    return max(range(1, max_gamma + 1), key=lambda g: speedup(alpha, g, c))


def best_gamma(
    alpha: float,
    c: float,
    verify_cost: Sequence[float],
    first: float | None = None,
    rates: Sequence[float] | None = None,
    loop: float = 0.0,
    plain_loop: float = 0.0,
) -> tuple[int, float]:
    """(γ, expected speedup) at the best γ when a forward over k tokens costs verify_cost[k - 1]
    one-token forwards (a measured curve, `timing.verify_curve`; γ ≤ len(verify_cost) - 1) and
    a round's first drafting step costs `first` (`speedup`; None: c like the others). Given
    per-depth acceptance `rates` (`depth_rates`), a round's tokens come from them, not from α;
    `loop` and `plain_loop` are the loops' own work (`round_speedup`).
    (0, 1.0) when no γ beats plain decoding: then the plan is not to speculate."""
    _check(alpha, None, c)
    best = (0, 1.0)
    for gamma in range(1, len(verify_cost)):
        tokens = (
            expected_tokens(alpha, gamma)
            if rates is None
            else expected_tokens_at_depths(rates, gamma)
        )
        gain = round_speedup(tokens, gamma, c, verify_cost[gamma], first, loop, plain_loop)
        if gain > best[1]:
            best = (gamma, gain)
    return best


def breaks_even(alpha: float, c: float) -> bool:
    """α > c: the condition under which speculation beats plain decoding for some γ, when
    verifying γ+1 tokens costs one target forward (the paper's assumption, verify_cost = 1).

    Leviathan Cor. 3.9 gives the "if" direction (α > c ⇒ γ = 1 already gains); "only if" also
    holds under that assumption, since (1 − α^(γ+1))/(1 − α) ≤ 1 + γα ≤ 1 + γc when α ≤ c. With a
    measured verify_cost r > 1, γ = 1 gains only when α > c + r − 1: use `speedup` instead.
    """
    _check(alpha, None, c)
    return alpha > c


def alpha_from_tokens_per_call(tokens_per_call: float, gamma: int, tol: float = 1e-10) -> float:
    """Invert `expected_tokens`: the α that gives `tokens_per_call` tokens per target call."""
    if not 1.0 <= tokens_per_call <= gamma + 1:
        raise ValueError(f"tokens_per_call must lie in [1, {gamma + 1}], got {tokens_per_call}")
    lo, hi = 0.0, 1.0
    while hi - lo > tol:  # expected_tokens is increasing in α
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_tokens(mid, gamma) < tokens_per_call else (lo, mid)
    return (lo + hi) / 2
