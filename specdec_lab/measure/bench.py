"""`python -m specdec_lab bench`: speculative vs autoregressive vs HF assisted generation.

Every method runs side by side on the same pair and prompts, each quoted as the fastest of its
repeats (`measure.timing`): our autoregressive and speculative decoding at every γ, greedy and
sampled (T = 0.7 and 1.0, seeded per prompt), on each runtime (`engine.sessions`); transformers'
generate and assisted generation; the other drafting methods. Next to each measured speedup
stands Leviathan's prediction (1 − α^(γ+1)) / ((1 − α)(γc + 1)) from the same run's α and c,
with the per-prompt spread and the repeated-4-gram fraction of the outputs (loops draft easily).

Stages: `plan` lists the methods (`bench_plan`), `run_methods` times them, `derive` turns the
timed runs into `Row`s, and `bench_report` prints them; `run_bench` chains the first three.
Greedy speculative output equals autoregressive output up to numerics: asserted in float32,
counted in reduced precision. The JSON record goes to data/results/.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import math
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers.utils import logging as transformers_logging

from specdec_lab import decoding, inputs, theory, tree
from specdec_lab.engine import sessions
from specdec_lab.measure import timing
from specdec_lab.measure.bench_plan import (
    QUICK,
    BenchConfig,
    Kind,
    Method,
    bench_runtimes,
    display_name,
    plan,
)
from specdec_lab.measure.bench_report import (
    README_END,
    README_START,
    Row,
    format_table,
    markdown_table,
    reduced_precision_note,
    summarize,
)
from specdec_lab.models import Pair

MAX_TREE_NODES = 15  # the tree row's shape is chosen up to this size from the verify curve


def repeated_ngram_fraction(tokens: Sequence[int], n: int = 4) -> float:
    """The fraction of the n-grams of `tokens` that repeat an n-gram starting earlier: 0 for text
    with no repeat, close to 1 for a short cycle repeated many times; NaN with no n-gram."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    if not grams:
        return float("nan")
    return (len(grams) - len(set(grams))) / len(grams)


# ------------------------------------------------------------------------------------------- run
# A run decodes one prompt: run(ids (L,), prompt index) -> (new tokens, output).
Run = Callable[[torch.Tensor, int], tuple[int, Any]]


def _run_ours(
    pair: Pair, method: Method, cfg: BenchConfig, ids: torch.Tensor, i: int
) -> tuple[int, decoding.Generation]:
    """Our decoding of prompt i, sampling from a generator seeded seed + i; a chain or a tree
    drafts with a fresh (target, drafter)."""
    gen = torch.Generator().manual_seed(cfg.seed + i)
    kw = dict(temperature=method.temperature, generator=gen, vocab_size=pair.vocab_size)
    if method.make is None:  # autoregressive (a plan of plain decoding too)
        out = decoding.autoregressive_generate(
            pair.target, ids, cfg.max_new_tokens, runtime=method.runtime, **kw
        )
    else:
        session, drafter = method.make(pair, method.runtime)
        if method.branching is not None:
            generate, shape = tree.tree_speculative_generate, method.branching
        else:
            generate, shape = decoding.speculative_generate, method.gamma
        out = generate(session, drafter, ids, cfg.max_new_tokens, shape, **kw)
    return out.stats.new_tokens, out


def _run_transformers(
    pair: Pair, config: Any, assisted: Mapping[str, Any], ids: torch.Tensor, i: int
) -> tuple[int, torch.Tensor]:
    """transformers' generate on prompt i with generation `config`; returns the new tokens."""
    batch = ids[None].to(pair.device)  # (1, L)
    with _quiet_transformers():
        out = pair.target.generate(
            batch, attention_mask=torch.ones_like(batch), generation_config=config, **assisted
        )
    new = out[0, batch.shape[1] :].cpu()
    return new.shape[0], new


