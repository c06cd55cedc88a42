"""Timing: the one harness behind every measured time in the course.

`timer` times a block (`time_fn` repeats it); `session_latency`, `forward_costs`, `measure_c`,
`runtime_sweep` and `verify_curve` time forwards through the sessions the decoding loops use, so
the c and r they report are those of the runs they explain; `timed_runs` times whole generations.
Methods are interleaved in rounds, so that background load spreads over all of them.

The statistic: a repeat can only be slowed down by what else the machine does, never sped up, so
a measurement reports the **minimum** over its repeats (`Timing.min`; `Timing.median` shows the
spread). The clock is any zero-argument function returning seconds: `time.perf_counter` (wall
time) by default, or `time.process_time`, the CPU time of this process, which does not count time
spent waiting for a core (a busy neighbour still inflates it through shared caches and memory).

p is the target and q a draft (Leviathan et al. 2023, arXiv:2211.17192).
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm.auto import tqdm

from specdec_lab import decoding, env
from specdec_lab.engine import sessions
from specdec_lab.engine.sessions import DEFAULT_RUNTIME

if TYPE_CHECKING:  # the pairs import transformers, which takes seconds: only for the hints
    from specdec_lab.models import Pair


def run_timed(
    pair: Any,
    ids: torch.Tensor,
    draft: Any | None,
    n_new: int,
    gamma: int,
    clock: Callable[[], float],
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    runtime: str = DEFAULT_RUNTIME,
) -> tuple[decoding.Generation, float]:
    """Decoding of `n_new` tokens after `ids`, plain (draft None) or speculative with `draft` at
    `gamma`, through `runtime`: (the run, its seconds on `clock`, through `timer`)."""
    kw = dict(
        temperature=temperature, generator=generator, vocab_size=pair.vocab_size, runtime=runtime
    )
    with timer(pair.device, clock) as sw:
        if draft is None:
            run = decoding.autoregressive_generate(pair.target, ids, n_new, **kw)
        else:
            run = decoding.speculative_generate(pair.target, draft, ids, n_new, gamma, **kw)
    return run, sw.seconds


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
    runtime: str = DEFAULT_RUNTIME,
) -> tuple[dict[tuple[str, str | None], list], dict[tuple[str, str | None], np.ndarray]]:
    """For each domain of `plan` ({domain: [None (plain decoding) or a name of `drafts`]}): every
    method on every prompt of `prompts[domain]`, `rounds` times, interleaved; greedy, or sampled
    at `temperature` with a generator seeded `seed + i` on prompt i (every round alike), each run
    through `runtime`'s sessions. Returns
    (runs, seconds): per (domain, name), the first round's Generation per prompt, and (prompts,)
    the minimum seconds per prompt over the rounds."""

    def sample(i: int) -> dict:
        generator = torch.Generator().manual_seed(seed + i)
        return dict(temperature=temperature, generator=generator, runtime=runtime)

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


def speed_summary(
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
    runtime: str = DEFAULT_RUNTIME,
) -> tuple[float, float, dict[str, float]]:
    """Seconds on `clock` (min of `repeats`) of a target forward over 1 token, one over γ + 1
    tokens, and one over 1 token of each draft, on a KV cache through `runtime`'s sessions, in the
    loop's order (`loop_costs`): the target timed as its own draft gives c ≈ 1."""
    target = sessions.open_session(pair.target, runtime=runtime)
    opened = {n: sessions.open_session(m, runtime=runtime) for n, m in drafts.items()}
    setup = session_setup(target, opened, max_k=gamma + 1)
    t = loop_costs({None: setup}, [gamma + 1], repeats, clock)[None]
    return t["t"][1], t["t"][gamma + 1], t["step"]


def verdict(speedup: float, noise: float = 0.05) -> str:
    """The clock's verdict on a speedup over plain decoding, with a margin for a busy machine:
    "faster than plain decoding", "slower than plain decoding", or "within noise of 1x" when it
    is within `noise` of 1."""
    if abs(speedup - 1) <= noise:
        return "within noise of 1x"
    return "faster than plain decoding" if speedup > 1 else "slower than plain decoding"


