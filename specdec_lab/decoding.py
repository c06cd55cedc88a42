"""Autoregressive and speculative generation, for mock models and transformers causal LMs alike.

Notation of Leviathan et al. 2023 (arXiv:2211.17192): p = target, q = draft, γ = draft length.
One speculative step reads top to bottom in `speculative_step`:

    1. the draft proposes γ tokens and the distributions q it drew them from;
    2. the target scores all γ+1 positions in ONE forward pass, giving p;
    3. the rejection rule of `verify.rejection_sample` keeps the first n drafts and draws one
       more token (the residual sample at a rejection, or the bonus sample from p[γ]), run on
       the device by `engine.fused.verify_on_device`, whose host sync is the step's only one;
    4. both KV caches are rolled back to the accepted prefix.

`run_steps` is the loop every method shares (the chain here, any `drafters.Drafter`, token trees
in `specdec_lab.tree`): it calls a step until the token budget is spent and collects the
statistics (sessions and drafters count their own calls and seconds) that plots and benches read.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields

import torch

from specdec_lab import inputs
from specdec_lab.drafters import Drafter, ModelDrafter, as_drafter
from specdec_lab.engine.fused import StepVerifier, teaching_verifier, verify_on_device
from specdec_lab.engine.sessions import DEFAULT_RUNTIME, Session, open_session
from specdec_lab.sampling import SamplingConfig, generator_on, logits_to_probs, sample


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
            for f in fields(cls):  # lists concatenate, counters add up
                setattr(pooled, f.name, getattr(pooled, f.name) + getattr(s, f.name))
        return pooled

    @property
    def acceptance_rate(self) -> float:
        """Estimated α: drafts accepted over drafts the verifier examined (`trials`). A step
        examines its drafts up to and including the first rejection: keeping n < γ drafts is n
        successes and one failure, keeping all γ is γ successes. NaN when nothing was drafted."""
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


def autoregressive_generate(
    model,
    input_ids,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    vocab_size: int | None = None,
    runtime: str = DEFAULT_RUNTIME,
) -> Generation:
    """Plain decoding: one target forward per new token. The baseline speculation must beat.
    `eos_token_id`: one id or several (Llama-3 ships a list); the first ends the text. `runtime`:
    "lean" (our forward), "captured" (it, replayed as graphs), "hf" (transformers') or, by
    default, lean where it covers the model (captured on CUDA)."""
    cfg = SamplingConfig(temperature, top_k, top_p)
    eos = inputs.check_eos(eos_token_id)
    ids = inputs.check_prompt(input_ids)
    inputs.check_max_new_tokens(max_new_tokens)
    inputs.check_positions([model], ids.shape[0], max_new_tokens)  # before any forward
    inputs.check_vocab_size("model", model, vocab_size)
    target = open_session(model, vocab_size, runtime)
    inputs.check_token_ids(ids, target.vocab_size)
    start_call([target], ids.shape[0] + max_new_tokens)
    ids = ids.to(target.device)  # the sequence lives where the model does
    generator = generator_on(generator, target.device)
    stats = GenerationStats()
    start = time.perf_counter()
    prompt_len = ids.shape[0]
    invalid = torch.zeros((), dtype=torch.bool, device=ids.device)  # NaN scores, read once
    while ids.shape[0] - prompt_len < max_new_tokens:
        logits = target.logits(ids, last=1)[-1]  # (V,)
        if cfg.greedy:
            best, x = logits.max(-1)  # argmax's first-maximum rule; NaN if any score is
            invalid |= torch.isnan(best)
        else:
            probs = logits_to_probs(logits, cfg, check=False)  # (V,)
            invalid |= ~torch.isfinite(probs.sum())
            x = sample(probs, generator, check=False)
        ids = torch.cat([ids, x[None]])
        if eos and int(x) in eos:  # the one host sync per token, only when there is an EOS
            break
    if bool(invalid):  # one host sync per call, not per token
        raise ValueError("the model produced NaN or infinite scores")
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
    verifier: StepVerifier = verify_on_device,
) -> tuple[torch.Tensor, Step]:
    """One speculative step after the accepted sequence `ids` (L,). Returns (new ids, Step).
    Draft → one target forward → accept/reject → roll both caches back, all where the models
    are; the host learns the outcome in the verifier's ONE sync. The sessions count the calls."""
    # 1. Draft up to γ tokens, keeping the distributions q they were sampled from.
    draft_tokens, q_probs = drafter.propose(ids, gamma, cfg, generator)  # (γ',), (γ', V)
    g = draft_tokens.shape[0]  # a drafter may propose fewer (an n-gram table with no match)
    draft_tokens = draft_tokens.to(ids.device)
    # 2. One target forward over the γ'+1 positions that follow the accepted prefix.
    p_logits = target.logits(torch.cat([ids, draft_tokens]))[-(g + 1) :]  # (γ'+1, V)
    # 3. Accept a prefix of the drafts, then add one target token (residual or bonus sample).
    verdict = verifier(draft_tokens, q_probs, p_logits, cfg, generator)
    ids = torch.cat([ids, verdict.accepted, verdict.token[None]])
    # 4. Roll both caches back to what they have seen of the accepted sequence.
    target.crop(ids.shape[0] - 1)
    drafter.crop(ids.shape[0] - 1)
    drafter.update(verdict.drafted, verdict.n, verdict.next_token)  # no sync: host ints
    return ids, Step(verdict.drafted, verdict.n, verdict.next_token)


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
    verifier: Callable[..., tuple[int, torch.Tensor]] | None = None,
    runtime: str = DEFAULT_RUNTIME,
) -> Generation:
    """Speculative decoding (Leviathan et al. Algorithm 1) with KV-cache rollback.

    target, draft: mock models or transformers causal LMs sharing a vocabulary (`draft` may also
    be any drafter, `target` an open `Session`). input_ids: (L,) or (1, L). `temperature=0` is
    greedy decoding, whose output equals the target's own greedy output. `vocab_size` restricts
    both models to a shared vocabulary prefix (e.g. Qwen's padded embeddings). `on_step` sees
    every `Step`. `verifier`, `rule(draft_tokens, q_probs, p_probs, generator) -> (n, token)`,
    replaces the acceptance rule, run as written (`proof.broken`): for teaching only. The output
    is distributed exactly as autoregressive sampling from the target.
    """
    cfg = SamplingConfig(temperature, top_k, top_p)
    inputs.check_gamma(gamma)
    inputs.check_callable("verifier", verifier)
    if cfg.greedy and verifier is not None:
        raise ValueError("temperature=0 uses greedy verification; a custom verifier needs T > 0")
    inputs.check_positions([target, draft], inputs.check_prompt(input_ids).shape[0], max_new_tokens)
    inputs.check_vocab_size("target", target, vocab_size)
    inputs.check_vocab_size("draft", draft, vocab_size)
    p_model = open_session(target, vocab_size, runtime)
    if callable(getattr(draft, "propose", None)):
        drafter = as_drafter(draft)
    else:
        drafter = ModelDrafter(open_session(draft, vocab_size, runtime))
    inputs.check_same_vocab(p_model.vocab_size, drafter)
    verify_step = verify_on_device if verifier is None else teaching_verifier(verifier)
    generator = generator_on(generator, p_model.device)  # every draw where the models are

    def step(ids: torch.Tensor, g: int) -> tuple[torch.Tensor, Step]:
        return speculative_step(p_model, drafter, ids, g, cfg, generator, verify_step)

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
    """The loop every speculative method shares: call `step(ids, γ)` (-> extended ids, `Step`)
    with γ capped by the token budget, collect statistics, stop at `eos_token_id`."""
    eos = inputs.check_eos(eos_token_id)
    ids = inputs.check_prompt(input_ids)
    inputs.check_max_new_tokens(max_new_tokens)
    inputs.check_token_ids(ids, target.vocab_size)
    inputs.check_callable("on_step", on_step)
    # A step drafts at most max_new_tokens - 1 tokens, whatever γ is (γ = 10**7 reserved 123 GB).
    start_call([target, drafter], ids.shape[0] + max_new_tokens + min(gamma, max_new_tokens) + 1)
    ids = ids.to(target.device)  # the sequence lives where the target does
    calls_before = (target.calls, drafter.calls)
    seconds_before = (target.seconds, drafter.seconds)

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
    stats.draft_time = drafter.seconds - seconds_before[1]
    return _finish(ids[prompt_len:], stats, eos)


def start_call(parts: Sequence[Session | Drafter], positions: int) -> None:
    """What every generation call does first with the sessions and drafters it is handed:
    empty their caches (a session reused across calls, or left half-way by an interrupted
    one, starts afresh) and make room for the `positions` tokens the call holds at most."""
    for part in parts:
        part.crop(0)
        part.reserve(positions)


def _finish(new: torch.Tensor, stats: GenerationStats, eos: frozenset[int]) -> Generation:
    """Cut `new` after its first end-of-text token and count it. The tokens come back to the
    host, where the prompt came from: one copy per call."""
    new = new.cpu()
    ends = [i for i, x in enumerate(new.tolist()) if x in eos] if eos else []
    if ends:
        new = new[: ends[0] + 1]  # nothing after the end of text
    stats.new_tokens = new.shape[0]
    return Generation(tokens=new, stats=stats)


__all__ = [
    "Generation",
    "GenerationStats",
    "Step",
    "autoregressive_generate",
    "run_steps",
    "speculative_generate",
    "speculative_step",
]
