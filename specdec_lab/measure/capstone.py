"""Notebook 07's engine arithmetic: engine-style counters, the capstone's plan and its report.

`engine_counters` turns the course loop's statistics into the counters two engines keep, vLLM's
(``vllm/v1/spec_decode/metrics.py``) and llama.cpp's (``examples/speculative-simple``), so that a
learner reads them with numbers they produced themselves (docs/formulas.md, "Engines'
counters"). Neither engine's "acceptance rate" is the course's α̂: both divide by every drafted
token, including those after the first rejection, which nobody examined.

The capstone: α̂ on the learner's prompts with its SE across prompts (`prompt_se`), the draft's
costs (c, and c of a round's first step) and the verification curve on their device
(`arm_costs`), the best γ and its predicted speedup with an interval
(`best_plan`), then the clock (`report`). The project around it (`Arm`, `measure_arm`,
`project`): one pair, one change, measured before and after. The checks of Exercises 7.1 and
7.2, and of a project's table, are in `specdec_lab.course.checks.nb07_engines_and_capstone`.

p is the target and q a draft (Leviathan et al. 2023, arXiv:2211.17192).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from specdec_lab import decoding, env, inputs, models, theory
from specdec_lab.engine import sessions
from specdec_lab.measure import plan as planner
from specdec_lab.measure import timing

Z_RANGE = 2.0  # the predicted range: α̂ ± 2 standard errors
PLAN_KEYS = ("gamma", "predicted", "predicted_low", "predicted_high")
DRAFTER = "draft model"  # the capstone's drafter: the pair's draft model (`Pair.speculative`)


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
    """{"vllm": `drafting_counters`, "llama.cpp": {n_draft, n_drafted, n_accept, n_predict}} for
    the steps of `stats` that drafted `gamma` tokens; n_predict counts every emitted token."""
    vllm = drafting_counters(full_steps(stats, gamma), gamma)  # every draft γ long
    drafts, accepted = vllm["num_drafts"], vllm["num_accepted_tokens"]
    return {
        "vllm": vllm,
        "llama.cpp": {
            "n_draft": gamma,
            "n_drafted": vllm["num_draft_tokens"],
            "n_accept": accepted,
            "n_predict": accepted + drafts,
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
    (`parse_speculative_simple`) and "tokens_per_s", its decoding speed. Its logger writes from a
    thread, and a run can exit before the closing lines are written (llama-cpp-python 0.3.36,
    about one run in four): such a run is repeated, up to `attempts` runs."""
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


# --- real engine logs ----------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineLog:
    """Lines an engine printed, copied verbatim from a public thread (`source`), with what the
    thread says about the run (`setting`)."""

    engine: str  # "vllm" or "llama-server"
    source: str  # the URL the lines are copied from
    setting: str  # the run, as its thread describes it
    text: str  # the lines, verbatim


ENGINE_LOGS = {
    "vllm-ngram": EngineLog(
        "vllm",
        "https://github.com/vllm-project/vllm/pull/24127",
        "vLLM serving facebook/opt-125m with n-gram lookup: speculative_config "
        '{"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_min": 5, '
        '"prompt_lookup_max": 10}; one request of up to 1000 tokens at temperature 0.7 '
        "(the pull request's test result)",
        "(APIServer pid=2236552) INFO 09-09 11:51:35 [metrics.py:96] SpecDecoding metrics: "
        "Draft acceptance rate: 88.8%, Mean acceptance length: 5.44, Accepted throughput: 4.37 "
        "tokens/s, Drafted throughput: 4.92 tokens/s, Accepted: 262 tokens, Drafted: 295 "
        "tokens, Per-position acceptance rate: 0.983, 0.949, 0.915, 0.881, 0.712",
    ),
    "llama-server-eagle3": EngineLog(
        "llama-server",
        "https://github.com/ggml-org/llama.cpp/pull/24536",
        "llama-server with an EAGLE-3 draft (draft-eagle3), one request of 256 tokens; the "
        "contributor's check of the pull request's new metrics (a comment of 2026-06-15)",
        "0.06.895.980 I slot print_timing: id  1 | task 0 | prompt eval time =     300.11 ms /"
        "    20 tokens (   15.01 ms per token,    66.64 tokens per second)\n"
        "0.06.895.998 I slot print_timing: id  1 | task 0 |        eval time =    2296.72 ms /"
        "   256 tokens (    8.97 ms per token,   111.46 tokens per second)\n"
        "0.06.895.999 I slot print_timing: id  1 | task 0 |       total time =    2596.83 ms /"
        "   276 tokens\n"
        "0.06.896.009 I slot print_timing: id  1 | task 0 |    graphs reused =         85\n"
        "0.06.896.015 I slot print_timing: id  1 | task 0 | draft acceptance = 0.64479 (  167 "
        "accepted /   259 generated), mean acceptance length =  2.92, acceptance rate per "
        "position = (0.805, 0.632, 0.483)\n"
        "0.06.896.057 I statistics     draft-eagle3: #calls(b,g,a) =    1     87     87, #gen "
        "drafts =     87, #acc drafts =    70, #gen tokens =    259, #acc tokens =   167, #mean "
        "acc len = 2.92, #acc rate/pos = (0.805, 0.632, 0.483), dur(b,g,a) = 0.005, 325.555, "
        "0.114 ms",
    ),
}


