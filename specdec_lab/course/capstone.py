"""Notebook 07: engine-style counters, the capstone's plan and report, and their checks.

Engines report speculative decoding in their own counters. `engine_counters` turns the course
loop's statistics into the counters two engines keep, so that a learner can read them with
numbers they produced themselves:

- **vLLM** (``vllm/v1/spec_decode/metrics.py``): per drafting step it adds one to
  ``num_drafts``, the drafted tokens to ``num_draft_tokens``, the accepted ones to
  ``num_accepted_tokens``, and one to ``num_accepted_tokens_per_pos[i]`` for every position i
  before the first rejection. It logs a *mean acceptance length* 1 + accepted / drafts, a
  *per-position acceptance rate* per_pos[i] / drafts, and a *draft acceptance rate*
  accepted / drafted tokens;
- **llama.cpp** (``examples/speculative-simple``): ``n_drafted`` sums the drafted tokens,
  ``n_accept`` the accepted ones, and ``accept`` is 100 · n_accept / n_drafted.

Neither engine's "acceptance rate" is the course's α̂ (drafts accepted over drafts the verifier
examined, `decoding.GenerationStats.acceptance_rate`): both divide by every drafted token,
including those after the first rejection, which nobody examined. Exercise 7.1 derives α̂ from
vLLM's counters.

The capstone (Exercise 7.2 and `check_report`): a pair of the learner's choosing, α̂ on their own
prompts with its standard error across prompts (`prompt_se`; the binomial SE assumes independent
drafts), c and the verification curve on their device, the best γ and its predicted speedup with
an interval, then the clock: the pooled measured speedup inside, above or below that interval
(`verdict`), and each prompt's measured speedup beside the one its own α̂ predicts. `report`
assembles the numbers; `check_report` validates the arithmetic a report claims, so a report
edited by hand (or copied from another machine) is checked too.

p is the target and q a draft (Leviathan et al. 2023, arXiv:2211.17192).
"""

from __future__ import annotations

import math
import re
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from specdec_lab import decoding, theory
from specdec_lab.course.checks import call_answer, refuse_delegation, require_prediction

Z_RANGE = 2.0  # the predicted range: α̂ ± 2 standard errors
TOL = 1e-9  # arithmetic agreement (relative), for numbers a report states


# --- engine counters ----------------------------------------------------------------------------


def full_steps(stats: decoding.GenerationStats, gamma: int) -> decoding.GenerationStats:
    """The steps of `stats` that drafted exactly `gamma` tokens (an engine with a fixed number of
    speculative tokens drafts that many; the course loop drafts fewer near the token budget)."""
    if not isinstance(gamma, int) or gamma < 1:
        raise ValueError(f"gamma must be a positive integer, got {gamma!r}")
    kept = [(n, g) for n, g in zip(stats.accepted, stats.gammas, strict=True) if g == gamma]
    if not kept:
        raise ValueError(f"no step of these statistics drafted γ = {gamma} tokens")
    return decoding.GenerationStats(accepted=[n for n, _ in kept], gammas=[g for _, g in kept])


def engine_counters(stats: decoding.GenerationStats, gamma: int) -> dict[str, dict[str, Any]]:
    """vLLM's and llama.cpp's counters for the steps of `stats` that drafted `gamma` tokens.

    Returns ``{"vllm": {num_drafts, num_draft_tokens, num_accepted_tokens,
    num_accepted_tokens_per_pos}, "llama.cpp": {n_draft, n_drafted, n_accept, n_predict}}``;
    n_predict counts every emitted token (accepted drafts plus one target token per step).
    """
    steps = full_steps(stats, gamma)
    per_pos = [sum(n > i for n in steps.accepted) for i in range(gamma)]  # (γ,)
    accepted = sum(steps.accepted)
    return {
        "vllm": {
            "num_drafts": len(steps.accepted),
            "num_draft_tokens": gamma * len(steps.accepted),
            "num_accepted_tokens": accepted,
            "num_accepted_tokens_per_pos": per_pos,
        },
        "llama.cpp": {
            "n_draft": gamma,
            "n_drafted": gamma * len(steps.accepted),
            "n_accept": accepted,
            "n_predict": accepted + len(steps.accepted),
        },
    }


