"""Drafters: whatever proposes the γ tokens the target verifies, behind one small protocol.

Notation of Leviathan et al. 2023 (arXiv:2211.17192): p = target, q = draft, γ = draft length.

Every drafter is a `Drafter`: `propose(ids, gamma, cfg, generator) -> (tokens (γ',), q_probs
(γ', V))` with γ' ≤ γ, where q_probs are the distributions the tokens were really drawn from,
plus `crop`, `reserve`, `update` and the `calls` / `seconds` counters the statistics read.

- `ModelDrafter`: a small model, run autoregressively on top of its own KV cache;
- `HeuristicGamma`: transformers' adaptive draft length, around any drafter (a `Wrapper`);
- `PromptLookupDrafter`: an n-gram table over the sequence itself (no model);
- `LookupThenModel`: prompt lookup first, the draft model when it finds nothing.

A deterministic drafter reports **one-hot** q: a draft x is then kept with probability p(x), and
the residual after a rejection is p with x removed, renormalised. The output law is unchanged.
`as_drafter` completes any object with a `propose` (a learner's own drafter) to the protocol.
"""

from __future__ import annotations

import time

import torch

from specdec_lab import env, inputs
from specdec_lab.engine.sessions import Session
from specdec_lab.sampling import SamplingConfig, draft_token


