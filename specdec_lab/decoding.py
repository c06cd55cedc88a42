"""Autoregressive and speculative generation, for mock models and transformers causal LMs alike.

Notation of Leviathan et al. 2023 (arXiv:2211.17192): p = target, q = draft, γ = draft length.
One speculative step reads top to bottom in `speculative_step`:

    1. the draft proposes γ tokens and the distributions q it drew them from;
    2. the target scores all γ+1 positions in ONE forward pass, giving p;
    3. `verify.rejection_sample` keeps the first n drafts and draws one more token
       (the residual sample at a rejection, or the bonus sample from p[γ]);
    4. both KV caches are rolled back to the accepted prefix.

`run_steps` is the loop every method shares (the chain here, adaptive drafters through the
`Drafter` protocol, token trees in `specdec_lab.tree`): it calls a step until the token budget
is spent and collects statistics; sessions and drafters count their own calls and seconds.
Every function returns the new tokens together with the statistics that plots and benchmarks
read.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from specdec_lab.drafters import one_hot
from specdec_lab.lm import Session, open_session, vocab_size_of
from specdec_lab.models import check_positions
from specdec_lab.sampling import SamplingConfig, draft_token, greedy, logits_to_probs, sample
from specdec_lab.verify import (
    _bad_values,
    _raise_for,
    greedy_verify_on_device,
    rejection_sample,
    rejection_sample_on_device,
)


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
    draft_time: float = 0.0  # seconds inside the drafter (NaN if it does not count them)
    target_time: float = 0.0  # seconds inside target forwards (counted by the session)

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
    """Anything that proposes draft tokens: a small model, a mock, an n-gram table.

    Optional extras the loop uses when present: `seconds` (time spent drafting, for the
    statistics) and `update(step)` (called with each step's outcome, for adaptive drafters).
    """

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
    """A draft model, run autoregressively for γ tokens on top of its own KV cache.

    `confidence_threshold` is transformers' `assistant_confidence_threshold`: stop drafting
    early, after a token to which the draft gave probability below the threshold (at T = 0, the
    draft's top probability). The stop depends only on the draft's own proposals, so the output
    law is unchanged; it only trades target work for draft work.
    """

    def __init__(self, session: Session, confidence_threshold: float | None = None) -> None:
        if confidence_threshold is not None and not 0.0 <= confidence_threshold <= 1.0:
            raise ValueError(f"confidence_threshold must lie in [0, 1], got {confidence_threshold}")
        self.session = session
        self.vocab_size = session.vocab_size
        self.confidence_threshold = confidence_threshold
        self.seconds = 0.0  # wall time inside `propose`: forwards and sampling

    @property
    def calls(self) -> int:
        return self.session.calls

    def propose(
        self, ids: torch.Tensor, gamma: int, cfg: SamplingConfig, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        t0 = time.perf_counter()
        tokens, q_probs = [], []
        for _ in range(gamma):
            logits = self.session.logits(ids, last=1)[-1]  # (V,) on the model's device
            # No NaN check here (a host sync per token): the verifier's fused check reads q.
            x, q = draft_token(logits, cfg, generator, check=False)  # q None when greedy
            if q is not None:
                q_probs.append(q)
            tokens.append(x)
            ids = torch.cat([ids, x[None]])
            if self.confidence_threshold is not None:
                confidence = logits.softmax(-1)[x] if cfg.greedy else q[x]
                if confidence < self.confidence_threshold:
                    break
        self.seconds += time.perf_counter() - t0
        if not tokens:
            empty = torch.empty(0, dtype=torch.long, device=ids.device)
            return empty, torch.empty(0, self.vocab_size, device=ids.device)
        tokens = torch.stack(tokens)  # (γ',)
        if cfg.greedy:  # one-hot q, which greedy verification never reads
            return tokens, one_hot(tokens, self.vocab_size)
        return tokens, torch.stack(q_probs)  # (γ',), (γ', V)

    def crop(self, length: int) -> None:
        self.session.crop(length)


class HeuristicGamma:
    """transformers' `num_assistant_tokens_schedule="heuristic"`, wrapped around any drafter.

    After each step: "When all speculative tokens are correct, increase `num_assistant_tokens` by
    2 else reduce by 1" (transformers 5.x `GenerationConfig` docs), never below 1. The draft
    length of `speculative_generate` is then a cap. The schedule reads only past outcomes, so the
    output law is unchanged.

    Departure from transformers, on purpose: a step that drafted nothing (the last step capped by
    the token budget, a prompt-lookup miss) leaves γ unchanged. transformers 5.x counts it as
    "all correct" (0 of 0 accepted) and adds 2, so γ ratchets up on steps that show nothing
    about the draft.
    """

    def __init__(self, drafter: Drafter, initial: int = 4) -> None:
        if not isinstance(initial, int) or initial < 1:
            raise ValueError(f"initial draft length must be a positive integer, got {initial!r}")
        self.drafter, self.initial, self.gamma = drafter, initial, initial
        self.vocab_size = getattr(drafter, "vocab_size", None)

    @property
    def calls(self) -> int:
        return self.drafter.calls

    @property
    def seconds(self) -> float:
        return getattr(self.drafter, "seconds", float("nan"))

    def propose(self, ids, gamma, cfg, generator):
        return self.drafter.propose(ids, min(gamma, self.gamma), cfg, generator)

    def update(self, step: Step) -> None:
        """Called by `speculative_step` with the outcome of the step this drafter drafted for."""
        if not step.draft_tokens:
            return  # nothing drafted, nothing learned (transformers would add 2 here)
        self.gamma = self.gamma + 2 if step.bonus else max(1, self.gamma - 1)

    def crop(self, length: int) -> None:
        self.drafter.crop(length)  # like transformers' "heuristic", γ persists across calls


def autoregressive_generate(
    model,
    input_ids,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    *,
    eos_token_id: int | Sequence[int] | None = None,
    vocab_size: int | None = None,
    runtime: str = "auto",
) -> Generation:
    """Plain decoding: one target forward per new token. The baseline speculation must beat.

    `eos_token_id`: one id or several (Llama-3 and Qwen2.5-Instruct ship a list); generation
    stops after the first of them.

    `runtime` picks how a transformers model runs (`lm.open_session`): "auto" (our lean forward
    where it covers the family, else transformers'), "lean" or "hf".
    """
    cfg = SamplingConfig(temperature, top_k, top_p)
    eos = _check_eos(eos_token_id)
    ids = _check_prompt(input_ids)
    _check_max_new_tokens(max_new_tokens)
    check_positions([model], ids.shape[0], max_new_tokens)  # before any forward
    _check_vocab_size("model", model, vocab_size)
    target = open_session(model, vocab_size, runtime)
    _reserve(target, ids.shape[0] + max_new_tokens)
    ids = ids.to(_device_of(target))  # the sequence lives where the model does
    stats = GenerationStats()
    start = time.perf_counter()
    prompt_len = ids.shape[0]
    while ids.shape[0] - prompt_len < max_new_tokens:
        logits = target.logits(ids, last=1)[-1]  # (V,)
        if cfg.greedy:
            x = greedy(logits)
        else:
            x = sample(logits_to_probs(logits, temperature, top_k, top_p), generator)
        ids = torch.cat([ids, x[None]])
        if eos and int(x) in eos:  # the one host sync per token, only when there is an EOS
            break
    stats.wall_time = time.perf_counter() - start
    stats.target_calls, stats.target_time = target.calls, target.seconds
    return _finish(ids[prompt_len:], stats, eos)


def speculative_step(
    target: Session,
    drafter: Drafter,
    ids: torch.Tensor,
    gamma: int,
    cfg: SamplingConfig,
    generator: torch.Generator | None = None,
    verifier: Callable[..., tuple[int, torch.Tensor]] = rejection_sample,
) -> tuple[torch.Tensor, Step]:
    """One speculative step after the accepted sequence `ids` (L,). Returns (new ids, Step).

    Draft → one target forward → accept/reject → roll both caches back. No timing, no counters:
    the sessions and drafters count their own calls and seconds. Everything runs where the
    models are; the host learns the outcome in ONE sync per step (step 3's `.tolist()`).
    """
    # 1. Draft up to γ tokens, keeping the distributions q they were sampled from.
    draft_tokens, q_probs = drafter.propose(ids, gamma, cfg, generator)  # (γ',), (γ', V)
    g = draft_tokens.shape[0]  # a drafter may propose fewer (an n-gram table with no match)
    draft_tokens = draft_tokens.to(ids.device)
    # 2. One target forward over the γ'+1 positions that follow the accepted prefix.
    p_logits = target.logits(torch.cat([ids, draft_tokens]))[-(g + 1) :]  # (γ'+1, V)
    # 3. Accept a prefix of the drafts, then add one target token: n, the token and the input
    #    checks stay on the device until one `.tolist()` brings them to the host together.
    #    `verify.rejection_sample` (the rule the notebooks teach) is computed by its on-device
    #    twin, which makes the same draws; any other verifier runs as given (teaching only).
    if cfg.greedy:
        n, next_token, nan = greedy_verify_on_device(draft_tokens, p_logits)
        no = nan.new_zeros(())
        flags = torch.stack([no, nan, no, no])  # `_bad_values`' slots: only p can be bad here
    else:
        p_probs = logits_to_probs(p_logits, cfg.temperature, cfg.top_k, cfg.top_p, check=False)
        q_probs = q_probs.to(p_probs.device)  # (γ', V)
        if verifier is rejection_sample:
            n, next_token = rejection_sample_on_device(draft_tokens, q_probs, p_probs, generator)
            flags = _bad_values(draft_tokens, q_probs, p_probs)  # (4,)
        else:
            n, next_token = verifier(draft_tokens, q_probs, p_probs, generator)
            n, flags = torch.tensor(n, device=ids.device), torch.zeros(4, dtype=torch.bool)
    outcome = torch.cat([n[None], next_token[None], draft_tokens, flags.to(ids.device)])
    n, token, *rest = outcome.tolist()  # THE host sync of this step
    drafted, flags = rest[:g], rest[g:]
    if any(flags):
        _raise_for(flags, draft_tokens, p_logits.shape[-1])
    ids = torch.cat([ids, draft_tokens[:n], next_token[None]])
    # 4. Roll both caches back to what they have seen of the accepted sequence.
    target.crop(ids.shape[0] - 1)
    drafter.crop(ids.shape[0] - 1)
    step = Step(drafted, n, token)
    if hasattr(drafter, "update"):  # adaptive drafters learn from the outcome (HeuristicGamma)
        drafter.update(step)
    return ids, step


def speculative_generate(
    target,
    draft,
    input_ids,
    max_new_tokens: int,
    gamma: int = 4,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    vocab_size: int | None = None,
    on_step: Callable[[Step], None] | None = None,
    verifier: Callable[..., tuple[int, torch.Tensor]] = rejection_sample,
    runtime: str = "auto",
) -> Generation:
    """Speculative decoding (Leviathan et al. Algorithm 1) with KV-cache rollback.

    target, draft: mock models or transformers causal LMs sharing a vocabulary (`draft` may also
    be any `Drafter`, `target` an open `Session`). input_ids: (L,) or (1, L). `temperature=0` is
    greedy decoding, whose output equals the target's own greedy output. `vocab_size` restricts
    both models to a shared vocabulary prefix (e.g. Qwen's padded embeddings). `on_step` sees
    every `Step` as it happens. `verifier` swaps the acceptance rule, for teaching only (see
    `specdec_lab.broken`). `runtime` picks how transformers models run (see
    `autoregressive_generate`). The output is distributed exactly as autoregressive sampling from
    the target.
    """
    cfg = SamplingConfig(temperature, top_k, top_p)
    _check_gamma(gamma)
    if cfg.greedy and verifier is not rejection_sample:
        raise ValueError("temperature=0 uses greedy verification; a custom verifier needs T > 0")
    check_positions([target, draft], _check_prompt(input_ids).shape[0], max_new_tokens)
    _check_vocab_size("target", target, vocab_size)
    _check_vocab_size("draft", draft, vocab_size)
    p_model = open_session(target, vocab_size, runtime)
    drafter = (
        draft
        if hasattr(draft, "propose")
        else ModelDrafter(open_session(draft, vocab_size, runtime))
    )
    _check_same_vocab(p_model.vocab_size, drafter)

    def step(ids: torch.Tensor, g: int) -> tuple[torch.Tensor, Step]:
        return speculative_step(p_model, drafter, ids, g, cfg, generator, verifier)

    return run_steps(
        p_model, drafter, step, input_ids, max_new_tokens, gamma, eos_token_id, on_step
    )


def run_steps(
    target: Session,
    drafter: Drafter,
    step: Callable[[torch.Tensor, int], tuple[torch.Tensor, Step]],
    input_ids,
    max_new_tokens: int,
    gamma: int,
    eos_token_id: int | Sequence[int] | None = None,
    on_step: Callable[[Step], None] | None = None,
) -> Generation:
    """The loop every speculative method shares: call `step(ids, γ)` until the budget is spent.

    `step` returns the extended sequence and its `Step`; the loop caps γ by the token budget,
    collects statistics, reads the timing counters of the session and the drafter, and stops at
    `eos_token_id` (one id or several: the first of them ends the text).
    """
    eos = _check_eos(eos_token_id)
    ids = _check_prompt(input_ids)
    _check_max_new_tokens(max_new_tokens)
    target.crop(0)  # sessions and drafters may be reused across calls: start from empty caches
    drafter.crop(0)
    for session in (target, getattr(drafter, "session", drafter)):  # room for the whole call
        _reserve(session, ids.shape[0] + max_new_tokens + gamma + 1)
    ids = ids.to(_device_of(target))  # the sequence lives where the target does
    calls_before = (target.calls, drafter.calls)
    seconds_before = (target.seconds, getattr(drafter, "seconds", float("nan")))

    stats = GenerationStats()
    start = time.perf_counter()
    prompt_len = ids.shape[0]
    while (remaining := max_new_tokens - (ids.shape[0] - prompt_len)) > 0:
        # Drafting past the token budget is wasted work: at most remaining - 1 drafts.
        ids, s = step(ids, min(gamma, remaining - 1))
        stats.steps.append(s)
        stats.accepted.append(s.n_accepted)
        stats.gammas.append(len(s.draft_tokens))
        if on_step is not None:
            on_step(s)
        if eos and not eos.isdisjoint([*s.draft_tokens[: s.n_accepted], s.next_token]):
            break
    stats.wall_time = time.perf_counter() - start
    stats.target_calls = target.calls - calls_before[0]
    stats.draft_calls = drafter.calls - calls_before[1]
    stats.target_time = target.seconds - seconds_before[0]
    stats.draft_time = getattr(drafter, "seconds", float("nan")) - seconds_before[1]
    return _finish(ids[prompt_len:], stats, eos)


def _finish(
    new: torch.Tensor,
    stats: GenerationStats,
    eos_token_id: int | Sequence[int] | None = None,
) -> Generation:
    """Cut `new` after its first end-of-text token (any of `eos_token_id`) and count it."""
    eos = _check_eos(eos_token_id)
    ends = [i for i, x in enumerate(new.tolist()) if x in eos] if eos else []
    if ends:
        new = new[: ends[0] + 1]  # nothing after the end of text
    stats.new_tokens = new.shape[0]
    return Generation(tokens=new, stats=stats)


def _device_of(session) -> torch.device:
    """Where a session's model computes (mock sessions: the CPU)."""
    return torch.device(getattr(session, "device", "cpu"))


def _reserve(session, positions: int) -> None:
    """Preallocate a lean session's KV cache for a whole call (other sessions grow as they go)."""
    if hasattr(session, "reserve"):
        session.reserve(positions)


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


def _check_eos(eos_token_id: int | Sequence[int] | None) -> frozenset[int]:
    """The end-of-text ids as a set: None -> empty, one id -> {id}, a list or tuple -> its ids.

    `generation_config.eos_token_id` is often a list (Llama-3, Qwen2.5-Instruct): comparing a
    token with the list itself would silently never stop.
    """
    if eos_token_id is None:
        return frozenset()
    ids = (eos_token_id,) if isinstance(eos_token_id, int) else eos_token_id
    if not isinstance(ids, (list, tuple, set, frozenset)) or not all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids
    ):
        raise ValueError(
            "eos_token_id must be a non-negative int, a list or tuple of them, or "
            f"None; got {eos_token_id!r}"
        )
    return frozenset(ids)


def _check_gamma(gamma: int) -> None:
    if not isinstance(gamma, int) or gamma < 1:
        raise ValueError(f"gamma (draft length) must be a positive integer, got {gamma!r}")


def _check_max_new_tokens(max_new_tokens: int) -> None:
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")


def _check_vocab_size(who: str, model, vocab_size: int | None) -> None:
    """`vocab_size` may narrow a model's logits to a shared prefix, never widen them.

    An open session or a drafter already carries its own vocab_size: a different one is refused
    rather than silently ignored.
    """
    if vocab_size is None:
        return
    if hasattr(model, "propose") or hasattr(model, "crop"):  # a drafter or an open session
        own = getattr(model, "vocab_size", None)
        if own is not None and own != vocab_size:
            raise ValueError(
                f"vocab_size={vocab_size}, but the {who} ({type(model).__name__}) is already open "
                f"with vocab_size={own}: open it with vocab_size={vocab_size}, or drop the argument"
            )
        return
    if vocab_size > (width := vocab_size_of(model)):
        raise ValueError(f"vocab_size={vocab_size} exceeds the {who}'s {width} output logits")


def _check_same_vocab(target_vocab: int, drafter) -> None:
    draft_vocab = getattr(drafter, "vocab_size", None)
    if draft_vocab is not None and draft_vocab != target_vocab:
        raise ValueError(
            f"vocabulary sizes differ: target has {target_vocab} tokens, draft has {draft_vocab}. "
            "Draft and target must share a tokenizer; if one only pads its embedding matrix, "
            "pass vocab_size=<shared size> to restrict both to the shared vocabulary."
        )


__all__ = [
    "Drafter",
    "Generation",
    "GenerationStats",
    "HeuristicGamma",
    "ModelDrafter",
    "Step",
    "autoregressive_generate",
    "run_steps",
    "speculative_generate",
    "speculative_step",
]