def vllm_metrics(counters: dict[str, Any]) -> dict[str, Any]:
    """What vLLM's log line computes from its counters (``SpecDecodingLogging.log``)."""
    drafts, per_pos = counters["num_drafts"], counters["num_accepted_tokens_per_pos"]
    return {
        "mean_acceptance_length": 1 + counters["num_accepted_tokens"] / drafts,
        "per_position_acceptance_rate": [a / drafts for a in per_pos],
        "draft_acceptance_rate": counters["num_accepted_tokens"] / counters["num_draft_tokens"],
    }


def llama_cpp_accept(counters: dict[str, Any]) -> float:
    """llama.cpp's ``accept`` line, in percent: 100 · n_accept / n_drafted."""
    return 100.0 * counters["n_accept"] / counters["n_drafted"]


def parse_speculative_simple(log: str) -> dict[str, int]:
    """The counters ``llama-speculative-simple`` prints when it ends (``n_draft = 16`` ...):
    {n_draft, n_predict, n_drafted, n_accept}. Raises ValueError if one is missing."""
    found = {}
    for key in ("n_draft", "n_predict", "n_drafted", "n_accept"):
        match = re.search(rf"\b{key}\s*=\s*(\d+)", log)
        if match is None:
            raise ValueError(f"no '{key} = N' line in the llama-speculative-simple output")
        found[key] = int(match[1])
    return found


def run_speculative_simple(command: Sequence[str], attempts: int = 3) -> dict[str, float]:
    """Run a ``llama-speculative-simple`` command line; return its counters
    (`parse_speculative_simple`) and "tokens_per_s", its decoding speed.

    Its logger writes from a thread, and a run can exit before the closing lines are written
    (seen with llama.cpp as vendored in llama-cpp-python 0.3.36, about one run in four): such a
    run is repeated, up to `attempts` runs. A failing run raises with the end of its output."""
    for _ in range(attempts):
        done = subprocess.run(list(command), capture_output=True, text=True, timeout=900)
        log = done.stdout + done.stderr
        if done.returncode != 0:
            raise RuntimeError(
                f"llama-speculative-simple failed ({done.returncode}):\n{log[-2000:]}"
            )
        if "n_accept" in log:
            break
    speed = re.findall(r"decoded\s+\d+ tokens in .*speed:\s*([\d.]+) t/s", log)
    if not speed:
        raise ValueError("no 'decoded N tokens ... speed: X t/s' line in its output")
    return parse_speculative_simple(log) | {"tokens_per_s": float(speed[-1])}


