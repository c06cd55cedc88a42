"""The checks of notebooks/07_engines_and_capstone.ipynb: Exercises 7.1 (α from an engine's
counters), 7.3 (the α̂ a real engine's counters allow), 7.2 (the capstone's plan),
`check_report` (a capstone report's arithmetic) and `check_project` (a project's before/after
table, against a rerun), all against `specdec_lab.measure.capstone`."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from specdec_lab import decoding, theory
from specdec_lab.course.checks.harness import call_answer, refuse_delegation, require_prediction
from specdec_lab.measure import capstone

TOL = 1e-9  # arithmetic agreement (relative), for numbers a report states


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= TOL * max(1.0, abs(b))


def _alpha_of(alpha_from_counters: Callable, counters: dict[str, Any]) -> Any:
    """The learner's α̂ of vLLM `counters`."""
    per_position = list(counters["num_accepted_tokens_per_pos"])
    return call_answer("7.1", alpha_from_counters, counters["num_drafts"], per_position)


# --- Exercise 7.1 --------------------------------------------------------------------------------

PREDICTION_7_1 = ("accept % is higher", "they are equal", "α̂ is higher")
LEFT_OUT_OPTIONS = {
    "c": "the draft's cost per forward",
    "r": "the verification forward costing more than one token",
    "bonus": "the target's own token that ends every step",
    "overhead": "work between the forwards: sampling, acceptance, cache rollback, Python",
    "varying α": "α changing from position to position and prompt to prompt",
}
LEFT_OUT = {"overhead", "varying α"}  # what speedup(α, γ, c, r) does not contain


def _counters_of(accepted: Sequence[int], gamma: int) -> tuple[dict[str, Any], float]:
    """vLLM counters of steps that each drafted `gamma` tokens and kept `accepted[i]`, and α̂."""
    stats = decoding.GenerationStats(accepted=list(accepted), gammas=[gamma] * len(accepted))
    return capstone.engine_counters(stats, gamma)["vllm"], stats.acceptance_rate


def _worked_7_1() -> list[tuple[str, list[int], int]]:
    rng = np.random.default_rng(7)
    falling = []  # acceptance falls with the position: 0.9, 0.7, 0.5, 0.3, 0.2
    for _ in range(300):
        n = 0
        while n < 5 and rng.random() < (0.9, 0.7, 0.5, 0.3, 0.2)[n]:
            n += 1
        falling.append(n)
    return [
        ("γ = 4, ten steps", [4, 0, 1, 2, 4, 3, 0, 0, 1, 4], 4),
        ("γ = 5, acceptance falling with the position", falling, 5),
        ("γ = 2, three steps", [2, 1, 0], 2),
        ("γ = 1", [1, 0, 0, 1, 1], 1),
        ("every draft accepted", [3, 3, 3], 3),
        ("no draft accepted", [0, 0, 0, 0], 4),
    ]


