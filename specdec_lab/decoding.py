"""Autoregressive and speculative generation, for mock models and transformers causal LMs alike.

Notation of Leviathan et al. 2023 (arXiv:2211.17192): p = target, q = draft, γ = draft length.
One speculative step reads top to bottom in `speculative_generate`:

    1. the draft proposes γ tokens and the distributions q it drew them from;
    2. the target scores all γ+1 positions in ONE forward pass, giving p;
    3. `verify.rejection_sample` keeps the first n drafts and draws one more token
       (the residual sample at a rejection, or the bonus sample from p[γ]);
    4. both KV caches are rolled back to the accepted prefix.

Both functions return the new tokens together with the statistics that plots and benchmarks read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch

from specdec_lab.lm import Session, open_session
from specdec_lab.sampling import SamplingConfig, logits_to_probs, sample
from specdec_lab.verify import greedy_verify, rejection_sample


@dataclass(frozen=True)
class Step:
    """One speculative step: what the draft proposed and what the target kept."""

    draft_tokens: list[int]
    n_accepted: int
    next_token: int

    @property
    def bonus(self) -> bool:
        """True when every draft was accepted, so `next_token` is the bonus sample from p[γ]."""
        return self.n_accepted == len(self.draft_tokens)


@dataclass
class GenerationStats:
    """Counters of one generation call. `accepted[i]` is the number of drafts kept at step i."""

    accepted: list[int] = field(default_factory=list)
    gammas: list[int] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    target_calls: int = 0
    draft_calls: int = 0
    new_tokens: int = 0
    wall_time: float = 0.0
    draft_time: float = 0.0  # seconds inside the drafter (its forwards and sampling)
    target_time: float = 0.0  # seconds inside target forwards

    @classmethod
    def merge(cls, runs: list[GenerationStats]) -> GenerationStats:
        """Pool the counters of several runs (e.g. one per prompt) into one."""
        pooled = cls()
        for s in runs:
            pooled.accepted += s.accepted
            pooled.gammas += s.gammas
            pooled.steps += s.steps
            pooled.target_calls += s.target_calls
            pooled.draft_calls += s.draft_calls
            pooled.new_tokens += s.new_tokens
            pooled.wall_time += s.wall_time
            pooled.draft_time += s.draft_time
            pooled.target_time += s.target_time
        return pooled

    @property
    def acceptance_rate(self) -> float:
        """Estimated α: drafts accepted over drafts the verifier actually examined.

        A step examines its drafts up to and including the first rejection, so a step that keeps
        n < γ drafts is n successes and one failure; a step that keeps all γ is γ successes.
        NaN when nothing was drafted (autoregressive decoding).
        """
        return sum(self.accepted) / self.trials if self.trials else float("nan")

    @property
    def trials(self) -> int:
        """Drafts the verifier examined: n + 1 at a step that rejected, γ at one that did not."""
        return sum(n + (n < g) for n, g in zip(self.accepted, self.gammas, strict=True))

    @property
    def mean_accepted(self) -> float:
        """Mean number of drafts kept per step."""
        return sum(self.accepted) / len(self.accepted) if self.accepted else float("nan")

    @property
    def tokens_per_target_call(self) -> float:
        return self.new_tokens / self.target_calls if self.target_calls else float("nan")

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.wall_time if self.wall_time > 0 else float("nan")


@dataclass
class Generation:
    """The result of a generation call: `.tokens` (new tokens only, 1-D LongTensor) and `.stats`."""

    tokens: torch.Tensor
    stats: GenerationStats


class Drafter(Protocol):
    """Anything that proposes draft tokens: a small model, a mock, an n-gram table."""

    calls: int

    def propose(
        self, ids: torch.Tensor, gamma: int, cfg: SamplingConfig, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Draft up to `gamma` tokens after `ids` (L,): tokens (γ',) and their q_probs (γ', V).

        q_probs must be the distributions the tokens were drawn from (one-hot for a
        deterministic drafter such as an n-gram table). Proposing fewer than `gamma` is allowed.
        """
        ...

    def crop(self, length: int) -> None:
        """The sequence was cut back to `length` tokens: forget anything drafted beyond it."""
        ...