def llama_cpp_tokens_per_call(counters: dict[str, int]) -> float:
    """Tokens per target call from llama.cpp's counters: every round emits its accepted drafts
    plus one target token, so there were n_predict − n_accept rounds (the run's last round can
    stop early at the token budget or an end of text, which this ignores)."""
    rounds = counters["n_predict"] - counters["n_accept"]
    if rounds <= 0:
        raise ValueError(f"n_predict must exceed n_accept, got {counters}")
    return counters["n_predict"] / rounds


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
    """vLLM counters of steps that each drafted `gamma` tokens and kept `accepted[i]`, and the
    course's α̂ of those steps."""
    stats = decoding.GenerationStats(accepted=list(accepted), gammas=[gamma] * len(accepted))
    return engine_counters(stats, gamma)["vllm"], stats.acceptance_rate


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
    drafts all differ from it), then on the learner's own counters (`counters`, whose α̂ is
    `reference_alpha`); the prediction; what speedup(α, γ, c, r) leaves out. Prints the
    predicted speedup from α̂ and from accept % next to the `measured_speedup`."""
    for label, accepted, gamma in _worked_7_1():
        vllm, want = _counters_of(accepted, gamma)
        got = call_answer(
            "7.1",
            alpha_from_counters,
            vllm["num_drafts"],
            list(vllm["num_accepted_tokens_per_pos"]),
        )
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
    mine = call_answer(
        "7.1",
        alpha_from_counters,
        counters["num_drafts"],
        list(counters["num_accepted_tokens_per_pos"]),
    )
    assert abs(mine - reference_alpha) < 1e-9, (
        f"Exercise 7.1: on your own counters α̂ is {reference_alpha:.6f}, got {mine:.6f}"
    )
    require_prediction("7.1", prediction, PREDICTION_7_1)
    if left_out is None:
        raise NotImplementedError("Exercise 7.1: name what the formula leaves out in left_out_7_1")
    assert isinstance(left_out, (set, frozenset, list, tuple)) and set(left_out) <= set(
        LEFT_OUT_OPTIONS
    ), f"Exercise 7.1: left_out_7_1 must be a set of keys of {sorted(LEFT_OUT_OPTIONS)}"
    chosen = set(left_out)
    inside = sorted(chosen - LEFT_OUT)
    assert not inside, (
        f"Exercise 7.1: {inside} are in the formula: E[tokens] = (1 − α^(γ+1)) / (1 − α) counts "
        "the target's own token, and the denominator γc + r holds the draft's and the "
        "verification's costs"
    )
    missing = sorted(LEFT_OUT - chosen)
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


# --- Exercise 7.2 and the capstone report -------------------------------------------------------


def best_plan(alpha: float, alpha_se: float, c: float, curve: Sequence[float]) -> dict[str, Any]:
    """The plan Exercise 7.2 asks for: the γ in 1..len(curve) − 1 with the highest
    speedup(α̂, γ, c, r(γ)), where r(γ) = curve[γ] = t(γ + 1 tokens) / t(1 token) (curve[0] = 1),
    its predicted speedup, and the speedups at α̂ ± 2 standard errors (clipped to [0, 1])."""
    if len(curve) < 2:
        raise ValueError("curve needs t(k)/t(1) for k = 1 and at least k = 2")
    gammas = range(1, len(curve))
    gamma = max(gammas, key=lambda g: theory.speedup(alpha, g, c, curve[g]))
    lo, hi = max(alpha - Z_RANGE * alpha_se, 0.0), min(alpha + Z_RANGE * alpha_se, 1.0)
    return {
        "gamma": gamma,
        "predicted": theory.speedup(alpha, gamma, c, curve[gamma]),
        "predicted_low": theory.speedup(lo, gamma, c, curve[gamma]),
        "predicted_high": theory.speedup(hi, gamma, c, curve[gamma]),
    }


def _worked_7_2() -> list[tuple[str, float, float, float, list[float]]]:
    rising = [1.0 + 0.09 * k**1.3 for k in range(12)]  # verification dearer with every token
    return [
        ("a verify curve that rises with k", 0.8, 0.02, 0.05, rising),
        ("a flat curve up to 8 tokens, then a step", 0.7, 0.03, 0.02, [1.0] * 8 + [1.6] * 8),
        ("a dear draft", 0.9, 0.01, 0.4, [1.0, 1.02, 1.05, 1.1, 1.2, 1.3]),
        ("a weak draft", 0.35, 0.05, 0.1, [1.0, 1.3, 1.45, 1.5, 1.55]),
    ]


def _this_module():
    import sys

    return sys.modules[__name__]


PLAN_KEYS = ("gamma", "predicted", "predicted_low", "predicted_high")


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= TOL * max(1.0, abs(b))


def exercise_7_2(
    plan_capstone: Callable[..., dict[str, Any]],
    alpha: float,
    alpha_se: float,
    c: float,
    curve: Sequence[float],
) -> dict[str, Any]:
    """Exercise 7.2 on worked cases (where ignoring r, an off-by-one r, maximising tokens per
    call and a one-sided range all go wrong), then on the capstone's own measurements."""
    guard = refuse_delegation(
        "7.2", plan_capstone, {"best_plan": (_this_module(), "best_plan")}, "the plan"
    )
    for label, a, se, cc, cv in [*_worked_7_2(), ("your measurements", alpha, alpha_se, c, curve)]:
        with guard:
            got = call_answer("7.2", plan_capstone, a, se, cc, list(cv))
        assert isinstance(got, dict) and set(PLAN_KEYS) <= set(got), (
            f"Exercise 7.2: return a dict with the keys {PLAN_KEYS}, got {got!r}"
        )
        want = best_plan(a, se, cc, cv)
        if got["gamma"] != want["gamma"]:
            shown = f"α = {a}, c = {cc}, r(γ) = {[round(x, 3) for x in cv[1:]]}"
            raise AssertionError(
                f"Exercise 7.2 ({label}): {shown}: the best γ is {want['gamma']}, got "
                f"{got['gamma']}: maximise E[tokens] / (γc + r(γ)) with r(γ) = t(γ + 1) / t(1)"
            )
        for key in PLAN_KEYS[1:]:
            assert isinstance(got[key], (int, float)) and _close(got[key], want[key]), (
                f"Exercise 7.2 ({label}): at γ = {want['gamma']} {key} is {want[key]:.4f}, got "
                f"{got[key]}: "
                + (
                    "speedup(α̂, γ, c, r(γ)) with r(γ) = curve[γ]"
                    if key == "predicted"
                    else "the range is the speedup at α̂ − 2 SE and α̂ + 2 SE, at the same γ"
                )
            )
    with guard:
        plan = plan_capstone(alpha, alpha_se, c, list(curve))
    print(
        f"your plan: γ = {plan['gamma']}, predicted {plan['predicted']:.2f}x "
        f"({plan['predicted_low']:.2f}–{plan['predicted_high']:.2f}x at α̂ ± 2 SE)"
    )
    print("Exercise 7.2: correct!")
    return {k: plan[k] for k in PLAN_KEYS}


