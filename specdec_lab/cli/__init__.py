"""Command-line tools: argparse and printing only, each a `main(argv) -> int` that
`python -m specdec_lab <command>` dispatches to (see `specdec_lab.__main__`), and the plan that
the demo and the bench both make (`planned_pair`).

May import: everything.
"""

from __future__ import annotations

import argparse

import torch

from specdec_lab import models
from specdec_lab.measure import plan
from specdec_lab.sampling import SamplingConfig


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (`--gamma 0` or `--rounds 0` would run silently)."""
    value = int(text)  # a ValueError, which argparse reports as "invalid positive_int value"
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def non_negative_temperature(text: str) -> float:
    """An argparse type: a finite temperature >= 0, refused before any model loads."""
    try:
        return SamplingConfig(float(text)).temperature
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


PROBE_MIN = 16  # the fewest tokens a plan's α probe decodes, however short the run


def planned_pair(pair, ids, args, temperatures, runtime, probe_tokens, trees=True):
    """`pair`'s plans ({temperature: `measure.plan.Plan`}) at `temperatures`, made on `ids` with α
    probed over `probe_tokens` (the run's own length: a prompt's first tokens can be easier
    than the rest). Where the pair's default dtype is not float32 and `args.dtype` is not given,
    float32 is planned too at the first temperature, timed in the same rounds, and the pair is
    kept in the dtype expected to decode fastest (`plan.choose_dtype`); the two are printed.
    Returns that pair and its plans; `trees` False leaves token trees out. A run shorter than
    PROBE_MIN tokens is probed over PROBE_MIN: a one-token run drafts nothing to measure α on."""
    short = "" if probe_tokens >= PROBE_MIN else f" (the run's {probe_tokens} are too few)"
    probe_tokens = max(probe_tokens, PROBE_MIN)
    pairs = {pair.dtype: pair}
    if args.dtype is None and pair.dtype != torch.float32:
        load = dict(target=args.target, draft=args.draft)
        pairs[torch.float32] = models.load_pair(args.pair, pair.device, torch.float32, **load)
    temps = ", ".join(f"T = {t:g}" for t in temperatures)
    print(
        f"planning ({temps}): timing t(k) and c, probing α over {probe_tokens} tokens{short} ...",
        flush=True,
    )
    how = dict(seed=args.seed, probe_tokens=probe_tokens, trees=trees)
    first = plan.plan_pairs(pairs, ids, temperatures[:1], runtime, **how)
    first = {dtype: by_t[temperatures[0]] for dtype, by_t in first.items()}
    chosen = plan.choose_dtype(first)
    print(f"dtype, planned at T = {temperatures[0]:g}:\n{plan.describe_dtypes(first, chosen)}")
    costs = {chosen: first[chosen].costs}  # measured once; α is probed per temperature
    rest = plan.plan_pairs(
        {chosen: pairs[chosen]}, ids, temperatures[1:], runtime, **how, costs=costs
    )
    return pairs[chosen], {temperatures[0]: first[chosen], **rest[chosen]}