class Drafter:
    """The protocol every drafter implements. `vocab_size`: the width of its q rows (None: not
    known); `calls`: its model's forwards (or proposals); `seconds`: the time spent drafting."""

    vocab_size: int | None = None
    calls: int = 0
    seconds: float = 0.0

    def propose(
        self, ids: torch.Tensor, gamma: int, cfg: SamplingConfig, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Draft up to `gamma` tokens after `ids` (L,): tokens (γ',) and their q_probs (γ', V)."""
        raise NotImplementedError

    def crop(self, length: int) -> None:
        """The sequence was cut back to `length` tokens: forget anything drafted beyond it."""

    def reserve(self, positions: int) -> None:
        """A call will hold at most `positions` tokens: preallocate a cache if there is one."""

    def update(self, drafted: list[int], accepted: int, token: int) -> None:
        """The outcome of the step it drafted for, as host ints from the verifier's one sync:
        adaptive drafters learn from it, host mirrors of the sequence extend with it."""


class _Completed(Drafter):
    """An object with `propose` (maybe `crop`, `calls`, `seconds`, `vocab_size`) as a Drafter."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.vocab_size = getattr(inner, "vocab_size", None)

    @property
    def calls(self) -> int:
        return getattr(self.inner, "calls", 0)

    @property
    def seconds(self) -> float:
        return getattr(self.inner, "seconds", float("nan"))  # NaN: it does not count them

    def propose(self, ids, gamma, cfg, generator):
        return self.inner.propose(ids, gamma, cfg, generator)

    def crop(self, length: int) -> None:
        if hasattr(self.inner, "crop"):
            self.inner.crop(length)


class Wrapper(Drafter):
    """A drafter around another one (`self.drafter`), which it delegates everything to; a
    subclass changes what it proposes."""

    def __init__(self, drafter) -> None:
        self.drafter = as_drafter(drafter)
        self.vocab_size = self.drafter.vocab_size

    @property
    def calls(self) -> int:
        return self.drafter.calls

    @property
    def seconds(self) -> float:
        return self.drafter.seconds

    def propose(self, ids, gamma, cfg, generator):
        return self.drafter.propose(ids, gamma, cfg, generator)

    def crop(self, length: int) -> None:
        self.drafter.crop(length)

    def update(self, drafted: list[int], accepted: int, token: int) -> None:
        self.drafter.update(drafted, accepted, token)

    def reserve(self, positions: int) -> None:
        self.drafter.reserve(positions)


def as_drafter(obj) -> Drafter:
    """`obj` as a `Drafter`: a Drafter as it is, any other object with `propose` completed."""
    if isinstance(obj, Drafter):
        return obj
    if not callable(getattr(obj, "propose", None)):
        raise TypeError(
            f"a drafter needs a propose(ids, gamma, cfg, generator) method; got {type(obj).__name__}"
        )
    return _Completed(obj)


class ModelDrafter(Drafter):
    """A draft model, run autoregressively for γ tokens on top of its own KV cache.

    `confidence_threshold` is transformers' `assistant_confidence_threshold`: stop drafting
    after a token the draft gave probability below it (at T = 0, its top probability). The stop
    reads only the draft's own proposals, so the output law is unchanged. Host syncs: none
    without a threshold; with one, the host must see each confidence before it decides on the
    next forward: a step that drafts γ' of γ ≥ 1 tokens makes min(γ', γ − 1) syncs here
    (drafting all γ and truncating after one read would waste draft forwards).
    """

    def __init__(self, session: Session, confidence_threshold: float | None = None) -> None:
        if confidence_threshold is not None and not 0.0 <= confidence_threshold <= 1.0:
            raise ValueError(f"confidence_threshold must lie in [0, 1], got {confidence_threshold}")
        self.session = session
        self.vocab_size = session.vocab_size
        self.confidence_threshold = confidence_threshold
        self.clock = env.RegionTimer(session.device)  # inside `propose`: forwards and sampling

    @property
    def calls(self) -> int:
        return self.session.calls

    @property
    def seconds(self) -> float:
        return self.clock.seconds

    def propose(
        self, ids: torch.Tensor, gamma: int, cfg: SamplingConfig, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        t0 = self.clock.start()
        tokens, q_probs = [], []
        for i in range(gamma):
            logits = self.session.logits(ids, last=1)[-1]  # (V,) on the model's device
            # No NaN check here (a host sync per token): the verifier's fused check reads q.
            x, q = draft_token(logits, cfg, generator, check=False)
            q_probs.append(q)  # None when greedy: stack_proposal never reads it
            tokens.append(x)
            ids = torch.cat([ids, x[None]])
            if self.confidence_threshold is not None and i < gamma - 1:
                probs = logits.softmax(-1) if cfg.greedy else q  # (V,)
                confidence = probs.index_select(0, x[None])[0]  # not probs[x]: that reads x
                if confidence < self.confidence_threshold:  # THE host sync of this token
                    break
        self.clock.stop(t0)
        return stack_proposal(tokens, q_probs, self.vocab_size, ids.device, cfg.greedy)

    def crop(self, length: int) -> None:
        self.session.crop(length)

    def reserve(self, positions: int) -> None:
        self.session.reserve(positions)


class HeuristicGamma(Wrapper):
    """transformers' `num_assistant_tokens_schedule="heuristic"`, wrapped around any drafter.
    After each step: "When all speculative tokens are correct, increase `num_assistant_tokens` by
    2 else reduce by 1" (transformers 5.x `GenerationConfig` docs), never below 1; the loop's γ
    is then a cap. Departure from transformers, on purpose: a step that drafted nothing leaves γ
    unchanged (transformers counts 0 of 0 as "all correct" and adds 2).
    """

    def __init__(self, drafter: Drafter, initial: int = 4) -> None:
        if not inputs.is_count(initial):
            raise ValueError(f"initial draft length must be a positive integer, got {initial!r}")
        super().__init__(drafter)
        # Like transformers' "heuristic", γ persists across calls (crop keeps it).
        self.initial = self.gamma = initial

    def propose(self, ids, gamma, cfg, generator):
        return self.drafter.propose(ids, min(gamma, self.gamma), cfg, generator)

    def update(self, drafted: list[int], accepted: int, token: int) -> None:
        super().update(drafted, accepted, token)
        if not drafted:
            return  # nothing drafted, nothing learned (transformers would add 2 here)
        self.gamma = self.gamma + 2 if accepted == len(drafted) else max(1, self.gamma - 1)


class HostMirror:
    """The sequence, on the host, for drafters that read tokens: `read(ids)` copies the tail it
    has not seen (one host sync, on the prompt), `extend` appends each step's outcome (no sync)."""

    def __init__(self) -> None:
        self.tokens = torch.empty(0, dtype=torch.long)

    def extend(self, tokens: list[int]) -> None:
        if self.tokens.numel():  # empty until a read: nothing to mirror on the CPU
            self.tokens = torch.cat([self.tokens, torch.tensor(tokens, dtype=torch.long)])

    def read(self, ids: torch.Tensor) -> torch.Tensor:
        if ids.device.type == "cpu":
            return ids
        known = min(self.tokens.shape[0], ids.shape[0])
        if ids.shape[0] > known:
            self.tokens = torch.cat([self.tokens[:known], ids[known:].cpu()])  # THE host sync
        return self.tokens[: ids.shape[0]]

    def crop(self, length: int) -> None:
        self.tokens = self.tokens[:length]


class PromptLookupDrafter(Drafter):
    """Prompt lookup decoding, with the matching rule of transformers'
    `PromptLookupCandidateGenerator` (5.x): try the longest n-gram first (n = `max_ngram`, ..., 1);
    among the earlier occurrences of the sequence's last n tokens take the **leftmost** one that
    has a continuation, and propose up to γ tokens that followed it (notebook 02, Exercise 2.2).
    It reads a `HostMirror`: a step makes the verifier's sync and no other."""

    def __init__(self, vocab_size: int, max_ngram: int = 3) -> None:
        if not inputs.is_count(max_ngram):
            raise ValueError(f"max_ngram must be a positive integer, got {max_ngram!r}")
        self.vocab_size = vocab_size
        self.max_ngram = max_ngram
        self.calls = 0
        self.seconds = 0.0
        self.mirror = HostMirror()

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
        tokens = self.lookup_on_host(ids, gamma)  # (γ',) on ids' device
        q_probs = one_hot(tokens, self.vocab_size)  # (γ', V)
        self.seconds += time.perf_counter() - t0
        return tokens, q_probs

    def lookup_on_host(self, ids: torch.Tensor, gamma: int, min_ngram: int = 1) -> torch.Tensor:
        """`lookup` on the host mirror of `ids`, delivered on ids' device without blocking."""
        found = self.lookup(self.mirror.read(ids), gamma, min_ngram)  # (γ',) on the host
        return found.to(ids.device, non_blocking=True)

    def crop(self, length: int) -> None:
        self.mirror.crop(length)

    def update(self, drafted: list[int], accepted: int, token: int) -> None:
        self.mirror.extend([*drafted[:accepted], token])  # what the step appended

    def lookup(self, ids: torch.Tensor, gamma: int, min_ngram: int = 1) -> torch.Tensor:
        """The continuation of the longest, leftmost earlier match of the sequence's tail
        (n-grams of `min_ngram` tokens at least). On `ids`' device: on an accelerator each
        n tried costs a host sync (`propose` runs it on a host mirror instead)."""
        length = ids.shape[0]
        if gamma > 0:
            for n in range(min(self.max_ngram, length - 1), min_ngram - 1, -1):  # longest first
                windows = ids.unfold(0, n, 1)  # (L - n + 1, n): every n-gram of the sequence
                starts = (windows == ids[length - n :]).all(-1).nonzero()[:, 0]  # ascending
                for start in starts.tolist():  # leftmost first; the tail itself has no follower
                    follow = ids[start + n : min(start + n + gamma, length)]  # (γ',)
                    if follow.numel():
                        return follow.clone()
        return torch.empty(0, dtype=torch.long)


def transformers_lookup(ids: list[int], gamma: int, max_ngram: int) -> list[int]:
    """What transformers' own prompt lookup (`PromptLookupCandidateGenerator`) proposes after
    `ids`: the reference `PromptLookupDrafter` and exercise 2.2 are checked against."""
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    theirs = PromptLookupCandidateGenerator(
        num_output_tokens=gamma, max_matching_ngram_size=max_ngram, max_length=10**6
    )
    candidates, _ = theirs.get_candidates(torch.tensor([ids]))  # (1, L + γ')
    return candidates[0, len(ids) :].tolist()


class LookupThenModel(Wrapper):
    """Prompt lookup first, a draft model when it finds nothing: a step whose last `min_ngram`+
    tokens occurred earlier in the sequence copies what followed them (one-hot q, no forward).
    Lookup pays off when the text repeats itself (code, a target that loops). Host syncs: none
    of its own per step."""

    def __init__(self, model, lookup: PromptLookupDrafter | None = None, min_ngram: int = 2):
        super().__init__(model)  # a ModelDrafter (or any Drafter)
        self.lookup = lookup or PromptLookupDrafter(self.vocab_size)
        self.min_ngram = min_ngram
        self.copied = 0  # steps drafted by lookup

    @property
    def seconds(self) -> float:
        return self.lookup.seconds + self.drafter.seconds

    def propose(self, ids, gamma, cfg, generator):
        t0 = time.perf_counter()
        copy = self.lookup.lookup_on_host(ids, gamma, self.min_ngram)  # (γ',) on ids' device
        self.lookup.seconds += time.perf_counter() - t0
        if copy.numel():
            self.copied += 1
            return copy, one_hot(copy, self.vocab_size)
        return self.drafter.propose(ids, gamma, cfg, generator)

    def crop(self, length: int) -> None:
        self.lookup.crop(length)
        self.drafter.crop(length)

    def update(self, drafted: list[int], accepted: int, token: int) -> None:
        self.lookup.update(drafted, accepted, token)
        self.drafter.update(drafted, accepted, token)


def one_hot(tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """The point-mass distributions of deterministic drafts: tokens (γ,) -> float32 (γ, V),
    written into zeros (`F.one_hot(...).float()` would build an int64 (γ, V) first)."""
    q = torch.zeros(tokens.shape[0], vocab_size, device=tokens.device)  # (γ, V)
    return q.scatter_(1, tokens[:, None], 1.0)


def stack_proposal(
    tokens: list[torch.Tensor],
    q_probs: list[torch.Tensor],
    vocab_size: int,
    device: torch.device,
    greedy: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A model drafter's γ' drafted tokens (0-d each) and their q rows as `propose` returns them:
    (γ',) and (γ', V). Greedy drafts report one-hot q, which greedy verification never reads."""
    if not tokens:
        empty = torch.empty(0, dtype=torch.long, device=device)
        return empty, torch.empty(0, vocab_size, device=device)
    stacked = torch.stack(tokens)  # (γ',)
    return stacked, one_hot(stacked, vocab_size) if greedy else torch.stack(q_probs)


__all__ = [
    "Drafter",
    "HeuristicGamma",
    "HostMirror",
    "LookupThenModel",
    "ModelDrafter",
    "PromptLookupDrafter",
    "as_drafter",
    "one_hot",
    "stack_proposal",
    "transformers_lookup",
]