def exercise_7_1(
    alpha_from_counters: Callable[[int, list[int]], float],
    prediction: str,
    left_out: set[str] | None,
    counters: dict[str, Any],
    reference_alpha: float,
    c: float,
    r: float,
    measured_speedup: float,
) -> float:
    """Exercise 7.1: α̂ from vLLM's counters on worked cases (where accept %, the first
    position's rate, an average of per-position rates and an off-by-one count of the examined
    drafts all differ from it), then on the learner's own `counters` (α̂ = `reference_alpha`);
    the prediction; what speedup(α, γ, c, r) leaves out. Prints the predictions beside the clock."""
    for label, accepted, gamma in _worked_7_1():
        vllm, want = _counters_of(accepted, gamma)
        got = _alpha_of(alpha_from_counters, vllm)
        assert isinstance(got, (int, float)) and math.isfinite(got), (
            f"Exercise 7.1 ({label}): return α̂ as a number, got {got!r}"
        )
        share = vllm["num_accepted_tokens"] / vllm["num_draft_tokens"]
        hint = ""
        if abs(got - share) < 1e-9 and abs(want - share) > 1e-9:
            hint = (
                ": that is accepted over drafted tokens (vLLM's draft acceptance rate, "
                "llama.cpp's accept %); divide by the drafts the verifier examined instead"
            )
        assert abs(got - want) < 1e-9, (
            f"Exercise 7.1 ({label}): num_drafts = {vllm['num_drafts']}, per position "
            f"{vllm['num_accepted_tokens_per_pos']}: α̂ is {want:.6f}, got {got:.6f}{hint}"
        )
    gamma = len(counters["num_accepted_tokens_per_pos"])
    mine = _alpha_of(alpha_from_counters, counters)
    assert abs(mine - reference_alpha) < 1e-9, (
        f"Exercise 7.1: on your own counters α̂ is {reference_alpha:.6f}, got {mine:.6f}"
    )
    require_prediction("7.1", prediction, PREDICTION_7_1)
    if left_out is None:
        raise NotImplementedError("Exercise 7.1: name what the formula leaves out in left_out_7_1")
    assert isinstance(left_out, (set, frozenset, list, tuple)) and set(left_out) <= set(
        LEFT_OUT_OPTIONS
    ), f"Exercise 7.1: left_out_7_1 must be a set of keys of {sorted(LEFT_OUT_OPTIONS)}"
    inside = sorted(set(left_out) - LEFT_OUT)
    assert not inside, (
        f"Exercise 7.1: {inside} are in the formula: E[tokens] = (1 − α^(γ+1)) / (1 − α) counts "
        "the target's own token, and the denominator γc + r holds the draft's and the "
        "verification's costs"
    )
    missing = sorted(LEFT_OUT - set(left_out))
    assert not missing, (
        f"Exercise 7.1: the formula also leaves out {', '.join(LEFT_OUT_OPTIONS[m] for m in missing)}"
    )
    share = counters["num_accepted_tokens"] / counters["num_draft_tokens"]
    print(
        f"your counters (γ = {gamma}): α̂ = {mine:.3f}, accept % = {100 * share:.1f}%; you "
        f"predicted {prediction!r}"
    )
    print(
        f"speedup(α̂, γ, c, r) = {theory.speedup(mine, gamma, c, r):.2f}x; with accept % as α "
        f"{theory.speedup(share, gamma, c, r):.2f}x; the clock measured {measured_speedup:.2f}x"
    )
    print("Exercise 7.1: correct!")
    return mine


# --- Exercise 7.3 --------------------------------------------------------------------------------

PREDICTION_7_3 = (
    "the mean acceptance length is higher",
    "they are equal",
    "tokens per target call is higher",
)


def _drafts_counters(lengths: Sequence[int], accepted: Sequence[int]) -> tuple[dict, float]:
    """vLLM's counters of drafts of `lengths` that kept `accepted[i]` tokens, and their true α̂."""
    steps = decoding.GenerationStats(accepted=list(accepted), gammas=list(lengths))
    counters = capstone.drafting_counters(steps, max(lengths))
    examined = sum(n + (n < g) for n, g in zip(accepted, lengths, strict=True))
    return counters, sum(accepted) / examined


def _worked_7_3() -> list[tuple[str, list[int], list[int]]]:
    return [  # (label, each draft's length, the tokens it kept)
        ("every draft γ = 4 long", [4] * 6, [4, 0, 1, 2, 4, 3]),
        ("γ = 3, two drafts one token short", [3, 3, 2, 3, 2, 3], [3, 1, 2, 0, 2, 3]),
        ("γ = 4, a lookup's short continuations", [4, 1, 1, 2, 4], [4, 1, 0, 2, 1]),
        ("γ = 5, short drafts rejected early", [5, 3, 2, 5], [2, 0, 1, 5]),
        ("γ = 1", [1, 1, 1, 1], [1, 0, 1, 1]),
        ("no draft accepted", [3, 2, 3], [0, 0, 0]),
    ]


