"""Drafters that are not a second model: prompt lookup (an n-gram table over the sequence itself).

Every drafter implements the `Drafter` protocol of `specdec_lab.decoding`:
`propose(ids, gamma, cfg, generator) -> (tokens (γ',), q_probs (γ', V))` with γ' ≤ γ, plus
`crop(length)` and a `calls` counter. A deterministic drafter reports **one-hot** q (the
distribution its tokens really come from): a draft x is then kept with probability p(x), and the
residual after a rejection is p with x removed, renormalised. The output law is unchanged.
"""

from __future__ import annotations

import time

import torch

from specdec_lab.sampling import SamplingConfig


class PromptLookupDrafter:
    """Prompt lookup decoding, with the matching rule of transformers'
    `PromptLookupCandidateGenerator` (5.x): try the longest n-gram first (n = `max_ngram`, ..., 1);
    among the earlier occurrences of the sequence's last n tokens take the **leftmost** one that
    has a continuation, and propose up to γ tokens that followed it.

    (Notebook 02's exercise drafter takes the *most recent* occurrence of one fixed n instead.)
    """

    def __init__(self, vocab_size: int, max_ngram: int = 3) -> None:
        if not isinstance(max_ngram, int) or max_ngram < 1:
            raise ValueError(f"max_ngram must be a positive integer, got {max_ngram!r}")
        self.vocab_size = vocab_size
        self.max_ngram = max_ngram
        self.calls = 0
        self.seconds = 0.0

    def propose(
        self,
        ids: torch.Tensor,
        gamma: int,
        cfg: SamplingConfig | None = None,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """ids (L,) -> tokens (γ',) copied from the sequence and one-hot q_probs (γ', V)."""
        t0 = time.perf_counter()
        self.calls += 1
        tokens = self.lookup(ids, gamma)  # (γ',)
        q_probs = torch.nn.functional.one_hot(tokens, self.vocab_size).float()  # (γ', V)
        self.seconds += time.perf_counter() - t0
        return tokens, q_probs

    def lookup(self, ids: torch.Tensor, gamma: int) -> torch.Tensor:
        """The continuation of the longest, leftmost earlier match of the sequence's tail."""
        length = ids.shape[0]
        if gamma > 0:
            for n in range(min(self.max_ngram, length - 1), 0, -1):  # longest n-gram first
                windows = ids.unfold(0, n, 1)  # (L - n + 1, n): every n-gram of the sequence
                starts = (windows == ids[length - n :]).all(-1).nonzero()[:, 0]  # ascending
                for start in starts.tolist():  # leftmost first; the tail itself has no follower
                    follow = ids[start + n : min(start + n + gamma, length)]  # (γ',)
                    if follow.numel():
                        return follow.clone()
        return torch.empty(0, dtype=torch.long)

    def crop(self, length: int) -> None:
        """Nothing to roll back: the table is the sequence itself, which the loop owns."""


__all__ = ["PromptLookupDrafter"]
