"""A pair's draft head in decoding, beside its draft model and plain decoding: the model card's
table, measured on this machine.

For each temperature (greedy, then T = 1 seeded) and each γ: the head's chain, the draft
model's chain, and our autoregressive decoding, every method decoding the same prompts, timed
in interleaved rounds through `timing.interleaved` (minimum of `--repeats` rounds, one thread).
Prints and writes α, tokens per target call, tokens/s, the speedup over autoregressive decoding,
and whether greedy outputs equal autoregressive decoding's, with the machine; first, the c of
each drafter and r(k) as the demo's planner measures them (`measure.plan.measure_costs`).

    python scripts/head_decoding.py [--pair smollm2-local] [--gammas 1 2 3 4] [--prompts 4]
"""

from __future__ import annotations

import argparse
import functools
import re

import torch

from specdec_lab import data, decoding, env, models
from specdec_lab.measure import plan, records, timing


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pair", default="smollm2-local")
    ap.add_argument("--gammas", type=int, nargs="+", default=[1, 2, 3, 4])
    ap.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 1.0])
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    env.set_cpu_threads(1)
    pair = models.load_pair(args.pair)
    if pair.head_dir is None:
        raise SystemExit(f"pair {args.pair!r} has no draft head here")
    print(pair.describe(), "| head", pair.head_dir)
    prompts = [pair.encode(p["text"]) for p in data.load_prompts("code", args.prompts)]
    candidates = plan.pair_candidates(pair)
    n = args.max_new_tokens

    def decode(name: str | None, gamma: int, temperature: float) -> list[decoding.Generation]:
        runs = []
        for i, ids in enumerate(prompts):
            kw = dict(
                temperature=temperature,
                generator=torch.Generator().manual_seed(i),
                vocab_size=pair.vocab_size,
            )
            if name is None:
                runs.append(decoding.autoregressive_generate(pair.target, ids, n, **kw))
            else:
                target, drafter = candidates[name]()
                runs.append(decoding.speculative_generate(target, drafter, ids, n, gamma, **kw))
        return runs

    methods = [(None, 0)] + [(name, g) for g in args.gammas for name in candidates]
    costs = plan.measure_costs(pair.target, candidates, prompts[0], vocab_size=pair.vocab_size)
    print(f"c per drafting step: {costs.c}; r(k) = {[round(r, 3) for r in costs.verify_cost]}")
    out: dict = {
        "dtype": str(pair.dtype).removeprefix("torch."),
        "repeats": args.repeats,
        "prompts": len(prompts),
        "max_new_tokens": n,
        "c": {name: round(c, 4) for name, c in costs.c.items()},  # the planner's, interleaved
        "verify_cost": [round(r, 4) for r in costs.verify_cost],
        "t1_ms": round(costs.t1_ms, 2),
        "temperatures": {},
    }
    last: dict = {}  # (name, γ) -> the runs of the latest round

    def call(key: tuple[str | None, int], temperature: float) -> None:
        last[key] = decode(*key, temperature)

    for temperature in args.temperatures:
        for name in candidates:  # warm-up, untimed
            decode(name, 2, temperature)
        calls = {key: functools.partial(call, key, temperature) for key in methods}
        best = timing.interleaved(calls, args.repeats, warmups=0)
        ar_tokens = [run.tokens for run in last[None, 0]]
        rows = {}
        for key in methods:
            name, gamma = key
            label = "autoregressive" if name is None else f"{name} γ={gamma}"
            tokens_per_s = n * len(prompts) / best[key]
            row = {"tokens_per_s": round(tokens_per_s, 2)}
            if name is not None:
                stats = decoding.GenerationStats.merge([run.stats for run in last[key]])
                row |= {
                    "alpha": round(stats.acceptance_rate, 3),
                    "tokens_per_target_call": round(stats.tokens_per_target_call, 3),
                }
                if temperature == 0:
                    same = [
                        torch.equal(r.tokens, a) for r, a in zip(last[key], ar_tokens, strict=True)
                    ]
                    row["greedy_equal"] = f"{sum(same)}/{len(same)}"
            rows[label] = row
        ar = rows["autoregressive"]["tokens_per_s"]
        for label, row in rows.items():
            row["speedup"] = round(row["tokens_per_s"] / ar, 3)
            print(f"T={temperature:g} {label:22s} {row}")
        out["temperatures"][f"{temperature:g}"] = rows
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", pair.name).strip("-")
    path = args.out or data.RESULTS_DIR / f"head-decoding-cpu-{slug}.json"
    print(f"wrote {records.save_results(path, out, 'cpu')}")


if __name__ == "__main__":
    main()