def exercise_7_3(
    alpha_range: Callable[[int, int, list[int]], tuple[float, float]],
    prediction: str,
    logs: dict[str, dict[str, Any]],
    lookup: dict[str, Any],
    lookup_alpha: float,
    lookup_tokens_per_call: float,
) -> None:
    """Exercise 7.3: the α̂ an engine's counters allow, (low, high), on worked drafts of known
    lengths (where ignoring the short drafts, an uncapped or a wrongly capped count of them, and
    accept % all go wrong), the quoted `logs` and the course's own prompt-lookup run (`lookup`,
    true α̂ `lookup_alpha`); then the prediction, beside that run's acceptance length."""
    guard = refuse_delegation(
        "7.3", alpha_range, {"alpha_range": (capstone, "alpha_range")}, "the interval"
    )
    cases = [(label, *_drafts_counters(lengths, kept)) for label, lengths, kept in _worked_7_3()]
    cases += [(f"the {name} log", log, None) for name, log in logs.items()]
    cases.append(("your prompt-lookup run", lookup, lookup_alpha))
    for label, counters, true_alpha in cases:
        args = (
            counters["num_drafts"],
            counters["num_draft_tokens"],
            list(counters["num_accepted_tokens_per_pos"]),
        )
        with guard:
            got = call_answer("7.3", alpha_range, *args)
        assert (
            isinstance(got, (tuple, list))
            and len(got) == 2
            and all(isinstance(x, (int, float)) and math.isfinite(x) for x in got)
        ), f"Exercise 7.3 ({label}): return (low, high), two numbers, got {got!r}"
        want = capstone.alpha_range(*args)
        assert true_alpha is None or want[0] - 1e-12 <= true_alpha <= want[1] + 1e-12
        shown = f"N = {args[0]}, D = {args[1]}, per position {args[2]}"
        gamma = len(args[2])
        hint = ""
        if got[0] > got[1]:
            hint = ": low first, then high"
        elif abs(got[0] - got[1]) < 1e-12 and want[1] > want[0]:
            hint = (
                f": γN = {gamma * args[0]} but D = {args[1]}, so some drafts were short, and "
                "Exercise 7.1's count may be too high"
            )
        elif got[1] > 1 + 1e-12:
            hint = ": α̂ cannot exceed 1; which drafts can be short?"
        elif abs(got[0] - sum(args[2]) / args[1]) < 1e-12 and abs(want[0] - got[0]) > 1e-9:
            hint = ": that is accepted over drafted tokens (accept %), not over examined drafts"
        assert abs(got[0] - want[0]) < 1e-9 and abs(got[1] - want[1]) < 1e-9, (
            f"Exercise 7.3 ({label}): {shown}: α̂ lies in [{want[0]:.6f}, {want[1]:.6f}], got "
            f"[{got[0]:.6f}, {got[1]:.6f}]{hint}"
        )
    require_prediction("7.3", prediction, PREDICTION_7_3)
    for name, log in logs.items():
        low, high = capstone.alpha_range(
            log["num_drafts"], log["num_draft_tokens"], log["num_accepted_tokens_per_pos"]
        )
        said = f"α̂ = {low:.3f} exactly" if high - low < 1e-12 else f"{low:.3f} ≤ α̂ ≤ {high:.3f}"
        print(f"{name}: {said}")
    length = capstone.vllm_metrics(lookup)["mean_acceptance_length"]
    print(
        f"your prompt-lookup run: mean acceptance length {length:.2f} (vLLM's, over the "
        f"{lookup['num_drafts']} steps that drafted), tokens per target call "
        f"{lookup_tokens_per_call:.2f} (every step); you predicted {prediction!r}"
    )
    print("Exercise 7.3: correct!")


# --- Exercise 7.2 and the capstone report -------------------------------------------------------


def _worked_7_2() -> list[tuple[str, float, float, float, list[float], float]]:
    rising = [1.0 + 0.09 * k**1.3 for k in range(12)]  # verification dearer with every token
    flat = [1.0] * 8 + [1.6] * 8
    return [  # (label, α̂, SE, c, curve, first)
        ("a verify curve that rises with k", 0.8, 0.02, 0.05, rising, 0.05),
        ("a flat curve up to 8 tokens, then a step", 0.7, 0.03, 0.02, flat, 0.02),
        ("a dear draft", 0.9, 0.01, 0.4, [1.0, 1.02, 1.05, 1.1, 1.2, 1.3], 0.4),
        ("a weak draft", 0.35, 0.05, 0.1, [1.0, 1.3, 1.45, 1.5, 1.55], 0.1),
        ("a cold first step, a cheap rest", 0.6, 0.03, 0.05, rising, 0.5),
    ]