class ModelDrafter:
    """A draft model, run autoregressively for γ tokens on top of its own KV cache."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.vocab_size = session.vocab_size

    @property
    def calls(self) -> int:
        return self.session.calls

    def propose(
        self, ids: torch.Tensor, gamma: int, cfg: SamplingConfig, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        tokens, q_probs = [], []
        for _ in range(gamma):
            logits = self.session.logits(ids)[-1]  # (V,)
            if cfg.greedy:  # q is one-hot at the argmax: skip processing on the hot path
                x = logits.argmax()
            else:
                q = logits_to_probs(logits, cfg.temperature, cfg.top_k, cfg.top_p)  # (V,)
                x = sample(q, generator)
                q_probs.append(q)
            tokens.append(x)
            ids = torch.cat([ids, x[None]])
        if not tokens:
            return torch.empty(0, dtype=torch.long), torch.empty(0, self.vocab_size)
        tokens = torch.stack(tokens)  # (γ,)
        if cfg.greedy:
            return tokens, torch.nn.functional.one_hot(tokens, self.vocab_size).float()
        return tokens, torch.stack(q_probs)  # (γ,), (γ, V)

    def crop(self, length: int) -> None:
        self.session.crop(length)


def autoregressive_generate(
    model,
    input_ids,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    *,
    eos_token_id: int | None = None,
    vocab_size: int | None = None,
) -> Generation:
    """Plain decoding: one target forward per new token. The baseline speculation must beat."""
    cfg = SamplingConfig(temperature, top_k, top_p)
    ids = _check_prompt(input_ids)
    _check_max_new_tokens(max_new_tokens)
    target = open_session(model, vocab_size)
    stats = GenerationStats()
    start = time.perf_counter()
    prompt_len = ids.shape[0]
    while ids.shape[0] - prompt_len < max_new_tokens:
        t0 = time.perf_counter()
        logits = target.logits(ids)[-1]  # (V,)
        stats.target_time += time.perf_counter() - t0
        if cfg.greedy:
            x = logits.argmax()
        else:
            x = sample(logits_to_probs(logits, temperature, top_k, top_p), generator)
        ids = torch.cat([ids, x[None]])
        if eos_token_id is not None and int(x) == eos_token_id:
            break
    stats.wall_time = time.perf_counter() - start
    stats.target_calls = target.calls
    return _finish(ids[prompt_len:], stats)


def speculative_generate(
    target,
    draft,
    input_ids,
    max_new_tokens: int,
    gamma: int = 4,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    *,
    eos_token_id: int | None = None,
    vocab_size: int | None = None,
    on_step: Callable[[Step], None] | None = None,
    verifier: Callable[..., tuple[int, torch.Tensor]] = rejection_sample,
) -> Generation:
    """Speculative decoding (Leviathan et al. Algorithm 1) with KV-cache rollback.

    target, draft: mock models or transformers causal LMs sharing a vocabulary (`draft` may also
    be any `Drafter`). input_ids: (L,) or (1, L). `temperature=0` is greedy decoding, whose output
    equals the target's own greedy output. `vocab_size` restricts both models to a shared
    vocabulary prefix (e.g. Qwen's padded embeddings). `on_step` sees every `Step` as it happens.
    `verifier` swaps the acceptance rule, for teaching only (see `specdec_lab.broken`).
    The output is distributed exactly as autoregressive sampling from the target.
    """
    cfg = SamplingConfig(temperature, top_k, top_p)
    ids = _check_prompt(input_ids)
    _check_max_new_tokens(max_new_tokens)
    if not isinstance(gamma, int) or gamma < 1:
        raise ValueError(f"gamma (draft length) must be a positive integer, got {gamma!r}")
    if cfg.greedy and verifier is not rejection_sample:
        raise ValueError("temperature=0 uses greedy verification; a custom verifier needs T > 0")
    p_model = open_session(target, vocab_size)
    drafter = draft if hasattr(draft, "propose") else ModelDrafter(open_session(draft, vocab_size))
    _check_same_vocab(p_model.vocab_size, drafter, vocab_size)
    drafter.crop(0)  # a drafter object may be reused across calls: start from an empty cache
    draft_calls_before = drafter.calls

    stats = GenerationStats()
    start = time.perf_counter()
    prompt_len = ids.shape[0]
    while (remaining := max_new_tokens - (ids.shape[0] - prompt_len)) > 0:
        g = min(gamma, remaining - 1)  # drafting past the token budget is wasted work

        # 1. Draft g tokens, keeping the distributions q they were sampled from.
        t0 = time.perf_counter()
        draft_tokens, q_probs = drafter.propose(ids, g, cfg, generator)  # (g,), (g, V)
        g = draft_tokens.shape[0]  # a drafter may propose fewer (an n-gram table with no match)
        # 2. One target forward over the g+1 positions that follow the accepted prefix.
        t1 = time.perf_counter()
        p_logits = p_model.logits(torch.cat([ids, draft_tokens]))[-(g + 1) :]  # (g+1, V)
        stats.draft_time += t1 - t0
        stats.target_time += time.perf_counter() - t1
        # 3. Accept a prefix of the drafts, then add one target token.
        if cfg.greedy:
            n, next_token = greedy_verify(draft_tokens, p_logits)
        else:
            p_probs = logits_to_probs(p_logits, temperature, top_k, top_p)  # (g+1, V)
            n, next_token = verifier(draft_tokens, q_probs, p_probs, generator)
        ids = torch.cat([ids, draft_tokens[:n], next_token[None]])
        # 4. Roll both caches back to what they have seen of the accepted sequence.
        p_model.crop(ids.shape[0] - 1)
        drafter.crop(ids.shape[0] - 1)

        step = Step(draft_tokens.tolist(), n, int(next_token))
        stats.steps.append(step)
        stats.accepted.append(n)
        stats.gammas.append(g)
        if on_step is not None:
            on_step(step)
        if eos_token_id is not None and eos_token_id in ids[-(n + 1) :].tolist():
            break
    stats.wall_time = time.perf_counter() - start
    stats.target_calls = p_model.calls
    stats.draft_calls = drafter.calls - draft_calls_before
    return _finish(ids[prompt_len:], stats, eos_token_id)


def _finish(
    new: torch.Tensor, stats: GenerationStats, eos_token_id: int | None = None
) -> Generation:
    if eos_token_id is not None and eos_token_id in new.tolist():
        new = new[: new.tolist().index(eos_token_id) + 1]  # nothing after the end of text
    stats.new_tokens = new.shape[0]
    return Generation(tokens=new, stats=stats)


def _check_prompt(input_ids) -> torch.Tensor:
    """Accept (L,) or (1, L) ids (tensor or list); return a 1-D LongTensor on the CPU."""
    ids = input_ids if isinstance(input_ids, torch.Tensor) else torch.as_tensor(input_ids)
    if ids.dim() == 2:
        if ids.shape[0] != 1:
            raise ValueError(
                f"batch size {ids.shape[0]} is not supported: speculative decoding here runs one "
                "sequence at a time, pass input_ids of shape (L,) or (1, L)"
            )
        ids = ids[0]
    if ids.dim() != 1:
        raise ValueError(f"input_ids must have shape (L,) or (1, L), got {tuple(ids.shape)}")
    if ids.numel() == 0:
        raise ValueError("the prompt is empty: give at least one token (e.g. a BOS token)")
    if ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise TypeError(f"input_ids must be integer token ids, got dtype {ids.dtype}")
    return ids.long().cpu()


def _check_max_new_tokens(max_new_tokens: int) -> None:
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")


def _check_same_vocab(target_vocab: int, drafter, vocab_size: int | None) -> None:
    draft_vocab = getattr(drafter, "vocab_size", None)
    if draft_vocab is not None and draft_vocab != target_vocab:
        raise ValueError(
            f"vocabulary sizes differ: target has {target_vocab} tokens, draft has {draft_vocab}. "
            "Draft and target must share a tokenizer; if one only pads its embedding matrix, "
            "pass vocab_size=<shared size> to restrict both to the shared vocabulary."
        )
    if vocab_size is not None and vocab_size > target_vocab:
        raise ValueError(f"vocab_size={vocab_size} exceeds the target's {target_vocab} tokens")


__all__ = [
    "Drafter",
    "Generation",
    "GenerationStats",
    "ModelDrafter",
    "Step",
    "autoregressive_generate",
    "speculative_generate",
]
