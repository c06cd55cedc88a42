"""Mock language models whose next-token distributions are known in closed form.

They exist so that every claim of the course can be checked exactly before real models appear.
A `MockLM` scores the next token from the last *two* tokens,

    logits(x_t | x_<t) = sharpness · (A[x_{t-1}] + B[x_{t-2}]),

so, unlike notebook 01's toy `SeedMockLM` (whose distribution depends on the last token
only), a cache of one token is not enough. `logits(ids)` scores every position of a sequence in one
call, which is what "one parallel target forward over γ+1 positions" means.

A draft is a mixture q = λ·p + (1 − λ)·r of the target and an unrelated mock r. The knob λ is the
draft quality: Σ_x min(p, q) ≥ λ, so the acceptance rate α is at least λ.
"""

from __future__ import annotations

import torch


class MockLM:
    """A second-order Markov "language model" over `vocab_size` tokens.

    Deterministic given `seed`; it owns its parameters and never touches the global RNG.
    """

    def __init__(self, vocab_size: int = 8, sharpness: float = 2.0, seed: int = 0) -> None:
        if not isinstance(vocab_size, int) or vocab_size < 2:
            raise ValueError(f"vocab_size must be an integer >= 2, got {vocab_size!r}")
        g = torch.Generator().manual_seed(seed)
        self.vocab_size = vocab_size
        self.sharpness = sharpness
        self.seed = seed
        # Row V of each table is the "no token yet" state used at the start of a sequence.
        self.A = torch.randn(vocab_size + 1, vocab_size, generator=g)  # (V+1, V)
        self.B = torch.randn(vocab_size + 1, vocab_size, generator=g)  # (V+1, V)

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        """Next-token scores after every prefix, in one call: ids (L,) -> (L, V), row i scoring
        x_{i+1} given ids[: i + 1]."""
        ids = _check_ids(ids, self.vocab_size)
        start = torch.tensor([self.vocab_size])
        prev1 = ids  # (L,) the last token of each prefix
        prev2 = torch.cat([start, ids[:-1]])  # (L,) the one before it
        return self.sharpness * (self.A[prev1] + self.B[prev2])  # (L, V)

    def probs(self, ids: torch.Tensor) -> torch.Tensor:
        """softmax(logits): (L,) -> (L, V)."""
        return self.logits(ids).softmax(-1)

    def __repr__(self) -> str:
        return f"MockLM(vocab_size={self.vocab_size}, sharpness={self.sharpness}, seed={self.seed})"


class MockDraft:
    """q = λ·p + (1 − λ)·r: the target mixed with an unrelated mock model r; `quality` is λ."""

    def __init__(self, target: MockLM, quality: float = 0.8, seed: int = 1) -> None:
        if not 0.0 <= quality <= 1.0:
            raise ValueError(f"quality must lie in [0, 1], got {quality!r}")
        self.target = target
        self.quality = quality
        self.noise = MockLM(target.vocab_size, target.sharpness, seed=seed)
        self.vocab_size = target.vocab_size

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        """log q after every prefix: (L,) -> (L, V). Log-probabilities are valid logits."""
        q = self.quality * self.target.probs(ids) + (1 - self.quality) * self.noise.probs(ids)
        return q.log()

    def probs(self, ids: torch.Tensor) -> torch.Tensor:
        return self.logits(ids).softmax(-1)

    def __repr__(self) -> str:
        return f"MockDraft(quality={self.quality}, target={self.target!r})"


def _check_ids(ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    ids = torch.as_tensor(ids)
    if ids.dim() != 1:
        raise ValueError(f"mock models take a 1-D sequence (L,), got shape {tuple(ids.shape)}")
    if ids.numel() and (ids.min() < 0 or ids.max() >= vocab_size):
        raise ValueError(f"token ids must lie in [0, {vocab_size})")
    return ids.long()