def exercise_7_2(
    plan_capstone: Callable[..., dict[str, Any]],
    alpha: float,
    alpha_se: float,
    c: float,
    curve: Sequence[float],
    first: float,
) -> dict[str, Any]:
    """Exercise 7.2 on worked cases (where ignoring r, an off-by-one r, ignoring the cold first
    step, maximising tokens per call and a one-sided range all go wrong), then on the capstone's
    own measurements."""
    guard = refuse_delegation(
        "7.2", plan_capstone, {"best_plan": (capstone, "best_plan")}, "the plan"
    )
    mine = ("your measurements", alpha, alpha_se, c, curve, first)
    for label, a, se, cc, cv, cold in [*_worked_7_2(), mine]:
        with guard:
            got = call_answer("7.2", plan_capstone, a, se, cc, list(cv), cold)
        assert isinstance(got, dict) and set(capstone.PLAN_KEYS) <= set(got), (
            f"Exercise 7.2: return a dict with the keys {capstone.PLAN_KEYS}, got {got!r}"
        )
        want = capstone.best_plan(a, se, cc, cv, cold)
        if got["gamma"] != want["gamma"]:
            shown = f"α = {a}, c = {cc}, first = {cold}, r(γ) = {[round(x, 3) for x in cv[1:]]}"
            raise AssertionError(
                f"Exercise 7.2 ({label}): {shown}: the best γ is {want['gamma']}, got "
                f"{got['gamma']}: maximise E[tokens] / (first + (γ − 1)c + r(γ)) with "
                f"r(γ) = t(γ + 1) / t(1)"
            )
        for key in capstone.PLAN_KEYS[1:]:
            how = "the range is the speedup at α̂ − 2 SE and α̂ + 2 SE, at the same γ"
            if key == "predicted":
                how = "speedup(α̂, γ, c, r(γ), first) with r(γ) = curve[γ]"
            assert isinstance(got[key], (int, float)) and _close(got[key], want[key]), (
                f"Exercise 7.2 ({label}): at γ = {want['gamma']} {key} is {want[key]:.4f}, got "
                f"{got[key]}: {how}"
            )
    with guard:
        plan = plan_capstone(alpha, alpha_se, c, list(curve), first)
    print(
        f"your plan: γ = {plan['gamma']}, predicted {plan['predicted']:.2f}x "
        f"({plan['predicted_low']:.2f}–{plan['predicted_high']:.2f}x at α̂ ± 2 SE)"
    )
    print("Exercise 7.2: correct!")
    return {k: plan[k] for k in capstone.PLAN_KEYS}


class ReportError(AssertionError):
    """A capstone report whose numbers do not follow from each other."""


def _need(ok: bool, why: str) -> None:
    if not ok:
        raise ReportError(f"Capstone report: {why}")


def _checked_alpha(rep: dict[str, Any]) -> tuple[float, float, float]:
    """The report's counts add up: (α̂, its SE across prompts, the binomial SE)."""
    accepted, examined = rep["prompt_accepted"], rep["prompt_examined"]
    _need(len(accepted) == len(examined) >= 2, "one count per prompt, at least two prompts")
    _need(
        all(e > 0 and 0 <= a <= e for a, e in zip(accepted, examined, strict=True)),
        "per-prompt counts out of range",
    )
    _need(
        rep["accepted"] == sum(accepted) and rep["examined"] == sum(examined),
        f"the pooled counts are the sums over the prompts ({sum(accepted)} of {sum(examined)})",
    )
    alpha = rep["accepted"] / rep["examined"]
    _need(_close(rep["alpha"], alpha), f"α̂ = accepted / examined = {alpha:.4f}, not {rep['alpha']}")
    se = capstone.cluster_se(accepted, examined)
    binomial = capstone.binomial_se(alpha, rep["examined"])
    _need(
        not (_close(rep["alpha_se"], binomial) and not _close(binomial, se)),
        f"alpha_se {rep['alpha_se']:.4g} is the binomial SE, which treats every draft as an "
        f"independent coin; the range uses the standard error across prompts, {se:.4g}",
    )
    _need(
        _close(rep["alpha_se"], se),
        f"the standard error of α̂ across prompts is {se:.4g}, not {rep['alpha_se']}",
    )
    _need(
        _close(rep["alpha_se_binomial"], binomial),
        f"the binomial standard error is {binomial:.4g}, not {rep['alpha_se_binomial']}",
    )
    return alpha, se, binomial


