"""`python -m specdec_lab bench`: the side-by-side speed benchmark (see `measure.bench`)."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

from specdec_lab import data, env, models
from specdec_lab.cli import non_negative_temperature, planned_pair, positive_int
from specdec_lab.cli import vocab_cost as vocab_cost_cli
from specdec_lab.measure import bench, records
from specdec_lab.measure.bench_plan import bench_runtimes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_lab bench", description=bench.__doc__)
    parser.add_argument("--pair", default=None, help="registry pair name (default: embedded)")
    parser.add_argument("--target", default=None, help="target: a hub id or a directory")
    parser.add_argument("--draft", default=None, help="draft: a hub id or a directory")
    parser.add_argument("--dtype", default=None, choices=sorted(models.DTYPES))
    parser.add_argument("--domain", default="code", choices=["code", "prose"])
    parser.add_argument(
        "--gammas", type=positive_int, nargs="+", default=list(bench.BenchConfig.gammas)
    )
    parser.add_argument(
        "--max-new-tokens", type=positive_int, default=bench.BenchConfig.max_new_tokens
    )
    parser.add_argument("--repeats", type=positive_int, default=bench.BenchConfig.repeats)
    parser.add_argument("--prompts", type=positive_int, default=bench.BenchConfig.n_prompts)
    parser.add_argument(
        "--temperatures",
        type=non_negative_temperature,
        nargs="*",
        default=list(bench.BenchConfig.temperatures),
    )
    parser.add_argument("--seed", type=int, default=bench.BenchConfig.seed)
    runtimes = list(bench.BenchConfig.runtimes)
    parser.add_argument(
        "--runtimes",
        nargs="+",
        choices=runtimes,
        default=runtimes,
        help="the first is the reference",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI and dry runs")
    parser.add_argument("--no-plan", action="store_true", help="no row (or dtype) from the plan")
    parser.add_argument("--no-hf", action="store_true", help="skip transformers' own generate")
    parser.add_argument(
        "--threads", type=int, default=1, help="CPU threads (default 1; 0 = torch's default)"
    )
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default data/results/)")
    parser.add_argument("--vocab-cost", action="store_true", help="only the loop's cost per step")
    parser.add_argument("--markdown", type=Path, metavar="RECORD", help="only a record's table")
    args = parser.parse_args(argv)
    if args.markdown:
        print(bench.markdown_table(records.load_results(args.markdown)))
        return 0
    if args.vocab_cost:
        env.set_cpu_threads(args.threads or None)
        return vocab_cost_cli.main(["--threads", str(args.threads)])
    sizes = dict(gammas=tuple(args.gammas), max_new_tokens=args.max_new_tokens)
    sizes.update(repeats=args.repeats, n_prompts=args.prompts)
    cfg = dataclasses.replace(
        bench.QUICK if args.smoke else bench.BenchConfig(**sizes),
        hf=not args.no_hf,
        domain=args.domain,
        temperatures=tuple(args.temperatures),
        seed=args.seed,
        runtimes=tuple(args.runtimes),
    )

    device = env.default_device()
    env.set_cpu_threads(args.threads or None)
    pair = models.load_pair(args.pair, device, args.dtype, target=args.target, draft=args.draft)
    prompts = [pair.encode(p["text"]) for p in data.load_prompts(cfg.domain, cfg.n_prompts)]
    plans = None
    if not args.no_plan:  # α probed on the bench's own prompts and length
        runtime, temperatures = bench_runtimes(pair, cfg)[0], [0.0, *cfg.temperatures]
        pair, plans = planned_pair(pair, prompts, args, temperatures, runtime, cfg.max_new_tokens)
        for t, planned in plans.items():
            print(f"plan, {'greedy' if t == 0 else f'T = {t:g}'}:\n{planned.describe()}")
    info = env.device_info(device)
    print(pair.describe())
    print(
        f"device {info['device']} | {info.get('gpu', info['cpu'])} | {info['torch_threads']} "
        f"threads | torch {info['torch']} | transformers {info['transformers']}"
    )
    temps = ", ".join(f"T={t:g}" for t in cfg.temperatures)
    print(
        f"{len(prompts)} {cfg.domain} prompts x {cfg.max_new_tokens} new tokens, greedy"
        f"{', then ' + temps + ' (seeded)' if temps else ''}, {cfg.statistic}\n"
    )
    rows, costs = bench.run_bench(pair, prompts, cfg, plans=plans)
    print(bench.format_table(rows, costs))
    note = bench.reduced_precision_note(rows, pair.dtype)
    if note:
        print(note)
    headline = bench.summarize(rows)
    print()
    for k, v in headline.items():
        print(f"  {k} = {v:.2f}" if isinstance(v, float) else f"  {k}: {v}")

    tag = "smoke" if args.smoke else cfg.domain
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", pair.name).strip("-")
    out = args.out or data.RESULTS_DIR / f"bench-{info['device'].split(':')[0]}-{slug}-{tag}.json"
    record = bench.to_record(pair, cfg, rows, costs, headline, plans)
    path = records.save_results(out, record, device)
    print(f"wrote {path}")
    return 0