def _number(pattern: str, text: str, what: str) -> str:
    match = re.search(pattern, text)
    if match is None:
        raise ValueError(f"no {what} in the log")
    return match[1]


def _rates(pattern: str, text: str, what: str) -> list[float]:
    listed = _number(pattern, text, what)
    return [float(x) for x in re.split(r"[,\s]+", listed.strip()) if x]


def _counts_from_rates(rates: Sequence[float], drafts: int, digits: int = 3) -> list[int]:
    """The integer counts a_k behind per-position rates a_k / drafts printed to `digits`."""
    counts = [round(rate * drafts) for rate in rates]
    half = 0.5 * 10.0**-digits + 1e-12
    if any(abs(a / drafts - rate) > half for a, rate in zip(counts, rates, strict=True)):
        raise ValueError(f"no integer counts over {drafts} drafts print as the rates {rates}")
    return counts


def parse_vllm_log(text: str) -> dict[str, Any]:
    """vLLM's counters behind one ``SpecDecoding metrics:`` line (`vllm_metrics` in reverse).

    The line prints `num_drafts` only through the mean acceptance length (2 decimals) and the
    per-position counts as rates (3 decimals): they are recovered as the one number of drafts
    (and its integer counts) that prints as the line does; a ValueError when there are several."""
    accepted = int(_number(r"Accepted: (\d+) tokens", text, "'Accepted: N tokens'"))
    drafted = int(_number(r"Drafted: (\d+) tokens", text, "'Drafted: N tokens'"))
    length = float(_number(r"Mean acceptance length: ([\d.]+)", text, "mean acceptance length"))
    rates = _rates(r"Per-position acceptance rate: ([\d., ]+\d)", text, "per-position rates")
    fits = []
    for drafts in range(1, drafted + 1):  # every draft holds at least one token
        if abs(1 + accepted / drafts - length) > 0.005 + 1e-12:
            continue
        try:
            counts = _counts_from_rates(rates, drafts)
        except ValueError:
            continue
        if sum(counts) == accepted:
            fits.append((drafts, counts))
    if len(fits) != 1:
        raise ValueError(
            f"{len(fits)} numbers of drafts print as this line: read the exact counters on /metrics"
        )
    drafts, counts = fits[0]
    printed = re.search(r"Draft acceptance rate: ([\d.]+)%", text)
    if printed and abs(100 * accepted / drafted - float(printed[1])) > 0.05 + 1e-9:
        raise ValueError("the draft acceptance rate disagrees with 'Accepted' over 'Drafted'")
    return {
        "engine": "vllm",
        "gamma": len(rates),
        "num_drafts": drafts,
        "num_draft_tokens": drafted,
        "num_accepted_tokens": accepted,
        "num_accepted_tokens_per_pos": counts,
        "mean_acceptance_length": length,
        "new_tokens": None,  # the line does not count the tokens generated
        "ms_per_token": None,
    }


