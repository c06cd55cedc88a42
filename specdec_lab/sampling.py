"""Turning logits into the distributions that tokens are actually drawn from.

The one rule of this module: the probabilities a caller hands to the verifier must be the
*processed* distribution the token was sampled from (temperature, top-k and top-p applied).
Reporting the raw distribution while sampling from the processed one inflates acceptance and
breaks exactness (this was HF transformers issue #47932).

All functions take an optional `torch.Generator` and never draw from the global RNG.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingConfig:
    """How logits become a distribution. `temperature=0` means greedy (a one-hot argmax)."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        t = self.temperature
        if not isinstance(t, (int, float)) or math.isnan(t) or t < 0:
            raise ValueError(f"temperature must be a number >= 0 (0 means greedy), got {t!r}")
        if self.top_k is not None and (not isinstance(self.top_k, int) or self.top_k < 1):
            raise ValueError(f"top_k must be a positive integer or None, got {self.top_k!r}")
        if self.top_p is not None and not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must lie in (0, 1], got {self.top_p!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def _check_logits(logits: torch.Tensor) -> None:
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"logits must be a torch.Tensor, got {type(logits).__name__}")
    if logits.dim() < 1 or logits.shape[-1] == 0:
        raise ValueError(
            f"logits must have a non-empty last (vocabulary) axis, got {tuple(logits.shape)}"
        )
    if torch.isnan(logits).any():
        raise ValueError("logits contain NaN; the model produced invalid scores")


def logits_to_probs(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> torch.Tensor:
    """Processed next-token distribution(s).

    logits: (..., V) raw scores. Returns float32 probabilities of the same shape, each row summing
    to 1. Order of processing: temperature, then top-k, then top-p (as in HF `generate`).
    `temperature=0` returns the one-hot argmax, which makes greedy decoding a special case of
    sampling (and makes the acceptance rule reduce to "accept iff the draft token is the argmax").
    """
    cfg = SamplingConfig(temperature, top_k, top_p)
    _check_logits(logits)
    logits = logits.float()
    if cfg.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    logits = logits / cfg.temperature
    if cfg.top_k is not None and cfg.top_k < logits.shape[-1]:
        kth = torch.topk(logits, cfg.top_k, dim=-1).values[..., -1:]  # (..., 1)
        logits = logits.masked_fill(logits < kth, -math.inf)
    if cfg.top_p is not None and cfg.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        sorted_probs = sorted_logits.softmax(-1)
        # Drop a token when the mass strictly before it already reaches top_p; the first token
        # always survives, so the kept set is the smallest prefix with mass >= top_p.
        mass_before = sorted_probs.cumsum(-1) - sorted_probs
        drop_sorted = mass_before >= cfg.top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, -math.inf)
    return logits.softmax(-1)


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token per row. probs: (V,) or (N, V). Returns a LongTensor of shape () or (N,)."""
    if probs.dim() == 1:
        return torch.multinomial(probs, 1, generator=generator)[0]
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """The argmax token(s). logits: (..., V) -> (...)."""
    return logits.argmax(-1)


def draft_token(
    logits: torch.Tensor, cfg: SamplingConfig, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One drafted token from (V,) logits: `(x, q)`, with q the processed (V,) distribution it
    was drawn from, or None when greedy (q is then one-hot at x: no processing on the hot path)."""
    if cfg.greedy:
        return logits.argmax(), None
    q = logits_to_probs(logits, cfg.temperature, cfg.top_k, cfg.top_p)  # (V,)
    return sample(q, generator), q
