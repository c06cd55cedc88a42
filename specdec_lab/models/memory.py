"""The memory guard: will a model fit on this device, before it is loaded? `check_fits` refuses,
in one sentence, what `model_bytes` estimates will not fit; `fit_ladder` trims a ladder of shapes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import AutoModelForCausalLM

from specdec_lab import env
from specdec_lab.models.errors import InsufficientMemoryError

CONTEXT_TOKENS = 2048
"""Positions of KV cache the memory guard budgets for (prompt + new tokens of one sequence)."""

HEADROOM = 1.15
"""The guard asks for 15% more than its estimate: allocator slack, activations, CUDA workspaces."""


def model_bytes(
    config, dtype: torch.dtype, context_tokens: int = CONTEXT_TOKENS, params: int | None = None
) -> int:
    """Estimated bytes of a model on a device: parameters × bytes per element + the KV cache of
    `context_tokens` positions (2 × layers × kv heads × head dim × positions × bytes).
    `params` skips counting them when the caller knows the number."""
    if params is None:  # built on the meta device (no memory); tied embeddings count once
        with torch.device("meta"):
            params = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
    nbytes = torch.finfo(dtype).bits // 8
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    kv = 2 * config.num_hidden_layers * kv_heads * head_dim * context_tokens * nbytes
    return params * nbytes + kv


def check_fits(needed: int, device: torch.device | str, what: str, free: int | None = None) -> None:
    """Raise InsufficientMemoryError when `needed` bytes (× HEADROOM) exceed the free memory of
    `device` (`free`, or `env.free_memory`). Unknown free memory passes."""
    free = env.free_memory(device) if free is None else free
    if free is not None and needed * HEADROOM > free:
        raise InsufficientMemoryError(
            f"{what} needs about {needed / 2**30:.2f} GiB (+{HEADROOM - 1:.0%} headroom) but "
            f"{free / 2**30:.2f} GiB are free on {device}"
        )


def fit_ladder(
    names: Sequence[str],
    shapes: dict,
    device: torch.device | str,
    dtype: torch.dtype,
    *,
    context_tokens: int = 512,
    free: int | None = None,
) -> list[str]:
    """The models of a ladder (`names`, smallest first, looked up in `shapes`, e.g.
    `profiling.LADDER`) that fit on `device` next to the smallest one, which stays loaded as the
    draft. Prints one sentence when it drops any; raises if not even the smallest fits."""
    free = env.free_memory(device) if free is None else free
    size = {
        n: model_bytes(shapes[n].config(), dtype, context_tokens, shapes[n].params) for n in names
    }
    first = names[0]
    check_fits(size[first], device, f"the smallest ladder model {first}", free)
    kept = [n for n in names if n == first or size[first] + size[n] <= free / HEADROOM]
    dropped = [n for n in names if n not in kept]
    if dropped:
        print(
            f"memory guard: {', '.join(dropped)} would not fit in {free / 2**30:.1f} GiB free on "
            f"{device} in {str(dtype).removeprefix('torch.')}; the ladder stops at {kept[-1]}."
        )
    return kept


def is_out_of_memory(err: BaseException) -> bool:
    """True for CUDA's `torch.OutOfMemoryError` and the RuntimeError other backends raise."""
    return isinstance(err, torch.OutOfMemoryError) or "out of memory" in str(err).lower()