def _checked_plan(rep: dict[str, Any], alpha: float, se: float, binomial: float) -> dict:
    """γ and the predicted speedup with its interval follow from α̂ ± 2 SE, c, a round's first
    step and the curve (the best γ, or a project arm's fixed one)."""
    curve, c, first = rep["verify_curve"], rep["c"], rep.get("first")
    _need(len(curve) >= 2 and _close(curve[0], 1.0), "verify_curve[0] is t(1)/t(1) = 1")
    fixed = rep.get("arm", {}).get("gamma")
    fixed = fixed if isinstance(fixed, int) and 1 <= fixed < len(curve) else None
    want = capstone.best_plan(alpha, se, c, curve, first, fixed)
    gamma = want["gamma"]
    rule = f"the arm's fixed γ is {gamma}" if fixed else f"the best γ for these α̂, c, r is {gamma}"
    _need(rep["gamma"] == gamma, rule)
    narrow = capstone.best_plan(alpha, binomial, c, curve, first, fixed)
    for key in capstone.PLAN_KEYS[1:]:
        hint = ""
        if key != "predicted" and _close(rep[key], narrow[key]) and not _close(rep[key], want[key]):
            hint = ": that is the end of α̂ ± 2 binomial SE, not ± 2 SE across prompts"
        _need(
            _close(rep[key], want[key]),
            f"{key} at γ = {gamma} is {want[key]:.4f}, not {rep[key]}{hint}",
        )
    return want


def _checked_clock(rep: dict[str, Any], want: dict) -> tuple[float, str]:
    """Per-prompt and pooled speedups follow from the seconds, per-prompt predictions from each
    prompt's own α̂, and the verdict from the pooled speedup: (pooled, verdict)."""
    accepted, examined = rep["prompt_accepted"], rep["prompt_examined"]
    plain, spec, n = rep["plain_seconds"], rep["spec_seconds"], len(examined)
    _need(
        len(plain) == len(spec) == len(rep["measured_per_prompt"]) == n,
        "one time per prompt, for the prompts counted",
    )
    gamma, c = want["gamma"], rep["c"]
    r = rep["verify_curve"][gamma]
    for i, (p, s, m) in enumerate(zip(plain, spec, rep["measured_per_prompt"], strict=True)):
        _need(p > 0 and s > 0 and _close(m, p / s), f"prompt {i}: speedup {p / s:.4f}, not {m}")
    _need(len(rep["predicted_per_prompt"]) == n, "one predicted speedup per prompt")
    for i, (a, e, got) in enumerate(
        zip(accepted, examined, rep["predicted_per_prompt"], strict=True)
    ):
        own = theory.speedup(a / e, gamma, c, r, rep.get("first"))
        _need(
            _close(got, own),
            f"prompt {i}: its own α̂ = {a / e:.4f} predicts {own:.4f} at γ = {gamma}, not {got}",
        )
    pooled = sum(plain) / sum(spec)
    _need(
        _close(rep["measured_pooled"], pooled),
        f"the pooled speedup is total plain / total speculative seconds, {pooled:.4f}",
    )
    where = capstone.verdict(pooled, want["predicted_low"], want["predicted_high"])
    _need(
        rep["verdict"] == where,
        f"the pooled {pooled:.2f}x lies {where} the predicted interval "
        f"{want['predicted_low']:.2f}–{want['predicted_high']:.2f}x, not {rep['verdict']!r}",
    )
    return pooled, where