def parse_llama_server_log(text: str) -> dict[str, Any]:
    """llama-server's counters from its end-of-request lines: the ``statistics`` line of a drafter
    (``#gen drafts``, ``#acc drafts``, ``#gen tokens``, ``#acc tokens``, ``#acc rate/pos``) and the
    ``eval time`` line (the tokens generated and the time per token), as vLLM names them."""
    drafts = int(_number(r"#gen drafts =\s*(\d+)", text, "'#gen drafts ='"))
    first = int(_number(r"#acc drafts =\s*(\d+)", text, "'#acc drafts ='"))
    drafted = int(_number(r"#gen tokens =\s*(\d+)", text, "'#gen tokens ='"))
    accepted = int(_number(r"#acc tokens =\s*(\d+)", text, "'#acc tokens ='"))
    length = float(_number(r"#mean acc len =\s*([\d.]+)", text, "'#mean acc len ='"))
    rates = _rates(r"#acc rate/pos = \(([^)]*)\)", text, "'#acc rate/pos'")
    counts = _counts_from_rates(rates, drafts)
    if counts[0] != first or sum(counts) != accepted:
        raise ValueError("the per-position rates disagree with '#acc drafts' or '#acc tokens'")
    match = re.search(r"\|\s+eval time =\s*[\d.]+ ms /\s*(\d+) tokens \(\s*([\d.]+) ms per", text)
    return {
        "engine": "llama-server",
        "gamma": len(counts),
        "num_drafts": drafts,
        "num_draft_tokens": drafted,
        "num_accepted_tokens": accepted,
        "num_accepted_tokens_per_pos": counts,
        "mean_acceptance_length": length,
        "new_tokens": int(match[1]) if match else None,
        "ms_per_token": float(match[2]) if match else None,
    }


def parse_engine_log(log: EngineLog) -> dict[str, Any]:
    """The counters behind a quoted engine log (`parse_vllm_log`, `parse_llama_server_log`)."""
    parsers = {"vllm": parse_vllm_log, "llama-server": parse_llama_server_log}
    if log.engine not in parsers:
        raise ValueError(f"no parser for {log.engine!r}: one of {sorted(parsers)}")
    return parsers[log.engine](log.text)


def alpha_range(
    num_drafts: int, num_draft_tokens: int, accepted_per_pos: Sequence[int]
) -> tuple[float, float]:
    """The course's α̂ allowed by an engine's counters: (low, high), equal when every draft had
    γ = len(accepted_per_pos) tokens (Exercise 7.3). Exercise 7.1's count of the examined drafts
    over-counts a short draft accepted to its end, at most S = min(γN − D, a_0 − a_{γ−1}) of them
    (docs/formulas.md): low assumes none, high all S (and stays at most 1)."""
    gamma, accepted = len(accepted_per_pos), sum(accepted_per_pos)
    if num_drafts < 1 or not 0 < num_draft_tokens <= gamma * num_drafts:
        raise ValueError(
            f"{num_drafts} drafts of at most γ = {gamma} tokens cannot hold "
            f"{num_draft_tokens} drafted tokens"
        )
    examined = num_drafts + sum(accepted_per_pos[:-1])  # every draft γ long (Exercise 7.1)
    short = min(gamma * num_drafts - num_draft_tokens, accepted_per_pos[0] - accepted_per_pos[-1])
    return accepted / examined, accepted / (examined - short)


def log_tokens_per_call(counters: dict[str, Any]) -> float | None:
    """Tokens per target call of a run whose log counts its tokens (`llama_cpp_tokens_per_call`
    with new_tokens and the accepted drafts); None when it does not (a vLLM metrics line)."""
    new = counters.get("new_tokens")
    if new is None:
        return None
    return llama_cpp_tokens_per_call(
        {"n_predict": new, "n_accept": counters["num_accepted_tokens"]}
    )


def drafting_counters(stats: decoding.GenerationStats, gamma: int) -> dict[str, Any]:
    """vLLM's counters of the course loop's steps as vLLM counts them: every step that drafted at
    least one token is a draft, however short (a prompt lookup that found a shorter continuation,
    or the last steps of the token budget), and a step that drafted nothing is not counted."""
    steps = [(n, g) for n, g in zip(stats.accepted, stats.gammas, strict=True) if g > 0]
    if not steps or max(g for _, g in steps) > gamma:
        raise ValueError(f"need steps that drafted between 1 and γ = {gamma} tokens")
    return {
        "num_drafts": len(steps),
        "num_draft_tokens": sum(g for _, g in steps),
        "num_accepted_tokens": sum(n for n, _ in steps),
        "num_accepted_tokens_per_pos": [sum(n > k for n, _ in steps) for k in range(gamma)],
    }


