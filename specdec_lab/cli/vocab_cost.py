"""`python -m specdec_lab vocab-cost`: the loop's own cost per step as V grows (`measure.vocab_cost`)."""

from __future__ import annotations

import argparse

import torch

from specdec_lab import env
from specdec_lab.measure import vocab_cost


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specdec_lab vocab-cost",
        description="The speculative loop's own cost per step at V = 4,096 and V = 151,936.",
    )
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5, help="best of this many runs")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--spread", type=float, default=2.0, help="logit scale of the tables: 2 flat, 5 peaked"
    )
    args = parser.parse_args(argv)
    threads = env.set_cpu_threads(args.threads)
    info = env.device_info(args.device)
    print(
        f"device {info['device']} ({info.get('gpu', info['cpu'])}), {threads} torch thread(s), "
        f"torch {info['torch']}"
    )
    print(
        f"speculative loop over table models (logits {args.spread:g}·z), {args.new_tokens} new "
        f"tokens, γ={args.gamma}, best of {args.repeats}; extra = the cost of the vocabulary"
    )
    cpu = torch.device(args.device).type == "cpu"
    print(
        "ms per step, wall clock"
        + (" (in brackets: CPU time of this process, robust to a shared CPU)" if cpu else "")
    )
    print(
        f"{'setting':<22} {'V=4096':>15} {'V=151936':>15} {'extra at V=151936':>19} "
        f"{'α (large)':>10}"
    )
    timings = vocab_cost.vocab_cost(
        args.new_tokens, args.gamma, args.repeats, args.device, args.spread
    )

    def cell(wall: float, cpu_time: float) -> str:
        return f"{wall:.2f}" + (f" ({cpu_time:.2f})" if cpu else "")

    for setting, (small, large) in timings.items():
        extra = cell(
            large.ms_per_step - small.ms_per_step, large.cpu_ms_per_step - small.cpu_ms_per_step
        )
        print(
            f"{setting:<22} {cell(small.ms_per_step, small.cpu_ms_per_step):>15} "
            f"{cell(large.ms_per_step, large.cpu_ms_per_step):>15} {extra:>19} "
            f"{large.alpha:>10.2f}"
        )
    return 0
