"""`python -m specdec_lab bench`: speculative vs autoregressive vs HF assisted generation.

Everything is measured side by side in one run, on the same pair, prompts and greedy settings,
and quoted as the median over repeats. Next to each measured speedup stands Leviathan's
prediction (1 − α^(γ+1)) / ((1 − α)(γc + 1)) from the α and c measured in the same run.
The JSON record (with the machine it ran on) goes to data/results/.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

from specdec_lab import decoding, profiling, theory
from specdec_lab.models import MODELS_DIR, Pair, load_pair
from specdec_lab.runtime import default_device, device_info, set_cpu_threads, synchronize

RESULTS_DIR = MODELS_DIR.parent / "results"
PROMPTS_DIR = MODELS_DIR.parent / "prompts"


@dataclass(frozen=True)
class BenchConfig:
    gammas: tuple[int, ...] = (2, 3, 4, 5, 6)
    max_new_tokens: int = 64
    repeats: int = 3
    n_prompts: int = 4
    domain: str = "code"
    hf: bool = True  # include transformers' own generate, assisted generation and prompt lookup


QUICK = BenchConfig(gammas=(3,), max_new_tokens=16, repeats=1, n_prompts=1)


@dataclass
class Row:
    method: str
    tokens_per_s: float
    gamma: int | None = None
    alpha: float | None = None
    tokens_per_call: float | None = None
    c: float | None = None  # draft forward time / target one-token forward time, in the loop
    verify_cost: float | None = None  # target forward over γ+1 tokens / over one token
    speedup: float | None = None  # over our autoregressive decoding
    predicted: float | None = None  # Leviathan's formula with this run's α and c
    predicted_verify: float | None = None  # ... with the measured verify cost instead of 1
    samples: list[float] = field(default_factory=list)

    @property
    def ratio(self) -> float | None:
        return self.speedup / self.predicted if self.speedup and self.predicted else None


def load_prompts(domain: str, n: int | None = None) -> list[dict]:
    path = PROMPTS_DIR / f"{domain}.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows[:n] if n else rows


def _timed_runs(
    run: Callable[[torch.Tensor], tuple[int, object]],
    prompts: list[torch.Tensor],
    repeats: int,
    device: torch.device,
) -> tuple[list[float], list[object]]:
    """tokens/s of each repeat over all prompts (after one untimed warm-up), plus run outputs."""
    run(prompts[0])  # warm-up: allocator, kernels, lazy imports
    rates, outputs = [], []
    for _ in range(repeats):
        n_tokens, seconds = 0, 0.0
        for ids in prompts:
            synchronize(device)
            start = time.perf_counter()
            n, out = run(ids)
            synchronize(device)
            seconds += time.perf_counter() - start
            n_tokens += n
            outputs.append(out)
        rates.append(n_tokens / seconds)
    return rates, outputs


def measure_c(pair: Pair, gamma: int, repeats: int = 7) -> dict[str, float]:
    """c = t_draft / t_target for one-token forwards on a KV cache, and t_target(γ+1)/t_target(1)."""
    t_draft = profiling.forward_latency(pair.draft, 1, repeats=repeats).median
    t_target = profiling.forward_latency(pair.target, 1, repeats=repeats).median
    t_verify = profiling.forward_latency(pair.target, gamma + 1, repeats=repeats).median
    return {
        "t_draft_ms": 1e3 * t_draft,
        "t_target_ms": 1e3 * t_target,
        "t_verify_ms": 1e3 * t_verify,
        "c": t_draft / t_target,
        "verify_cost": t_verify / t_target,
    }


def run_bench(pair: Pair, prompts: list[torch.Tensor], cfg: BenchConfig, progress: bool = True):
    """Measure every method on `prompts` (list of (L,) ids). Returns (rows, extras)."""
    dev, n_new, vocab = pair.device, cfg.max_new_tokens, pair.vocab_size
    target, draft = pair.target, pair.draft

    def ours_ar(ids):
        out = decoding.autoregressive_generate(target, ids, n_new, 0, vocab_size=vocab)
        return out.stats.new_tokens, out

    def ours_spec(gamma):
        def run(ids):
            out = decoding.speculative_generate(
                target, draft, ids, n_new, gamma, temperature=0, vocab_size=vocab
            )
            return out.stats.new_tokens, out

        return run

    def hf(**kwargs):
        def run(ids):
            ids = ids[None].to(dev)
            out = target.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=n_new,
                min_new_tokens=n_new,
                do_sample=False,
                **kwargs,
            )
            return out.shape[1] - ids.shape[1], None

        return run

    methods: list[tuple[str, int | None, Callable]] = [("autoregressive (ours)", None, ours_ar)]
    methods += [(f"speculative γ={g} (ours)", g, ours_spec(g)) for g in cfg.gammas]
    if cfg.hf:
        methods += [
            ("HF generate (greedy)", None, hf()),
            ("HF assisted (default schedule)", None, hf(assistant_model=draft)),
            ("HF prompt lookup", None, hf(prompt_lookup_num_tokens=10)),
        ]
    rows: list[Row] = []
    outputs: dict[str, list] = {}
    for name, gamma, run in tqdm(methods, desc="bench", disable=not progress):
        rates, outs = _timed_runs(run, prompts, cfg.repeats, dev)
        row = Row(name, statistics.median(rates), gamma, samples=rates)
        if isinstance(outs[0], decoding.Generation):
            pooled = decoding.GenerationStats.merge([o.stats for o in outs])
            row.tokens_per_call = pooled.tokens_per_target_call
            alpha = pooled.acceptance_rate  # NaN when nothing was drafted (autoregressive)
            row.alpha = None if math.isnan(alpha) else alpha
        outputs[name] = outs
        rows.append(row)

    # The exactness guard of the benchmark: every greedy method produced the same tokens.
    reference = [o.tokens.tolist() for o in outputs["autoregressive (ours)"]]
    for name, outs in outputs.items():
        if outs and isinstance(outs[0], decoding.Generation):
            assert [o.tokens.tolist() for o in outs] == reference, f"{name} changed the output"

    # α, c and the verify cost of each row come from the runs themselves: the time spent inside
    # draft and target forwards, against the target's one-token forward in autoregressive mode.
    ar_stats = decoding.GenerationStats.merge([o.stats for o in outputs["autoregressive (ours)"]])
    t_target = ar_stats.target_time / ar_stats.target_calls
    ar = rows[0].tokens_per_s
    for row in rows:
        row.speedup = row.tokens_per_s / ar
        if row.gamma and row.alpha is not None:
            pooled = decoding.GenerationStats.merge([o.stats for o in outputs[row.method]])
            row.c = pooled.draft_time / pooled.draft_calls / t_target
            row.verify_cost = pooled.target_time / pooled.target_calls / t_target
            alpha = min(row.alpha, 1 - 1e-9)
            row.predicted = theory.speedup(alpha, row.gamma, row.c)
            row.predicted_verify = theory.speedup(alpha, row.gamma, row.c, row.verify_cost)
    best = max((r for r in rows if r.gamma), key=lambda r: r.tokens_per_s)
    return rows, measure_c(pair, best.gamma)


def format_table(rows: list[Row], costs: dict[str, float]) -> str:
    lines = [
        f"{'method':<31}{'tok/s':>7}{'α':>7}{'tok/call':>9}{'c':>7}{'verify':>7}{'speedup':>9}"
        f"{'predicted':>10}{'meas/pred':>10}{'pred+verify':>12}",
        "-" * 109,
    ]

    def fmt(x: float | None, width: int, spec: str, suffix: str = "") -> str:
        text = "—" if x is None else format(x, spec) + suffix
        return text.rjust(width)

    for r in rows:
        lines.append(
            f"{r.method:<31}{r.tokens_per_s:>7.1f}{fmt(r.alpha, 7, '.3f')}"
            f"{fmt(r.tokens_per_call, 9, '.2f')}{fmt(r.c, 7, '.3f')}"
            f"{fmt(r.verify_cost, 7, '.2f', 'x')}{fmt(r.speedup, 9, '.2f', 'x')}"
            f"{fmt(r.predicted, 10, '.2f', 'x')}{fmt(r.ratio, 10, '.2f')}"
            f"{fmt(r.predicted_verify, 12, '.2f', 'x')}"
        )
    lines += [
        "c and verify are measured inside the decoding loop: c = time per draft forward / time per",
        "target forward in autoregressive decoding; verify = time per target forward over γ+1",
        "tokens / the same. predicted = (1-α^(γ+1))/((1-α)(γc+1)) (Leviathan et al.); pred+verify",
        "replaces the paper's free verification (the +1) by the measured verify cost.",
        f"Isolated forwards (profiling.forward_latency): draft {costs['t_draft_ms']:.2f} ms, "
        f"target {costs['t_target_ms']:.2f} ms (c = {costs['c']:.3f}), target over γ+1 tokens "
        f"{costs['verify_cost']:.2f}x one token.",
    ]
    return "\n".join(lines)


def summarize(rows: list[Row]) -> dict[str, float]:
    """The three headline ratios of the speed issue, from the best speculative row."""
    best = max((r for r in rows if r.gamma), key=lambda r: r.tokens_per_s)
    by_name = {r.method: r for r in rows}
    out = {"best_gamma": best.gamma, "speedup_vs_autoregressive": best.speedup}
    if "HF assisted (default schedule)" in by_name:
        out["speedup_vs_hf_assisted"] = (
            best.tokens_per_s / by_name["HF assisted (default schedule)"].tokens_per_s
        )
    out["measured_over_predicted"] = best.ratio
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_lab bench", description=__doc__)
    parser.add_argument("--pair", default="embedded")
    parser.add_argument("--domain", default="code", choices=["code", "prose"])
    parser.add_argument("--gammas", type=int, nargs="+", default=list(BenchConfig.gammas))
    parser.add_argument("--max-new-tokens", type=int, default=BenchConfig.max_new_tokens)
    parser.add_argument("--repeats", type=int, default=BenchConfig.repeats)
    parser.add_argument("--prompts", type=int, default=BenchConfig.n_prompts)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI and dry runs")
    parser.add_argument("--no-hf", action="store_true", help="skip transformers' own generate")
    parser.add_argument(
        "--threads", type=int, default=1, help="CPU threads (default 1; 0 = torch's default)"
    )
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default data/results/)")
    args = parser.parse_args(argv)
    cfg = (
        QUICK
        if args.smoke
        else BenchConfig(
            tuple(args.gammas), args.max_new_tokens, args.repeats, args.prompts, args.domain
        )
    )
    cfg = BenchConfig(**{**asdict(cfg), "hf": not args.no_hf, "domain": args.domain})

    device = default_device()
    set_cpu_threads(args.threads or None)
    pair = load_pair(args.pair, device=device)
    prompts = [pair.encode(p["text"]) for p in load_prompts(cfg.domain, cfg.n_prompts)]
    info = device_info(device)
    print(f"{pair.describe()}")
    print(
        f"device {info['device']} | {info.get('gpu', info['cpu'])} | {info['torch_threads']} "
        f"threads | torch {info['torch']} | transformers {info['transformers']}"
    )
    print(
        f"{len(prompts)} {cfg.domain} prompts x {cfg.max_new_tokens} new tokens, greedy, "
        f"median of {cfg.repeats} repeats\n"
    )
    rows, costs = run_bench(pair, prompts, cfg)
    print(format_table(rows, costs))
    headline = summarize(rows)
    print("\n" + "  ".join(f"{k} = {v:.2f}" for k, v in headline.items() if v is not None))

    tag = "smoke" if args.smoke else cfg.domain
    out = args.out or RESULTS_DIR / f"bench-{info['device'].split(':')[0]}-{args.pair}-{tag}.json"
    record = {
        "pair": pair.describe(),
        "config": asdict(cfg),
        "costs": costs,
        "rows": [{**asdict(r), "ratio": r.ratio} for r in rows],
        "summary": headline,
    }
    path = profiling.save_results(out, record, device)
    print(f"wrote {path}")
    return 0
