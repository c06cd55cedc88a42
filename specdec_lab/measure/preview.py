"""A first look: one prompt decoded speculatively and autoregressively on a pair, shown in one
screen (notebook 00's first section): the coloured trace (`display.trace`), the tokens per target
call, and the speedup on this machine's clock, each method timed as its fastest round
(`timing.run_timed`). It decodes with generators seeded `seed`, and draws from no other RNG."""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from specdec_lab import env
from specdec_lab.display import Trace, trace
from specdec_lab.measure import timing


@dataclass(frozen=True, repr=False)
class FirstLook:
    """What `first_look` ran, measured and shows (leave it last in a cell to render it): the first
    round's runs, and each method's fastest of `rounds` rounds in `seconds`, on `clock_name`."""

    trace: Trace
    speculative: Any  # decoding.Generation
    autoregressive: Any  # decoding.Generation
    gamma: int
    temperature: float
    seconds: dict[str, float]
    rounds: int
    clock_name: str
    machine: str

    @property
    def tokens_per_call(self) -> float:
        """New tokens per target forward of the speculative run (autoregressive: exactly 1)."""
        return self.speculative.stats.tokens_per_target_call

    @property
    def identical(self) -> bool:
        """Whether both runs produced the same tokens: required when greedy (T = 0); at T > 0
        they share only their distribution, and the same seed does not make them equal."""
        return self.speculative.tokens.tolist() == self.autoregressive.tokens.tolist()

    @property
    def speedup(self) -> float:
        """Autoregressive seconds over speculative seconds, each the fastest of the rounds."""
        return self.seconds["autoregressive"] / self.seconds["speculative"]

    @property
    def lines(self) -> list[str]:
        s, a = self.speculative.stats, self.autoregressive.stats
        if self.temperature == 0:
            same = f"greedy, identical to the target's own greedy output: {self.identical}"
        else:
            same = (
                f"sampled at T = {self.temperature:g}: same tokens as autoregressive "
                f"{self.identical} (not required: the two share a distribution, not draws)"
            )
        t_spec, t_ar = self.seconds["speculative"], self.seconds["autoregressive"]
        return [
            f"{s.new_tokens} new tokens, γ = {self.gamma}; {same}",
            f"target calls: {s.target_calls} speculative vs {a.target_calls} autoregressive, "
            f"so {self.tokens_per_call:.2f} tokens per target call (autoregressive: 1)",
            f"measured on this machine ({self.machine}), {self.clock_name}, fastest of "
            f"{self.rounds} rounds: speculative {1e3 * t_spec:.0f} ms, autoregressive "
            f"{1e3 * t_ar:.0f} ms, speedup {self.speedup:.2f}x",
        ]

    def html(self) -> str:
        summary = "<br>".join(html.escape(line) for line in self.lines)
        return (
            f'{self.trace.html()}<div style="font-family:monospace; margin-top:6px">{summary}</div>'
        )

    _repr_html_ = html

    def __str__(self) -> str:
        return "\n".join([self.trace.plain(), "", *self.lines])

    __repr__ = __str__  # the text/plain fallback of a notebook


def first_look(
    pair: Any,
    prompt: str | Sequence[int] | Any,
    *,
    max_new_tokens: int = 48,
    gamma: int = 4,
    rounds: int = 3,
    temperature: float = 0.0,
    seed: int = 0,
    clock: Callable[[], float] | None = None,
) -> FirstLook:
    """One screen of speculative decoding on `pair` (`models.load_pair`): both methods decode
    `prompt` (text, or (L,) ids), greedy at the default `temperature=0` (where the outputs must be
    identical); after an untimed warm-up, `rounds` interleaved rounds time them on `clock`
    (default `time.perf_counter`)."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    clock = time.perf_counter if clock is None else clock
    ids = pair.encode(prompt) if isinstance(prompt, str) else torch.as_tensor(prompt)
    plan = {"prompt": ["speculative", None]}  # None: plain decoding
    runs, fastest = timing.timed_runs(
        pair, {"speculative": pair.draft}, {"prompt": [ids]}, plan, max_new_tokens, gamma,
        rounds, clock, temperature, seed, progress=False,
    )  # fmt: skip
    spec, plain = runs["prompt", "speculative"][0], runs["prompt", None][0]
    seconds = {
        "speculative": float(fastest["prompt", "speculative"][0]),
        "autoregressive": float(fastest["prompt", None][0]),
    }
    info = env.device_info(pair.device)
    where = info.get("gpu", info["cpu"])
    threads = info["torch_threads"]
    machine = f"{where}, {threads} thread{'s' if threads != 1 else ''}"
    shown = trace(
        spec.stats.steps,
        decode=lambda t: pair.decode([t]),
        prompt=prompt if isinstance(prompt, str) else pair.decode(ids.tolist()),
        sep="",
    )
    named = {"perf_counter": "wall clock", "process_time": "CPU time"}
    clock_name = getattr(clock, "__name__", "clock")
    clock_name = named.get(clock_name, clock_name)
    temperature = float(temperature)
    return FirstLook(shown, spec, plain, gamma, temperature, seconds, rounds, clock_name, machine)