def _runner(method: Method, pair: Pair, cfg: BenchConfig) -> Run:
    """What timing calls for `method`. transformers' settings go into a generation config, as
    transformers 5 expects; it decodes our vocabulary: padded logits rows are suppressed."""
    if method.kind is Kind.TRANSFORMERS:
        padded = list(range(pair.vocab_size, sessions.vocab_size_of(pair.target)))
        config = generation_config(
            pair.target,
            suppress_tokens=padded or None,
            max_new_tokens=cfg.max_new_tokens,
            min_new_tokens=cfg.max_new_tokens,
            do_sample=False,
            **method.hf_settings,
        )
        return functools.partial(_run_transformers, pair, config, method.hf_assisted)
    return functools.partial(_run_ours, pair, method, cfg)


@dataclass
class Timed:
    """One method's timed runs."""

    rates: list[float]  # tokens/s of each repeat, over all prompts
    prompt_rates: list[float]  # tokens/s of each prompt, its fastest repeat
    outputs: list[Any]  # run outputs, repeat by repeat, prompt by prompt

    @property
    def tokens_per_s(self) -> float:
        """The fastest repeat's rate: a repeat can only be slowed down by other load."""
        return max(self.rates)

    @functools.cached_property
    def stats(self) -> decoding.GenerationStats | None:
        """Our methods' counters pooled over every run; None for transformers' outputs."""
        if not isinstance(self.outputs[0], decoding.Generation):
            return None
        return decoding.GenerationStats.merge([o.stats for o in self.outputs])


def time_method(
    run: Run,
    prompts: Sequence[torch.Tensor],
    repeats: int,
    device: torch.device | str,
    clock: Callable[[], float] = time.perf_counter,
) -> Timed:
    """Time `run(ids, prompt_index)` on every prompt, `repeats` times, after one untimed
    warm-up (allocator, kernels, lazy imports), each run inside `timing.timer`."""
    run(prompts[0], 0)
    rates, outputs = [], []
    per_prompt: list[list[float]] = [[] for _ in prompts]  # tokens/s, prompt by repeat
    for _ in range(repeats):
        n_tokens, seconds = 0, 0.0
        for i, ids in enumerate(prompts):
            with timing.timer(device, clock) as sw:
                n, out = run(ids, i)
            seconds += sw.seconds
            n_tokens += n
            per_prompt[i].append(n / sw.seconds)
            outputs.append(out)
        rates.append(n_tokens / seconds)
    return Timed(rates, [max(r) for r in per_prompt], outputs)


def run_methods(
    methods: Sequence[Method],
    pair: Pair,
    prompts: Sequence[torch.Tensor],
    cfg: BenchConfig,
    progress: bool = True,
) -> list[tuple[Method, Timed]]:
    """Time every method in order; a tree gets its shape from the chains timed before it.
    transformers' methods that fail, or cannot run, are reported and left out; ours raise."""
    done: list[tuple[Method, Timed]] = []
    curve: list[float] = []  # the target's verify cost by tokens per forward, measured once
    for method in tqdm(methods, desc="bench", disable=not progress):
        if method.skip:
            print(f"skipped {method.name}: {method.skip}")
            continue
        if method.kind is Kind.TREE and method.branching is None:
            curve = curve or timing.verify_curve(pair.target, method.runtime, MAX_TREE_NODES + 1)
            method = _with_tree_shape(method, done, curve)
        run = _runner(method, pair, cfg)
        try:
            timed = time_method(run, prompts, cfg.repeats, pair.device)
        except (ValueError, RuntimeError, TypeError) as err:  # transformers' own methods only
            if method.ours:
                raise
            print(f"skipped {method.name}: {type(err).__name__}: {str(err).splitlines()[0]}")
            continue
        done.append((method, timed))
    return done


def _with_tree_shape(
    method: Method, done: Sequence[tuple[Method, Timed]], curve: Sequence[float]
) -> Method:
    """The tree `method` with the shape `tree.choose_branching` picks from the α and c of the
    fastest chain timed at its temperature on its runtime, and the device's verify curve."""
    here = [(m, t) for m, t in done if m.temperature == method.temperature]
    here = [(m, t) for m, t in here if m.runtime == method.runtime]
    chains = [t for m, t in here if m.kind is Kind.SPECULATIVE]
    chain = max(chains, key=lambda t: t.tokens_per_s).stats
    own = next(t for m, t in here if m.kind is Kind.AUTOREGRESSIVE).stats
    shape = tree.choose_branching(min(chain.acceptance_rate, 1 - 1e-9), _loop_c(chain, own), curve)
    name = display_name(f"tree {'-'.join(map(str, shape))}", method.temperature, method.runtime)
    return dataclasses.replace(method, name=name, branching=shape)