def binomial_se(alpha: float, trials: int) -> float:
    """The standard error of α̂ = accepted / trials, were every examined draft an independent coin
    with one α. Drafts in one step or one prompt are correlated and α varies by prompt, so this
    understates the real uncertainty (`prompt_se` is the one the capstone's range uses)."""
    return math.sqrt(alpha * (1 - alpha) / trials)


def cluster_se(accepted: Sequence[int], examined: Sequence[int]) -> float:
    """The standard error of the pooled α̂ = Σ accepted / Σ examined with each prompt (entry) as
    one unit: the cluster standard error of a ratio, no independence assumed within a prompt.
    NaN with fewer than two prompts."""
    n, total = len(accepted), sum(examined)
    if n != len(examined):
        raise ValueError("accepted and examined: one count per prompt each")
    if n < 2 or total == 0:
        return math.nan
    alpha = sum(accepted) / total
    gaps = [a - alpha * e for a, e in zip(accepted, examined, strict=True)]  # one per prompt
    return math.sqrt(n / (n - 1) * sum(g * g for g in gaps)) / total


def prompt_se(per_prompt: Sequence[decoding.GenerationStats]) -> float:
    """`cluster_se` of the statistics of one generation per prompt (the SE across prompts)."""
    return cluster_se([sum(s.accepted) for s in per_prompt], [s.trials for s in per_prompt])


VERDICTS = ("below", "inside", "above")


def verdict(measured: float, low: float, high: float) -> str:
    """Where a measured speedup lies against the predicted interval [low, high]: "inside",
    "above" or "below" it."""
    if measured < low:
        return "below"
    return "above" if measured > high else "inside"