def _checked_call(rep: dict[str, Any], want: dict, alpha: float) -> str:
    """A report's whole-call prediction, where it has one, follows from the plan's γ, the costs
    and what a call pays around its rounds: the clause the summary line gains ("" if none)."""
    if "call" not in rep:
        return ""
    call = rep["call"]
    missing = [key for key in capstone.CALL_KEYS if key not in call]
    _need(not missing, f"the report's 'call' lacks {', '.join(missing)}")
    gamma = want["gamma"]
    own = capstone.call_speedup(alpha, gamma, rep["c"], rep["verify_curve"], rep.get("first"), call)
    _need(
        _close(rep["predicted_call"], own),
        f"a whole call of {call['new_tokens']} tokens at γ = {gamma} is predicted {own:.4f}x "
        f"(the prompt's forward {call['prefill']:.3f}, the draft's {call['start']:.3f}), not "
        f"{rep['predicted_call']}",
    )
    return (
        f"; a whole call of {call['new_tokens']} tokens (the prompt's forward and the draft's "
        f"start included) predicted {own:.2f}x, measured {rep['measured_pooled'] / own:.2f} of it"
    )


def check_report(rep: dict[str, Any]) -> str:
    """Validate a capstone report's arithmetic (α̂ and its SE across prompts from the counts; γ and
    the predicted interval from them; the speedups and the verdict from the seconds); return its
    one-line summary. Raises `ReportError` with a sentence naming what does not add up."""
    alpha, se, binomial = _checked_alpha(rep)
    want = _checked_plan(rep, alpha, se, binomial)
    pooled, where = _checked_clock(rep, want)
    whole_call = _checked_call(rep, want, alpha)
    n, gamma = len(rep["prompt_examined"]), want["gamma"]
    cold = "" if rep.get("first") is None else f" (a round's first step {rep['first']:.3f})"
    return (
        f"{rep['pair']} on {rep['device']}, T = {rep['temperature']:g}: α̂ = {alpha:.3f} ± "
        f"{se:.3f} (SE across {n} prompts, used; binomial SE {binomial:.3f}, not used), "
        f"c = {rep['c']:.3f}{cold}, γ = {gamma} (r = {rep['verify_curve'][gamma]:.2f}): predicted "
        f"{rep['predicted']:.2f}x ({rep['predicted_low']:.2f}–{rep['predicted_high']:.2f} at "
        f"α̂ ± 2 SE), measured {pooled:.2f}x pooled over {n} prompts (each the fastest of "
        f"{rep['rounds']} rounds): {where} the predicted interval{whole_call}"
    )


# --- the capstone project: its before/after table against a rerun ------------------------------


def _need_project(ok: bool, why: str) -> None:
    if not ok:
        raise ReportError(f"Capstone project: {why}")


def _clocked(rep: dict[str, Any]) -> dict[str, tuple[str, float]]:
    """A report's clock-based numbers by name, each with its kind of `capstone.RERUN_TOLERANCE`."""
    gamma = rep["gamma"]
    return {
        "c": ("cost", rep["c"]),
        **({} if rep.get("first") is None else {"a round's first step": ("cost", rep["first"])}),
        f"r(γ = {gamma})": ("cost", rep["verify_curve"][gamma]),
        "the pooled speedup": ("speed", rep["measured_pooled"]),
        "speculative tokens/s": ("speed", capstone.tokens_per_second(rep)),
    }