# ---------------------------------------------------------------------------------------- derive
def _loop_c(pooled: decoding.GenerationStats, own: decoding.GenerationStats) -> float:
    """c inside the loop: seconds per draft forward of `pooled` over seconds per target forward
    of `own`, the autoregressive decoding on the same runtime at the same temperature."""
    return (pooled.draft_time / pooled.draft_calls) / (own.target_time / own.target_calls)


def _step_breakdown(pooled: decoding.GenerationStats) -> dict[str, float]:
    """Milliseconds per target call inside the drafter, the target's forwards and the rest."""
    draft_s = 0.0 if math.isnan(pooled.draft_time) else pooled.draft_time
    loop_s = pooled.wall_time - draft_s - pooled.target_time
    parts = {"draft": draft_s, "target": pooled.target_time, "loop": loop_s}
    return {key: 1e3 * seconds / pooled.target_calls for key, seconds in parts.items()}


def output_tokens(output: Any) -> list[int]:
    """The new tokens of a run's output: our Generation or transformers' tensor."""
    return (output.tokens if isinstance(output, decoding.Generation) else output).tolist()


def _measured_row(method: Method, timed: Timed, tokens: Sequence[list[int]]) -> Row:
    """The row of one timed method, with what its runs alone tell (no comparisons yet)."""
    chain = method.kind in (Kind.SPECULATIVE, Kind.PLANNED) and method.branching is None
    row = Row(
        method.name,
        timed.tokens_per_s,
        method.gamma if chain else None,
        method.temperature,
        method.runtime,
        samples=timed.rates,
        prompt_tokens_per_s=timed.prompt_rates,
        repeated_4grams=statistics.median(map(repeated_ngram_fraction, tokens)),
        kind=method.kind.value,
        predicted=method.predicted,  # the plan's; a chain's is set from its run (`derive`)
    )
    pooled = timed.stats
    if pooled is not None:
        row.tokens_per_call = pooled.tokens_per_target_call
        alpha = pooled.acceptance_rate  # NaN when nothing was drafted (autoregressive)
        row.alpha = None if math.isnan(alpha) else alpha
        row.step_ms = _step_breakdown(pooled)
    return row


def _count_mismatches(
    rows: Sequence[Row], tokens: Sequence[Sequence[list[int]]], dtype: torch.dtype
) -> None:
    """Set each greedy row's `mismatches` against the first row (our greedy autoregressive
    decoding): asserted zero for ours in float32, only recorded in lower precision, where batched
    verification rounds differently from one-token forwards and near-ties can flip."""
    reference = tokens[0]
    for row, outs in zip(rows, tokens, strict=True):
        if row.temperature == 0:
            row.mismatches = sum(a != b for a, b in zip(outs, reference, strict=True))
            if dtype == torch.float32 and Kind(row.kind).ours:
                assert row.mismatches == 0, f"{row.method} changed the greedy output in float32"


def _add_comparisons(
    rows: Sequence[Row], measured: Sequence[tuple[Method, Timed]], reference: str
) -> None:
    """Speedups over our autoregressive decoding on the `reference` runtime at the same
    temperature; for chains also c, the verify cost and the predictions (`_loop_c`)."""
    ar = {
        (m.temperature, m.runtime): (row, t.stats)
        for row, (m, t) in zip(rows, measured, strict=True)
        if m.kind is Kind.AUTOREGRESSIVE
    }
    for row, (method, timed) in zip(rows, measured, strict=True):
        base, _ = ar[method.temperature, reference]
        row.speedup = row.tokens_per_s / base.tokens_per_s
        row.prompt_speedups = [
            a / b for a, b in zip(row.prompt_tokens_per_s, base.prompt_tokens_per_s, strict=True)
        ]
        if method.kind is Kind.SPECULATIVE and row.alpha is not None:
            own = ar[method.temperature, method.runtime][1]
            pooled = timed.stats
            t_target = own.target_time / own.target_calls  # s per one-token target forward
            row.c = _loop_c(pooled, own)
            row.verify_cost = pooled.target_time / pooled.target_calls / t_target
            alpha = min(row.alpha, 1 - 1e-9)
            row.predicted = theory.speedup(alpha, row.gamma, row.c)
            row.predicted_verify = theory.speedup(alpha, row.gamma, row.c, row.verify_cost)