def report(
    pair: str,
    per_prompt: Sequence[decoding.GenerationStats],
    c: float,
    curve: Sequence[float],
    plan: dict[str, Any],
    plain_seconds: Sequence[float],
    spec_seconds: Sequence[float],
    rounds: int,
    device: str,
    temperature: float = 0.0,
) -> dict[str, Any]:
    """The capstone's report, from its measurements: α̂ pooled over the prompts (`per_prompt`:
    one generation's statistics per prompt) with its SE across prompts (and the binomial SE, for
    contrast), c, the verification curve, the plan (made with the SE across prompts), and the
    clock: seconds per prompt, each the fastest of `rounds`, plain and speculative at the plan's γ.

    Like for like: the pooled measured speedup (total plain over total speculative seconds) is
    placed against the predicted interval ("verdict"), and each prompt's measured speedup stands
    beside the speedup its own α̂ predicts at the same γ, c and r(γ)."""
    plain, spec = np.asarray(plain_seconds, float), np.asarray(spec_seconds, float)
    if plain.shape != spec.shape or plain.ndim != 1 or len(plain) < 2:
        raise ValueError("plain_seconds and spec_seconds: one time per prompt, at least two")
    if len(per_prompt) != len(plain):
        raise ValueError("per_prompt: one GenerationStats per prompt timed")
    accepted = [sum(s.accepted) for s in per_prompt]
    examined = [s.trials for s in per_prompt]
    pooled = decoding.GenerationStats.merge(list(per_prompt))
    a, trials = pooled.acceptance_rate, pooled.trials
    gamma, r = plan["gamma"], curve[plan["gamma"]]
    measured = float(plain.sum() / spec.sum())
    return {
        "pair": pair,
        "device": device,
        "temperature": float(temperature),
        "prompt_accepted": accepted,
        "prompt_examined": examined,
        "accepted": sum(accepted),
        "examined": trials,
        "alpha": a,
        "alpha_se": cluster_se(accepted, examined),
        "alpha_se_binomial": binomial_se(a, trials),
        "c": c,
        "verify_curve": [float(x) for x in curve],
        **{k: plan[k] for k in PLAN_KEYS},
        "rounds": rounds,
        "plain_seconds": plain.tolist(),
        "spec_seconds": spec.tolist(),
        "predicted_per_prompt": [
            theory.speedup(n / e, gamma, c, r) for n, e in zip(accepted, examined, strict=True)
        ],
        "measured_per_prompt": (plain / spec).tolist(),
        "measured_pooled": measured,
        "verdict": verdict(measured, plan["predicted_low"], plan["predicted_high"]),
    }


class ReportError(AssertionError):
    """A capstone report whose numbers do not follow from each other."""