@dataclass(frozen=True)
class Timing:
    """Per-repeat times in seconds: a measurement reports `min`; `median` shows the spread."""

    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    def __len__(self) -> int:
        return len(self.samples)


@dataclass
class Stopwatch:
    """Filled in by `timer` when its block exits: `seconds` is the elapsed wall time."""

    seconds: float = float("nan")


@contextlib.contextmanager
def timer(
    device: torch.device | str, clock: Callable[[], float] = time.perf_counter
) -> Iterator[Stopwatch]:
    """Time the enclosed block on `device`, waiting for its queued kernels before and after: on
    CUDA with a pair of `torch.cuda.Event`s (GPU time), elsewhere with `clock`; the elapsed
    seconds land in the yielded `Stopwatch` when the block exits."""
    device = torch.device(device)
    sw = Stopwatch()
    env.synchronize(device)
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        stream = torch.cuda.current_stream(device)
        start.record(stream)
        yield sw
        end.record(stream)
        end.synchronize()
        sw.seconds = start.elapsed_time(end) / 1e3  # elapsed_time is in milliseconds
    else:
        t0 = clock()
        yield sw
        env.synchronize(device)
        sw.seconds = clock() - t0


def time_fn(
    fn: Callable[[], object],
    *,
    device: torch.device | str,
    warmup: int = 2,
    repeats: int = 5,
    reset: Callable[[], object] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Timing:
    """Call `fn` `warmup` times untimed, then `repeats` times timed; return every sample.
    `reset`, if given, runs after every call outside the timed region (say, a KV cache rollback)."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for _ in range(warmup):
        fn()
        if reset is not None:
            reset()
    samples = []
    for _ in range(repeats):
        with timer(device, clock) as sw:
            fn()
        samples.append(sw.seconds)
        if reset is not None:
            reset()
    return Timing(tuple(samples))


def session_latency(
    model,
    k: int,
    runtime: str = DEFAULT_RUNTIME,
    repeats: int = 7,
    prefix: int = 32,
    clock: Callable[[], float] = time.perf_counter,
):
    """Seconds of one forward over k new tokens after `prefix` cached ones, the way the decoding
    loops run it (logits included): `runtime_sweep` for one k and one runtime."""
    return runtime_sweep(model, [k], (runtime,), repeats, prefix, clock)[runtime][0]


def runtime_sweep(
    model,
    ks: Sequence[int],
    runtimes: Sequence[str] = ("hf", "lean"),
    repeats: int = 7,
    prefix: int = 32,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, list[float]]:
    """Per-call latency (seconds, min of `repeats`) of a k-token forward for every k in `ks`,
    through each runtime's session, in interleaved rounds: {runtime: [t(k) for k in ks]}. What
    differs between "hf" (transformers' eager forward) and "lean" (`engine.llama`) is per-call
    overhead, the third regime next to memory bandwidth and compute (notebook 05)."""
    opened = {rt: sessions.open_session(model, runtime=rt) for rt in runtimes}
    return session_sweep(opened, ks, repeats, prefix, clock)


def session_sweep(
    opened: dict[Any, sessions.Session],
    ks: Sequence[int] | dict[Any, Sequence[int]],
    repeats: int = 7,
    prefix: int = 32,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[Any, list[float]]:
    """`runtime_sweep` over sessions already open, by name (say one model in two dtypes):
    {name: [t(k) for k in ks]}; `ks` may also give each name its own token counts ({name: ks})."""
    per_name = ks if isinstance(ks, dict) else dict.fromkeys(opened, ks)
    gen = torch.Generator().manual_seed(0)
    vocab = min(session.vocab_size for session in opened.values())
    ids = torch.randint(vocab, (prefix + max(max(k) for k in per_name.values()),), generator=gen)

    for session in opened.values():
        session.crop(0)  # a session swept before starts afresh
        session.logits(ids[:prefix])
    calls = {
        (name, k): functools.partial(s.logits, ids[: prefix + k])
        for name, s in opened.items()
        for k in per_name[name]
    }
    device = next(iter(opened.values())).device
    best = interleaved(
        calls, repeats, device, clock, before=lambda key: opened[key[0]].crop(prefix)
    )
    return {name: [best[name, k] for k in per_name[name]] for name in opened}


def interleaved(
    calls: dict[Any, Callable[[], Any]],
    repeats: int = 7,
    device: torch.device | str = "cpu",
    clock: Callable[[], float] = time.perf_counter,
    warmups: int = 2,
    before: Callable[[Any], Any] | None = None,
) -> dict[Any, float]:
    """Minimum seconds on `clock` of each of `calls` ({key: call()}), timed in rounds in which
    every call takes its turn, after `warmups` uncounted rounds; `before(key)` runs untimed
    before each call (a session's rollback, say)."""
    best = dict.fromkeys(calls, float("inf"))
    for round_ in range(warmups + repeats):
        for key, call in calls.items():
            if before is not None:
                before(key)
            with timer(device, clock) as sw:
                call()
            if round_ >= warmups:
                best[key] = min(best[key], sw.seconds)
    return best


def verify_curve(model, runtime: str = DEFAULT_RUNTIME, max_tokens: int = 16) -> list[float]:
    """t(k tokens) / t(1 token) for k = 1 .. max_tokens: the device's verification cost curve
    (a target forward over γ+1 tokens, relative to one), which `tree.choose_branching` reads."""
    times = runtime_sweep(model, range(1, max_tokens + 1), (runtime,))[runtime]
    return [t / times[0] for t in times]


def measure_c(
    pair: Pair,
    gamma: int,
    runtime: str = DEFAULT_RUNTIME,
    repeats: int = 7,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, float]:
    """`forward_costs` of the pair's draft: c = t_draft / t_target for one token, and
    verify_cost = t_target(γ+1 tokens) / t_target(1), with the times in ms."""
    t_target, t_verify, t_draft = forward_costs(
        pair, {"draft": pair.draft}, gamma, repeats, clock=clock, runtime=runtime
    )
    return {
        "t_draft_ms": 1e3 * t_draft["draft"],
        "t_target_ms": 1e3 * t_target,
        "t_verify_ms": 1e3 * t_verify,
        "c": t_draft["draft"] / t_target,
        "verify_cost": t_verify / t_target,
    }


@dataclass(frozen=True)
class Setup:
    """What `loop_costs` times for one target: its session with `prefix` tokens already cached,
    `longer` (the prefix and at least max(ks) more tokens, any: the cost does not read them), and
    each drafter's one-token step as (call, rollback) by name; `starts`, a drafter's first step of
    a generation call where it reads the prompt itself (a draft model's forward over it), as
    (call, rollback to an empty cache)."""

    target: Any
    prefix: int
    longer: torch.Tensor
    steps: dict[str, tuple[Callable[[], Any], Callable[[], Any]]]
    starts: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = field(default_factory=dict)


def loop_costs(
    setups: dict[Any, Setup],
    ks: Sequence[int],
    repeats: int = 5,
    clock: Callable[[], float] = time.perf_counter,
    warmups: int = 2,
    plain: int = 3,
) -> dict[Any, dict[str, Any]]:
    """The one instrument for the costs: seconds on `clock` (min over `repeats` rounds) of the
    target's one-token forward t(1), its forward over k tokens t(k) for every k of `ks`, and each
    drafter's one-token step, timed in the order the loops run them.

    Each round, per setup: plain decoding's `plain` one-token forwards in a row (t(1) is the
    fastest of all but the first, as autoregressive decoding pays it: after another one-token
    forward); then for every k > 1 and every drafter, k − 1 drafting steps followed by the
    target's verify over k tokens (speculative decoding's step: draft, then verify, then the next
    round). Timing t(1) right after a larger forward (the interleaved sweeps did) reads it high:
    on the embedded pair a one-token forward after a 5-token one ran 7% (min) to 21% (median)
    slower than one after another one-token forward, which pulled r(k) = t(k)/t(1) low.

    A drafter's first step of a round, right after a target forward, is also kept apart
    ("first"): the target has just streamed its weights through the cache the draft's were in.
    On the embedded pair here (AMD EPYC, 32 MiB L3; the target's 43 MB does not fit) that step
    took 1.0 ms and the next ones 0.45 ms, so c from the fastest step alone left a third of the
    loop's drafting time out of every prediction.

    A generation call's start is timed too: the target's forward over the whole prefix (the
    prompt's, "prefill"), and each drafter's start where it has one (`Setup.starts`).

    Returns {key: {"t": {k: seconds}, "step": {name: seconds}, "first": {name: seconds},
    "prefill": seconds, "start": {name: seconds}}}: "step" is the fastest step of any, "first"
    the fastest first step of a round."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if plain < 2:
        raise ValueError(f"plain needs at least 2 one-token forwards in a row, got {plain}")
    bigger = sorted(k for k in set(ks) if k > 1)
    out = {
        key: {
            "t": dict.fromkeys([1, *bigger], float("inf")),
            "step": dict.fromkeys(s.steps, float("inf")),
            "first": dict.fromkeys(s.steps, float("inf")),
            "prefill": float("inf"),
            "start": dict.fromkeys(s.starts, float("inf")),
        }
        for key, s in setups.items()
    }
    device = next(iter(setups.values())).target.device

    def timed(call: Callable[[], Any]) -> float:
        with timer(device, clock) as sw:
            call()
        return sw.seconds

    for round_ in range(warmups + repeats):
        counts = round_ >= warmups
        for key, s in setups.items():
            best = out[key]
            s.target.crop(s.prefix)  # plain decoding: one-token forwards in a row
            for i in range(plain):
                t = timed(functools.partial(s.target.logits, s.longer[: s.prefix + i + 1]))
                if counts and i > 0:
                    best["t"][1] = min(best["t"][1], t)
            s.target.crop(s.prefix)
            drafts = list(s.steps.items()) or [(None, None)]
            for k in bigger:
                for name, step in drafts:
                    for i in range(k - 1 if step else 0):  # the drafting steps, then the verify
                        step[1]()
                        t = timed(step[0])
                        if counts:
                            best["step"][name] = min(best["step"][name], t)
                            if i == 0:  # right after a target forward
                                best["first"][name] = min(best["first"][name], t)
                    s.target.crop(s.prefix)
                    t = timed(functools.partial(s.target.logits, s.longer[: s.prefix + k]))
                    if counts:
                        best["t"][k] = min(best["t"][k], t)
            if not bigger:  # drafts only: one step each after plain decoding
                for name, (call, rollback) in s.steps.items():
                    rollback()
                    t = timed(call)
                    if counts:
                        best["step"][name] = min(best["step"][name], t)
                        best["first"][name] = min(best["first"][name], t)
            s.target.crop(0)  # a call's start: the prompt's forward, then each drafter's
            t = timed(functools.partial(s.target.logits, s.longer[: s.prefix]))
            if counts:
                best["prefill"] = min(best["prefill"], t)
            for name, (call, rollback) in s.starts.items():
                rollback()
                t = timed(call)
                if counts:
                    best["start"][name] = min(best["start"][name], t)
            s.target.crop(s.prefix)
    return out


def session_setup(target, drafts: dict[str, Any], prefix: int = 32, max_k: int = 9) -> Setup:
    """A `Setup` of open sessions (target and draft models, say): `prefix` random tokens cached,
    each draft's step a one-token forward after them."""
    vocab = min(x.vocab_size for x in (target, *drafts.values()))
    ids = torch.randint(vocab, (prefix + max_k,), generator=torch.Generator().manual_seed(0))
    target.logits(ids[:prefix])
    steps = {}
    for name, d in drafts.items():
        d.logits(ids[:prefix])
        steps[name] = (
            functools.partial(d.logits, ids[: prefix + 1]),
            functools.partial(d.crop, prefix),
        )
    return Setup(target, prefix, ids, steps)
