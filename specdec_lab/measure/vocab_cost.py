"""What the speculative loop itself costs per step as the vocabulary grows, with no model work.

Every registry pair has a 49k–152k vocabulary. The loop's own work (softmax, sampling, the
acceptance rule, input checks) is linear in V, and next to forwards of a few milliseconds it can
eat the speedup. Both "models" here are `TableLM`s, whose forward is free, so every millisecond
measured is the loop's: the figure reported is the extra cost per step at V = 151,936 (Qwen2.5's
padded vocabulary) over V = 4,096.

    python -m specdec_lab vocab-cost            # greedy, T = 1, T = 1 with top-p 0.9

Not counted: the session's own work on a real model (see `engine.sessions`) and the matrix
multiplies of the LM head, whose cost is the model's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from specdec_lab.decoding import speculative_generate
from specdec_lab.measure.timing import timer

SMALL_VOCAB, LARGE_VOCAB = 4_096, 151_936
# (temperature, top_p); the loop verifies with its one-sync, on-device rule in every setting
SETTINGS: dict[str, tuple[float, float | None]] = {
    "greedy": (0.0, None),
    "T=1": (1.0, None),
    "T=1 top-p 0.9": (1.0, 0.9),
}


@dataclass(frozen=True)
class TableLM:
    """A "model" whose next-token logits after position i are `table[i]`, whatever the tokens.
    table: (N, V); `logits(ids)` for ids (L,) is the view `table[:L]` (L, V): it costs nothing."""

    table: torch.Tensor

    @property
    def vocab_size(self) -> int:
        return self.table.shape[1]

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        if ids.shape[0] > self.table.shape[0]:
            raise ValueError(f"{ids.shape[0]} positions, but the table has {self.table.shape[0]}")
        return self.table[: ids.shape[0]]  # (L, V)


def table_pair(
    vocab_size: int,
    positions: int,
    seed: int = 0,
    device: torch.device | str = "cpu",
    spread: float = 2.0,
) -> tuple[TableLM, TableLM]:
    """(target, draft) TableLMs over `positions` rows: logits s·z and s·z + w, z and w standard
    normal, s = `spread`. s = 2 gives flat rows (at V = 151,936 top-p 0.9 keeps ~36k tokens, a
    worst case for top-p); s = 5 peaked ones (top probability 0.1–0.4), closer to a language
    model's."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(positions, vocab_size, generator=g)  # (N, V)
    w = torch.randn(positions, vocab_size, generator=g)  # (N, V)
    return TableLM((spread * z).to(device)), TableLM((spread * z + w).to(device))


@dataclass(frozen=True)
class LoopCost:
    """The fastest of `repeats` runs of one generation, and its step count: `seconds` on the wall
    clock, `cpu_seconds` in the process's CPU time, which on a shared CPU counts only this loop's
    work (on an accelerator it means nothing: read `seconds`, which is synchronised)."""

    vocab_size: int
    setting: str
    seconds: float
    cpu_seconds: float
    steps: int
    alpha: float

    @property
    def ms_per_step(self) -> float:
        return 1e3 * self.seconds / self.steps

    @property
    def cpu_ms_per_step(self) -> float:
        return 1e3 * self.cpu_seconds / self.steps


def time_loop(
    vocab_size: int,
    setting: str,
    new_tokens: int = 96,
    gamma: int = 4,
    repeats: int = 5,
    device: torch.device | str = "cpu",
    spread: float = 2.0,
) -> LoopCost:
    """Time `speculative_generate` over a `table_pair` (fastest of `repeats`, seeded alike),
    on the wall clock and on this process's CPU time, both through `timing.timer`."""
    temperature, top_p = SETTINGS[setting]
    sample = dict(temperature=temperature, top_p=top_p)
    prompt = torch.tensor([0, 1, 2, 3])
    positions = prompt.shape[0] + new_tokens + gamma + 1
    target, draft = table_pair(vocab_size, positions, device=device, spread=spread)
    wall, cpu, out = [], [], None
    for _ in range(repeats):
        generator = torch.Generator(device).manual_seed(0)
        with timer(device) as on_wall, timer(device, time.process_time) as on_cpu:
            out = speculative_generate(
                target, draft, prompt, new_tokens, gamma, generator=generator, **sample
            )
        wall.append(on_wall.seconds)
        cpu.append(on_cpu.seconds)
    stats = out.stats
    return LoopCost(
        vocab_size, setting, min(wall), min(cpu), len(stats.steps), stats.acceptance_rate
    )


def vocab_cost(
    new_tokens: int = 96,
    gamma: int = 4,
    repeats: int = 5,
    device: torch.device | str = "cpu",
    spread: float = 2.0,
) -> dict[str, tuple[LoopCost, LoopCost]]:
    """{setting: (timing at V = 4,096, timing at V = 151,936)} for every setting of `SETTINGS`."""
    return {
        s: tuple(
            time_loop(v, s, new_tokens, gamma, repeats, device, spread)
            for v in (SMALL_VOCAB, LARGE_VOCAB)
        )
        for s in SETTINGS
    }