def check_report(rep: dict[str, Any]) -> str:
    """Validate a capstone report's arithmetic; return its one-line summary.

    Checks that the per-prompt counts add up to the pooled ones; that α̂ follows from them and its
    SE is the one across prompts (`cluster_se`; the binomial SE, which treats every draft as an
    independent coin, is refused); that γ is the best one for the reported α̂, c and verification
    curve and the predicted speedup and its interval (α̂ ± 2 SE across prompts) follow from them;
    that each prompt's measured speedup is its plain over its speculative seconds and its
    predicted one is speedup(its own α̂, γ, c, r(γ)); that the pooled speedup is total plain over
    total speculative seconds; and that the verdict says where it lies against the predicted
    interval. Raises `ReportError` with a sentence naming what does not add up.
    """

    def need(ok: bool, why: str) -> None:
        if not ok:
            raise ReportError(f"Capstone report: {why}")

    accepted, examined = rep["prompt_accepted"], rep["prompt_examined"]
    n = len(examined)
    need(len(accepted) == n >= 2, "one count per prompt, at least two prompts")
    need(
        all(e > 0 and 0 <= a <= e for a, e in zip(accepted, examined, strict=True)),
        "per-prompt counts out of range",
    )
    need(
        rep["accepted"] == sum(accepted) and rep["examined"] == sum(examined),
        f"the pooled counts are the sums over the prompts ({sum(accepted)} of {sum(examined)})",
    )
    alpha = rep["accepted"] / rep["examined"]
    need(_close(rep["alpha"], alpha), f"α̂ = accepted / examined = {alpha:.4f}, not {rep['alpha']}")
    se, binomial = cluster_se(accepted, examined), binomial_se(alpha, rep["examined"])
    need(
        not (_close(rep["alpha_se"], binomial) and not _close(binomial, se)),
        f"alpha_se {rep['alpha_se']:.4g} is the binomial SE, which treats every draft as an "
        f"independent coin; the range uses the standard error across prompts, {se:.4g}",
    )
    need(
        _close(rep["alpha_se"], se),
        f"the standard error of α̂ across prompts is {se:.4g}, not {rep['alpha_se']}",
    )
    need(
        _close(rep["alpha_se_binomial"], binomial),
        f"the binomial standard error is {binomial:.4g}, not {rep['alpha_se_binomial']}",
    )
    curve, c = rep["verify_curve"], rep["c"]
    need(len(curve) >= 2 and _close(curve[0], 1.0), "verify_curve[0] is t(1)/t(1) = 1")
    want = best_plan(alpha, se, c, curve)
    gamma = want["gamma"]
    need(rep["gamma"] == gamma, f"the best γ for these α̂, c, r is {gamma}")
    narrow = best_plan(alpha, binomial, c, curve)
    for key in PLAN_KEYS[1:]:
        hint = ""
        if key != "predicted" and _close(rep[key], narrow[key]) and not _close(rep[key], want[key]):
            hint = ": that is the end of α̂ ± 2 binomial SE, not ± 2 SE across prompts"
        need(
            _close(rep[key], want[key]),
            f"{key} at γ = {gamma} is {want[key]:.4f}, not {rep[key]}{hint}",
        )
    plain, spec = rep["plain_seconds"], rep["spec_seconds"]
    need(
        len(plain) == len(spec) == len(rep["measured_per_prompt"]) == n,
        "one time per prompt, for the prompts counted",
    )
    r = curve[gamma]
    for i, (p, s, m) in enumerate(zip(plain, spec, rep["measured_per_prompt"], strict=True)):
        need(p > 0 and s > 0 and _close(m, p / s), f"prompt {i}: speedup {p / s:.4f}, not {m}")
    need(len(rep["predicted_per_prompt"]) == n, "one predicted speedup per prompt")
    for i, (a, e, got) in enumerate(
        zip(accepted, examined, rep["predicted_per_prompt"], strict=True)
    ):
        own = theory.speedup(a / e, gamma, c, r)
        need(
            _close(got, own),
            f"prompt {i}: its own α̂ = {a / e:.4f} predicts {own:.4f} at γ = {gamma}, not {got}",
        )
    pooled = sum(plain) / sum(spec)
    need(
        _close(rep["measured_pooled"], pooled),
        f"the pooled speedup is total plain / total speculative seconds, {pooled:.4f}",
    )
    where = verdict(pooled, want["predicted_low"], want["predicted_high"])
    need(
        rep["verdict"] == where,
        f"the pooled {pooled:.2f}x lies {where} the predicted interval "
        f"{want['predicted_low']:.2f}–{want['predicted_high']:.2f}x, not {rep['verdict']!r}",
    )
    return (
        f"{rep['pair']} on {rep['device']}, T = {rep['temperature']:g}: α̂ = {alpha:.3f} ± "
        f"{se:.3f} (SE across {n} prompts, used; binomial SE {binomial:.3f}, not used), "
        f"c = {c:.3f}, γ = {gamma} (r = {r:.2f}): predicted {rep['predicted']:.2f}x "
        f"({rep['predicted_low']:.2f}–{rep['predicted_high']:.2f} at α̂ ± 2 SE), measured "
        f"{pooled:.2f}x pooled over {n} prompts (each the fastest of {rep['rounds']} rounds): "
        f"{where} the predicted interval"
    )


def per_prompt_table(rep: dict[str, Any]) -> str:
    """Each prompt's α̂, the speedup its own α̂ predicts and the measured one, as a small table."""
    rows = [f"{'prompt':>6} {'examined':>8} {'α̂':>6} {'predicted':>9} {'measured':>8}"]
    for i, (a, e, p, m) in enumerate(
        zip(
            rep["prompt_accepted"],
            rep["prompt_examined"],
            rep["predicted_per_prompt"],
            rep["measured_per_prompt"],
            strict=True,
        )
    ):
        rows.append(f"{i:>6} {e:>8} {a / e:>6.3f} {p:>8.2f}x {m:>7.2f}x")
    rows.append(
        f"{'pooled':>6} {rep['examined']:>8} {rep['alpha']:>6.3f} {rep['predicted']:>8.2f}x "
        f"{rep['measured_pooled']:>7.2f}x"
    )
    return "\n".join(rows)