# --- the capstone: the plan and the report -----------------------------------------------------


def arm_costs(
    pair,
    ids: torch.Tensor,
    clock: Callable[[], float] = time.perf_counter,
    repeats: int = 11,
    max_tokens: int = 9,
    runtime: str = sessions.DEFAULT_RUNTIME,
) -> tuple[list[float], float, float, dict[str, float]]:
    """(curve, c, first, call) of the pair's draft model after the prompt `ids`, from the
    course's one cost instrument, as the plan measures them (`plan.measure_costs`:
    `timing.loop_costs`, in the order the decoding loop runs its forwards): the verification
    curve t(k) / t(1) for k = 1..max_tokens, c = one drafting step over t(1), and `first`, a
    round's first drafting step over t(1) (right after the target's verify, which can push the
    draft out of the cache). A drafting step is the drafter's own `propose`, as the loop calls
    it, both models run by `runtime`. `call`: a generation call's start, over t(1), the
    target's forward over the prompt ("prefill") and the draft's ("start"), and t(1) itself
    ("t1_ms")."""
    candidate = {DRAFTER: functools.partial(pair.speculative, DRAFTER, runtime)}
    costs = planner.measure_costs(
        *(pair.target, candidate, ids, max_tokens, repeats, pair.vocab_size),
        clock=clock,
        runtime=runtime,
    )
    call = {"prefill": costs.prefill, "start": costs.start[DRAFTER], "t1_ms": costs.t1_ms}
    return list(costs.verify_cost), costs.c[DRAFTER], costs.first[DRAFTER], call


def best_plan(
    alpha: float,
    alpha_se: float,
    c: float,
    curve: Sequence[float],
    first: float | None = None,
    gamma: int | None = None,
) -> dict[str, Any]:
    """The plan Exercise 7.2 asks for: the γ in 1..len(curve) − 1 with the highest
    speedup(α̂, γ, c, r(γ), first), where r(γ) = curve[γ] = t(γ + 1 tokens) / t(1 token)
    (curve[0] = 1) and a round costs first + (γ − 1)c + r(γ) (`first` None: c, the paper's γc),
    its predicted speedup, and the speedups at α̂ ± 2 standard errors (clipped to [0, 1]).
    A given `gamma` (an engine's fixed setting) is predicted as it is instead of chosen."""
    if len(curve) < 2:
        raise ValueError("curve needs t(k)/t(1) for k = 1 and at least k = 2")

    def predicted(a: float, g: int) -> float:
        return theory.speedup(a, g, c, curve[g], first)

    if gamma is None:
        gamma = max(range(1, len(curve)), key=lambda g: predicted(alpha, g))
    elif not 1 <= gamma < len(curve):
        raise ValueError(f"gamma must lie in 1..{len(curve) - 1}, the curve's range; got {gamma}")
    lo, hi = max(alpha - Z_RANGE * alpha_se, 0.0), min(alpha + Z_RANGE * alpha_se, 1.0)
    return {
        "gamma": gamma,
        "predicted": predicted(alpha, gamma),
        "predicted_low": predicted(lo, gamma),
        "predicted_high": predicted(hi, gamma),
    }


def binomial_se(alpha: float, trials: int) -> float:
    """The standard error of α̂ = accepted / trials, were every examined draft an independent coin
    with one α: it understates the real uncertainty (the capstone's range uses `prompt_se`)."""
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
    first: float | None = None,
    call: dict[str, float] | None = None,
) -> dict[str, Any]:
    """The capstone's report: α̂ pooled over `per_prompt` (one generation's statistics per prompt)
    with its SE across prompts (and the binomial SE), c, a round's first step `first` (None: c),
    the curve, the plan, and the clock (each
    prompt's fastest of `rounds`, plain and speculative at the plan's γ): the pooled speedup's
    `verdict`, and each prompt's measured speedup beside the one its own α̂ predicts.

    `call` (`CALL_KEYS`: the prompt's forward, the draft's start, the loops' own work, over
    t(1), and the call's new tokens) adds "predicted_call": the plan's speedup over a whole call
    as the clock times one (`theory.run_speedup`), beside the plan's per round."""
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
        "first": first,
        "verify_curve": [float(x) for x in curve],
        **{k: plan[k] for k in PLAN_KEYS},
        "rounds": rounds,
        "plain_seconds": plain.tolist(),
        "spec_seconds": spec.tolist(),
        "predicted_per_prompt": [
            theory.speedup(n / e, gamma, c, r, first)
            for n, e in zip(accepted, examined, strict=True)
        ],
        "measured_per_prompt": (plain / spec).tolist(),
        "measured_pooled": measured,
        "verdict": verdict(measured, plan["predicted_low"], plan["predicted_high"]),
        **(
            {}
            if call is None
            else {"call": call, "predicted_call": call_speedup(a, gamma, c, curve, first, call)}
        ),
    }