def derive(
    measured: Sequence[tuple[Method, Timed]], dtype: torch.dtype, reference: str
) -> list[Row]:
    """The rows of the timed methods: α, tokens per call, the step breakdown, greedy
    mismatches (asserted zero for ours in float32), speedups and predictions."""
    tokens = [[output_tokens(o) for o in t.outputs] for _, t in measured]  # method, run
    rows = [_measured_row(m, t, toks) for (m, t), toks in zip(measured, tokens, strict=True)]
    _count_mismatches(rows, tokens, dtype)
    _add_comparisons(rows, measured, reference)
    return rows


def run_bench(
    pair: Pair,
    prompts: list[torch.Tensor],
    cfg: BenchConfig,
    progress: bool = True,
    plans: Mapping[float, Any] | None = None,
) -> tuple[list[Row], dict[str, dict[str, float]]]:
    """Measure every method on `prompts` ((L,) ids each), with the choices of `plans`
    ({temperature: `measure.plan.Plan`}) as rows of their own. Returns (rows, costs): costs are
    `timing.measure_c` per runtime at the best greedy chain's γ. Raises ValueError before any
    forward when a prompt + max_new_tokens exceeds the pair's positions."""
    longest = max(len(p) for p in prompts)
    inputs.check_positions([pair.target, pair.draft], longest, cfg.max_new_tokens)
    runtimes = bench_runtimes(pair, cfg)
    measured = run_methods(plan(pair, cfg, plans), pair, prompts, cfg, progress)
    rows = derive(measured, pair.dtype, runtimes[0])
    chains = [r for r in rows if r.kind == Kind.SPECULATIVE and r.temperature == 0]
    best = max(chains, key=lambda r: r.tokens_per_s)
    return rows, {rt: timing.measure_c(pair, best.gamma, rt) for rt in runtimes}


def to_record(
    pair: Pair,
    cfg: BenchConfig,
    rows: Sequence[Row],
    costs: dict[str, dict[str, float]],
    summary: dict[str, Any],
    plans: Mapping[float, Any] | None = None,
) -> dict[str, Any]:
    """The results of one bench for `records.save_results`; `markdown_table` reads it back."""
    return {
        "plans": {f"{t:g}": dataclasses.asdict(p) for t, p in (plans or {}).items()},
        "pair": pair.describe(),
        "dtype": str(pair.dtype).removeprefix("torch."),
        "config": {**dataclasses.asdict(cfg), "statistic": cfg.statistic},
        "costs": costs,
        "rows": [{**dataclasses.asdict(r), "ratio": r.ratio, "spread": r.spread} for r in rows],
        "summary": summary,
    }


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """Silence the warnings transformers 5.24's assisted generation raises about its own call
    (it passes the assistant a generation config AND keyword arguments; ours passes a config)."""
    level = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()
    try:
        yield
    finally:
        transformers_logging.set_verbosity(level)


def generation_config(model: Any, **settings: Any) -> Any:
    """The model's own generation config with `settings` applied (transformers 5 takes them this
    way without warning that they override the model's defaults)."""
    config = copy.deepcopy(model.generation_config)
    config.update(**settings)
    return config


__all__ = [  # the bench as the command line and the scripts read it, its stages included
    "QUICK",
    "README_END",
    "README_START",
    "BenchConfig",
    "Row",
    "Timed",
    "derive",
    "format_table",
    "markdown_table",
    "reduced_precision_note",
    "repeated_ngram_fraction",
    "run_bench",
    "run_methods",
    "summarize",
    "time_method",
    "to_record",
]