def _rerun_agreement(side: str, rep: dict[str, Any], rerun: Callable[[], dict[str, Any]]) -> float:
    """Rerun the side until its clock-based numbers agree with the table's within
    `capstone.RERUN_TOLERANCE` (at most `capstone.RERUNS` times; each number is judged by the
    rerun closest to it). Every rerun must reproduce the counts and tokens exactly. Returns the
    largest disagreement left in the speedup and tokens/s."""
    stated = _clocked(rep)
    closest = {name: (math.inf, math.nan) for name in stated}  # name: (disagreement, value)
    for _ in range(capstone.RERUNS):
        fresh = rerun()
        for key, what in (("prompt_examined", "examined"), ("prompt_accepted", "accepted")):
            _need_project(
                list(rep[key]) == list(fresh[key]),
                f"{side}: a rerun of these settings {what} {fresh[key]} drafts per prompt, the "
                f"table says {rep[key]}: its counts were not measured with these settings",
            )
        _need_project(
            rep["tokens"] == fresh["tokens"],
            f"{side}: a rerun of these settings generates other tokens than the table records",
        )
        for name, (_, again) in _clocked(fresh).items():
            off = capstone.disagreement(stated[name][1], again)
            closest[name] = min(closest[name], (off, again))
        if all(closest[n][0] <= capstone.RERUN_TOLERANCE[k] for n, (k, _) in stated.items()):
            break
    for name, (kind, value) in stated.items():
        off, again = closest[name]
        tolerance = capstone.RERUN_TOLERANCE[kind]
        _need_project(
            off <= tolerance,
            f"{side}: {name} is {value:.3f} in the table and {again:.3f} on the closest of "
            f"{capstone.RERUNS} reruns, {off:.0%} apart, beyond the clock's noise "
            f"({tolerance:.0%})",
        )
    return max(closest[n][0] for n, (k, _) in stated.items() if k == "speed")


def check_project(table: dict[str, Any], clock: Callable[[], float]) -> str:
    """Validate a capstone project's table (`capstone.project`): exactly one setting of
    `capstone.CHANGES` between the arms, each side's report arithmetic (`check_report`), and each
    side against reruns of its settings on `clock` (`capstone.measure_arm` at the table's γ, up
    to `capstone.RERUNS` times): counts and tokens exactly, c, r(γ), the speedup and tokens per
    second within the clock's noise. Returns what the change did beside how far the reruns
    moved; raises `ReportError`."""
    _need_project(
        isinstance(table, dict) and {"before", "after", "change"} <= set(table),
        "a table is capstone.project(before, after): a dict with 'before', 'after' and 'change'",
    )
    before, after = table["before"], table["after"]
    arms = {}
    for side in ("before", "after"):
        _need_project("arm" in table[side], f"{side} has no 'arm': measure it with measure_arm")
        arms[side] = capstone.Arm(**table[side]["arm"])
    changed = capstone.differences(arms["before"], arms["after"])
    _need_project(
        len(changed) == 1 and changed[0] in capstone.CHANGES,
        f"the arms differ in {changed or 'nothing'}: a project changes exactly one of "
        f"{capstone.CHANGES}",
    )
    key = changed[0]
    _need_project(
        table["change"] == {key: [before["arm"][key], after["arm"][key]]},
        f"the table's change {table['change']!r} is not what separates its arms ({key})",
    )
    for what in ("device", "rounds"):
        _need_project(before[what] == after[what], f"both arms on one {what}")
    _need_project(
        len(before["tokens"][0]) == len(after["tokens"][0]), "both arms decode as many tokens"
    )
    for side, rep in (("before", before), ("after", after)):
        try:
            check_report(rep)
        except ReportError as err:
            raise ReportError(f"Capstone project, {side}: {err}") from None
    worst = {}
    for side, rep in (("before", before), ("after", after)):
        rerun = functools.partial(
            capstone.measure_arm,
            *(arms[side], len(rep["tokens"][0]), rep["rounds"], clock),
            gamma=rep["gamma"],
        )
        worst[side] = _rerun_agreement(side, rep, rerun)
    effect = capstone.tokens_per_second(after) / capstone.tokens_per_second(before)
    noise = max(worst.values())
    inside = "inside" if abs(effect - 1) <= noise else "outside"
    return (
        f"{key}: {before['arm'][key]!r} -> {after['arm'][key]!r} moved speculative tokens/s by "
        f"{effect:.2f}x; the reruns moved the speedups and tokens/s by up to {noise:.0%} (before "
        f"{worst['before']:.0%}, after {worst['after']:.0%}): the change's effect is {inside} "
        f"that noise. Counts and tokens reproduced exactly."
    )