CALL_KEYS = ("prefill", "start", "loop", "plain_loop", "new_tokens")


def call_speedup(
    alpha: float,
    gamma: int,
    c: float,
    curve: Sequence[float],
    first: float | None,
    call: dict[str, float],
) -> float:
    """The expected speedup of one whole generation call at α̂ and γ (`theory.run_speedup`):
    the round's costs, plus what a call pays around its rounds (`call`, `CALL_KEYS`)."""
    return theory.run_speedup(
        *(theory.expected_tokens(alpha, gamma), gamma, c, curve[gamma], int(call["new_tokens"])),
        *(call["prefill"], call["start"], first, call["loop"], call["plain_loop"]),
    )


def per_prompt_table(rep: dict[str, Any]) -> str:
    """Each prompt's α̂, the speedup its own α̂ predicts and the measured one, as a small table."""
    rows = [f"{'prompt':>6} {'examined':>8} {'α̂':>6} {'predicted':>9} {'measured':>8}"]
    keys = ("prompt_accepted", "prompt_examined", "predicted_per_prompt", "measured_per_prompt")
    for i, (a, e, p, m) in enumerate(zip(*(rep[k] for k in keys), strict=True)):
        rows.append(f"{i:>6} {e:>8} {a / e:>6.3f} {p:>8.2f}x {m:>7.2f}x")
    rows.append(
        f"{'pooled':>6} {rep['examined']:>8} {rep['alpha']:>6.3f} {rep['predicted']:>8.2f}x "
        f"{rep['measured_pooled']:>7.2f}x"
    )
    return "\n".join(rows)


# --- the capstone project: one pair, one change, before and after ------------------------------

CHANGES = ("gamma", "dtype", "runtime", "draft", "prompts")  # what a project changes: one of them
PROBE_GAMMA = 4  # drafts per step of the α̂ probe of an arm whose γ is planned
# How far a rerun's clock may move each number on a busy machine, as the factor between the two
# values less one: the speedup and tokens per second, each from whole decodes, by 30 %; c and r(γ)
# by up to 2.5x. A draft small enough to live in the L3 cache slows when a neighbour streams
# memory through it: on a 2-core AMD EPYC, embedded target with draft-large, c was 0.14–0.24 on
# an idle machine and 0.26–0.32 beside a copy loop on the other core (t(1) 6.2 -> 9.4 ms); one CI
# run's table said 0.295 and its rerun 0.134, 2.2x apart, while other tests ran beside it.
RERUN_TOLERANCE = {"speed": 0.3, "cost": 1.5}
RERUNS = 3  # the most reruns `checks.check_project` makes of an arm before it calls a number off


def disagreement(a: float, b: float) -> float:
    """How far apart two positive measurements are: the factor between them less one (symmetric:
    0.1 for 1.0 against 1.1 or 1.1 against 1.0; 1.5 for c = 0.1 against 0.25)."""
    return max(a / b, b / a) - 1


