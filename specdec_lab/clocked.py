"""Notebook 04 §6's measurement: runs of several drafts on one clock, interleaved.

p is the target and q a draft (Leviathan et al. 2023, arXiv:2211.17192). Every method runs on the
same prompts, one prompt at a time, the methods interleaved so that background load spreads over
all of them; the clock is any zero-argument function returning seconds (`time.process_time` on a
CPU, which another program does not inflate; wall-clock `time.perf_counter` on a GPU).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from specdec_lab import decoding, profiling, runtime


def run_timed(
    pair: Any,
    ids: torch.Tensor,
    draft: Any | None,
    n_new: int,
    gamma: int,
    clock: Callable[[], float],
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> tuple[decoding.Generation, float]:
    """Decoding of `n_new` tokens after `ids` (greedy unless told a `temperature`): plain
    (draft None) or speculative with `draft` at `gamma`. Returns (the run, its seconds on
    `clock`), the device synchronised."""
    kw = dict(temperature=temperature, generator=generator, vocab_size=pair.vocab_size)
    runtime.synchronize(pair.device)
    start = clock()
    if draft is None:
        run = decoding.autoregressive_generate(pair.target, ids, n_new, **kw)
    else:
        run = decoding.speculative_generate(pair.target, draft, ids, n_new, gamma, **kw)
    runtime.synchronize(pair.device)
    return run, clock() - start


def timed_runs(
    pair: Any,
    drafts: dict[str, Any],
    prompts: dict[str, list[torch.Tensor]],
    plan: dict[str, list[str | None]],
    n_new: int,
    gamma: int,
    rounds: int,
    clock: Callable[[], float],
    temperature: float = 0.0,
    seed: int = 0,
    progress: bool = True,
) -> tuple[dict[tuple[str, str | None], list], dict[tuple[str, str | None], np.ndarray]]:
    """For each domain of `plan` ({domain: [None (plain decoding) or a name of `drafts`]}): every
    method on every prompt of `prompts[domain]`, `rounds` times, interleaved; greedy, or sampled
    at `temperature`. A sampled run on prompt i draws from a generator seeded `seed + i`, so every
    round repeats the same work and the fastest round is the least disturbed one.

    Returns (runs, seconds): runs[(domain, name)] is the first round's Generation per prompt;
    seconds[(domain, name)] is (prompts,) the minimum seconds per prompt over the rounds.
    """

    def sample(i: int) -> dict:
        return dict(temperature=temperature, generator=torch.Generator().manual_seed(seed + i))

    first = next(iter(prompts.values()))[0][:8]
    for name in dict.fromkeys(n for names in plan.values() for n in names):  # warm-up
        draft = None if name is None else drafts[name]
        run_timed(pair, first, draft, n_new, gamma, clock, **sample(0))
    runs: dict[tuple[str, str | None], list] = {}
    times: dict[tuple[str, str | None, int], list[float]] = {}
    for domain, names in plan.items():
        for i, ids in enumerate(tqdm(prompts[domain], desc=domain, disable=not progress)):
            for _ in range(rounds):
                for name in names:  # interleaved, so that load spreads over every method
                    draft = None if name is None else drafts[name]
                    run, seconds = run_timed(pair, ids, draft, n_new, gamma, clock, **sample(i))
                    if len(runs.setdefault((domain, name), [])) == i:
                        runs[domain, name].append(run)
                    times.setdefault((domain, name, i), []).append(seconds)
    seconds = {
        key: np.array([min(times[(*key, i)]) for i in range(len(prompts[key[0]]))]) for key in runs
    }
    return runs, seconds


def summarise(
    runs: dict[tuple[str, str | None], list],
    seconds: dict[tuple[str, str | None], np.ndarray],
    n_new: int,
) -> tuple[dict, dict, dict]:
    """From `timed_runs`' output: (tokens per second per (domain, name); speedup of each draft
    over plain decoding in its domain; α̂ per draft, pooled over the prompts' steps)."""
    speed = {key: n_new * len(s) / s.sum() for key, s in seconds.items()}
    gain = {(d, n): speed[d, n] / speed[d, None] for d, n in runs if n is not None}
    pooled = {
        key: decoding.GenerationStats.merge([g.stats for g in rs]) for key, rs in runs.items()
    }
    alpha = {key: s.acceptance_rate for key, s in pooled.items() if key[1] is not None}
    return speed, gain, alpha


def forward_costs(
    pair: Any,
    drafts: dict[str, Any],
    gamma: int,
    repeats: int,
    clock: Callable[[], float] = time.perf_counter,
    runtime: str = "auto",
) -> tuple[float, float, dict[str, float]]:
    """Seconds on `clock` (minimum of `repeats`) of: one target forward over 1 token, one over
    γ + 1 tokens (the verification), and one forward over 1 token of each draft, each on top of
    a KV cache and through the sessions the decoding loops use (`runtime`, the default one
    unless told), so that c and r are those of the runs they explain."""
    kw = dict(runtime=runtime, repeats=repeats, clock=clock)
    t_target_1 = profiling.session_latency(pair.target, 1, **kw)
    t_verify = profiling.session_latency(pair.target, gamma + 1, **kw)
    t_draft_1 = {name: profiling.session_latency(m, 1, **kw) for name, m in drafts.items()}
    return t_target_1, t_verify, t_draft_1
