"""Incremental scoring of a growing sequence: one interface over mock models and transformers.

A `Session` remembers how many tokens of the sequence its model has already consumed (for a
transformers model: what sits in the KV cache). `logits(ids)` feeds only the new tail of `ids`,
in one forward, and `crop(n)` rolls the cache back after a rejection. The decoding loops in
`specdec_lab.decoding` own the sequence; sessions only keep their caches in step with it.
"""

from __future__ import annotations

from typing import Protocol

import torch


class Session(Protocol):
    """What the decoding loops need from a model."""

    vocab_size: int
    calls: int  # forward passes so far

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        """Next-token scores for the positions of `ids` (L,) not seen yet: (L - cached, V)."""
        ...

    def crop(self, length: int) -> None:
        """Forget everything after the first `length` tokens."""
        ...


class _SessionBase:
    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self.calls = 0
        self.cached = 0  # tokens of the sequence already consumed

    def _new_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        if ids.shape[0] <= self.cached:
            raise ValueError(f"nothing new to score: {ids.shape[0]} ids, {self.cached} cached")
        return ids[self.cached :]

    def crop(self, length: int) -> None:
        self.cached = min(self.cached, length)


class MockSession(_SessionBase):
    """Mock models are closed-form, so there is no cache: score the new positions directly."""

    def __init__(self, model, vocab_size: int | None = None) -> None:
        super().__init__(vocab_size or model.vocab_size)
        self.model = model

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        self._new_tokens(ids)
        self.calls += 1
        out = self.model.logits(ids)[self.cached :, : self.vocab_size]  # (L - cached, V)
        self.cached = ids.shape[0]
        return out


class HFSession(_SessionBase):
    """A transformers causal LM with a `DynamicCache` that can be rolled back."""

    def __init__(self, model, vocab_size: int | None = None) -> None:
        from transformers import DynamicCache

        super().__init__(vocab_size or model.config.vocab_size)
        self.model = model
        self.device = model.device
        self.cache = DynamicCache(config=model.config)

    @torch.inference_mode()
    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        new = self._new_tokens(ids).to(self.device)  # (k,)
        self.calls += 1
        # transformers 5.x: the cache goes in as `cache=` (`past_key_values` is deprecated).
        out = self.model(input_ids=new[None], cache=self.cache, use_cache=True)
        self.cached = ids.shape[0]
        # Verification runs on the CPU with the caller's CPU generator: one small copy per step.
        return out.logits[0, :, : self.vocab_size].float().cpu()  # (k, V)

    def crop(self, length: int) -> None:
        drop = self.cached - length
        if drop > 0:
            self.cache.crop(-drop)  # transformers 5.x: a negative count of tokens to remove
        super().crop(length)


def vocab_size_of(model) -> int:
    """The size of a model's output vocabulary (mock or transformers)."""
    if hasattr(model, "vocab_size") and not _is_hf(model):
        return int(model.vocab_size)
    if _is_hf(model):
        return int(model.get_output_embeddings().weight.shape[0])
    raise TypeError(
        f"expected a specdec_lab mock model or a transformers causal LM, got {type(model).__name__}"
    )


def open_session(model, vocab_size: int | None = None) -> Session:
    """Wrap `model` in the right session type. `vocab_size` restricts the scored vocabulary."""
    if _is_hf(model):
        return HFSession(model, vocab_size)
    if hasattr(model, "logits") and hasattr(model, "vocab_size"):
        return MockSession(model, vocab_size)
    raise TypeError(
        f"expected a specdec_lab mock model or a transformers causal LM, got {type(model).__name__}"
    )


def _is_hf(model) -> bool:
    return isinstance(model, torch.nn.Module) and hasattr(model, "config")