@dataclass(frozen=True)
class Arm:
    """One side of the capstone project: which models, how they run, and on what text.

    pair: a registry name (`models.PAIRS`); target, draft: a checkpoint (a directory, a hub id or
    the name of one in data/models/) replacing that side of the pair, so `Arm(prompts,
    draft="draft-large")` is the embedded target with a draft the course never handed you.
    dtype: a `models.DTYPES` name, or None for the pair's default. gamma: "planned" (the γ that
    `best_plan` picks from the arm's own α̂, costs and curve) or a fixed γ, as an engine is set.
    Greedy at temperature 0; sampled otherwise, prompt i from a generator seeded i."""

    prompts: tuple[str, ...]
    pair: str = "embedded"
    target: str | None = None
    draft: str | None = None
    dtype: str | None = None
    runtime: str = "lean"
    gamma: int | str = "planned"
    temperature: float = 0.0

    def __post_init__(self) -> None:
        prompts = (self.prompts,) if isinstance(self.prompts, str) else tuple(self.prompts)
        if len(prompts) < 2 or not all(isinstance(p, str) and p.strip() for p in prompts):
            raise ValueError("prompts: at least two non-empty texts (the SE is across prompts)")
        object.__setattr__(self, "prompts", prompts)
        if self.gamma != "planned" and not (inputs.is_count(self.gamma) and self.gamma <= 8):
            raise ValueError(f'gamma: "planned" or a whole number from 1 to 8, got {self.gamma!r}')
        if self.dtype is not None and self.dtype not in models.DTYPES:
            raise ValueError(f"dtype: one of {sorted(models.DTYPES)} or None, got {self.dtype!r}")
        if self.runtime not in sessions.RUNTIMES:
            raise ValueError(f"runtime: one of {sessions.RUNTIMES}, got {self.runtime!r}")
        if not (isinstance(self.temperature, (int, float)) and 0 <= self.temperature < math.inf):
            raise ValueError(f"temperature: 0 (greedy) or more, got {self.temperature!r}")

    def changed(self, change: dict[str, Any]) -> Arm:
        """This arm with the one change `change` = {setting: new value}, a setting of `CHANGES`."""
        if not isinstance(change, dict) or len(change) != 1:
            raise ValueError(
                f"a project changes one setting: give {{setting: value}}, not {change!r}"
            )
        ((key, value),) = change.items()
        if key not in CHANGES:
            raise ValueError(f"change one of {CHANGES}, not {key!r}: the rest stays as it was")
        after = dataclasses.replace(self, **change)
        if getattr(after, key) == getattr(self, key):
            raise ValueError(f"{key} is already {value!r}: a change must change it")
        return after


def differences(before: Arm, after: Arm) -> list[str]:
    """The settings in which two arms differ."""
    return [
        f.name for f in dataclasses.fields(Arm) if getattr(before, f.name) != getattr(after, f.name)
    ]


def measure_arm(
    arm: Arm,
    n_new: int,
    rounds: int,
    clock: Callable[[], float] = time.process_time,
    gamma: int | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Measure one arm as the capstone does, and `report` it: α̂ from one speculative run per
    prompt (at the arm's fixed γ, else at `PROBE_GAMMA`); c, a round's first step and the curve
    from the course's one cost instrument (`arm_costs`, after the first prompt); the plan
    (`best_plan`: the best γ, or the fixed one); then
    the clock at the plan's γ, each prompt the fastest of `rounds`. The report gains the arm's
    settings ("arm") and each prompt's probe tokens ("tokens"): what a rerun must reproduce
    exactly; and what each prompt's timed run at that γ examined, accepted and cost in target
    calls ("timed_counts": a planned arm's α̂ comes from its probe at PROBE_GAMMA). `gamma`
    times that γ instead of planning one (a rerun of a reported plan)."""
    pair = models.load_pair(arm.pair, dtype=arm.dtype, target=arm.target, draft=arm.draft)
    ids = [pair.encode(text) for text in arm.prompts]
    fixed = arm.gamma if isinstance(arm.gamma, int) else None
    probes = [
        decoding.speculative_generate(
            *(pair.target, pair.draft, x, n_new, fixed or PROBE_GAMMA),
            temperature=arm.temperature,
            generator=torch.Generator().manual_seed(i),  # prompt i: seed i
            vocab_size=pair.vocab_size,
            runtime=arm.runtime,
        )
        for i, x in enumerate(ids)
    ]
    per_prompt = [run.stats for run in probes]
    curve, c, first, opening = arm_costs(pair, ids[0], clock, runtime=arm.runtime)
    alpha = decoding.GenerationStats.merge(per_prompt).acceptance_rate
    plan = best_plan(alpha, prompt_se(per_prompt), c, curve, first, gamma or fixed)
    runs, secs = timing.timed_runs(
        *(pair, {"draft": pair.draft}, {"arm": ids}, {"arm": [None, "draft"]}),
        n_new=n_new,
        gamma=plan["gamma"],
        rounds=rounds,
        clock=clock,
        temperature=arm.temperature,
        progress=progress,
        runtime=arm.runtime,
    )
    info = env.device_info(pair.device)
    device = str(info.get("gpu") or f"{info['device']} ({info['cpu']})")
    plain_runs = decoding.GenerationStats.merge([run.stats for run in runs["arm", None]])
    call = {  # the loops' own work: the probes' per round, the timed plain runs' per token
        "prefill": opening["prefill"],
        "start": opening["start"],
        "loop": planner.loop_share(decoding.GenerationStats.merge(per_prompt), opening["t1_ms"]),
        "plain_loop": planner.loop_share(plain_runs, opening["t1_ms"]),
        "new_tokens": n_new,
    }
    rep = report(
        *(pair.name, per_prompt, c, curve, plan, secs["arm", None], secs["arm", "draft"]),
        *(rounds, device, arm.temperature, first, call),
    )
    timed = [run.stats for run in runs["arm", "draft"]]  # the first round's, one per prompt
    counts = {
        "examined": [s.trials for s in timed],
        "accepted": [sum(s.accepted) for s in timed],
        "target_calls": [s.target_calls for s in timed],
    }
    tokens = [r.tokens.tolist() for r in probes]
    return {**rep, "arm": dataclasses.asdict(arm), "tokens": tokens, "timed_counts": counts}


def project(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The project's table: two arms' reports (`measure_arm`) and the one setting between them."""
    changed = differences(Arm(**before["arm"]), Arm(**after["arm"]))
    return {
        "change": {k: [before["arm"][k], after["arm"][k]] for k in changed},
        "before": before,
        "after": after,
    }


def tokens_per_second(rep: dict[str, Any], plain: bool = False) -> float:
    """Speculative (or plain) decoding's new tokens per second over the report's prompts."""
    return (
        len(rep["tokens"][0])
        * len(rep["tokens"])
        / sum(rep["plain_seconds" if plain else "spec_seconds"])
    )


def _first(rep: dict[str, Any]) -> str:
    return "as c" if rep.get("first") is None else f"{rep['first']:.3f}"


def project_table(table: dict[str, Any]) -> str:
    """A project's before/after table, one row per number, with after/before where it is one."""
    b, a = table["before"], table["after"]

    def interval(rep: dict[str, Any]) -> str:
        return f"{rep['predicted']:.2f}x ({rep['predicted_low']:.2f}–{rep['predicted_high']:.2f})"

    rows = [
        *(
            (f"{key} (the change)", repr(old), repr(new))
            for key, (old, new) in table["change"].items()
        ),
        (
            "α̂ ± SE across prompts",
            f"{b['alpha']:.3f} ± {b['alpha_se']:.3f}",
            f"{a['alpha']:.3f} ± {a['alpha_se']:.3f}",
        ),
        ("c", f"{b['c']:.3f}", f"{a['c']:.3f}"),
        ("c of a round's first step", _first(b), _first(a)),
        ("γ", f"{b['gamma']}", f"{a['gamma']}"),
        (
            "r(γ) = t(γ + 1) / t(1)",
            f"{b['verify_curve'][b['gamma']]:.2f}",
            f"{a['verify_curve'][a['gamma']]:.2f}",
        ),
        ("predicted (α̂ ± 2 SE)", interval(b), interval(a)),
        *(
            [("predicted, a whole call", *(f"{x['predicted_call']:.2f}x" for x in (b, a)))]
            if "predicted_call" in b and "predicted_call" in a
            else []
        ),
        ("measured, pooled", f"{b['measured_pooled']:.2f}x", f"{a['measured_pooled']:.2f}x"),
        ("verdict", b["verdict"], a["verdict"]),
        (
            "plain tokens/s",
            f"{tokens_per_second(b, True):.1f}",
            f"{tokens_per_second(a, True):.1f}",
        ),
        ("speculative tokens/s", f"{tokens_per_second(b):.1f}", f"{tokens_per_second(a):.1f}"),
    ]
    ratio = tokens_per_second(a) / tokens_per_second(b)
    rows.append(("after / before, speculative tokens/s", "", f"{ratio:.2f}x"))
    width = max(len(r[0]) for r in rows)
    lines = [f"{'':<{width}}  {'before':>22}  {'after':>22}"]
    lines += [f"{name:<{width}}  {x:>22}  {y:>22}" for name, x, y in rows]
    return "\n".join(lines)
