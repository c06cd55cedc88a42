"""The on-device verifier: the acceptance rule where the probabilities are, with ONE host sync.

`verify.rejection_sample` is the rule as the course teaches it, with Python branches. On an
accelerator each branch on a device value is a host sync, which stalls the host until the device
has finished every queued kernel. `rejection_sample_on_device` is its twin with no branch: the
same uniforms in the same order give the same tokens (tested draw for draw). `verify_on_device`
brings the outcome, the drafts and the input checks (`value_flags`) to the host in the step's one
sync; `teaching_verifier` wraps any other rule (`proof.broken`) in the same interface. The token
tree's verifier (`specdec_lab.tree`) returns the same `Verdict`, from the same checks.

Notation of Leviathan et al. 2023 (arXiv:2211.17192): p = target, q = draft, γ = draft length.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch

from specdec_lab.sampling import (
    SamplingConfig,
    cdf_dtype,
    inverse_cdf,
    logits_to_probs,
    rand,
    uniforms,
)


@dataclass(frozen=True)
class Verdict:
    """The outcome of one verification, a chain's or a token tree's, on the host: keep the drafts
    of `path`, then append `next_token`. `drafted`: the tokens of the branch verified (a tree's:
    the path, then first-drawn children to a leaf). On the device: `accepted` (n,), the drafts
    kept, and the 0-d `token`, so the sequence grows there."""

    path: list[int]  # the drafts kept: 0 .. n-1 in a chain, tree nodes from the root down
    next_token: int
    drafted: list[int]
    accepted: torch.Tensor
    token: torch.Tensor

    @property
    def n(self) -> int:  # drafts kept
        return len(self.path)


class DeviceOutcome(NamedTuple):
    """A verification on the device, before the one host read: where acceptance stops, the
    token drawn there, and the (4,) `value_flags`. A chain: `stop` is n and `token` the next
    token, both 0-d. A tree: per level, (W,) the child each node accepts (k if none), and one
    token per row (1 + N,)."""

    stop: torch.Tensor | list[torch.Tensor]
    token: torch.Tensor
    flags: torch.Tensor


# What `decoding.speculative_step` calls: (draft_tokens (γ,), q_probs (γ, V), the target's raw
# p_logits (γ+1, V), cfg, generator) -> Verdict. A token tree's verifier: `tree.TreeVerifier`.
StepVerifier = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, SamplingConfig, torch.Generator | None], Verdict
]


def verify_on_device(
    draft_tokens: torch.Tensor,
    q_probs: torch.Tensor,
    p_logits: torch.Tensor,
    cfg: SamplingConfig,
    generator: torch.Generator | None = None,
) -> Verdict:
    """One step's verification on the tensors' device, read by ONE host sync. Greedy: accept
    while the drafts equal the target's argmax; else p is processed as q was (temperature,
    top-k, top-p). Raises ValueError, after the sync, for NaN or invalid inputs."""
    gamma, device = draft_tokens.shape[0], p_logits.device
    if cfg.greedy:
        out = _greedy_verify_on_device(draft_tokens, p_logits)
    else:
        p_probs = logits_to_probs(p_logits, cfg, check=False)  # (γ+1, V)
        q_probs = q_probs.to(p_probs.device)  # (γ, V)
        n, token = rejection_sample_on_device(draft_tokens, q_probs, p_probs, generator)
        out = DeviceOutcome(n, token, value_flags(draft_tokens, q_probs, p_probs))
    drafts = draft_tokens.to(device)  # (γ,)
    outcome = torch.cat([out.stop[None], out.token[None], drafts, out.flags.to(device)])
    n, token, *rest = outcome.tolist()  # THE host sync of the step
    raise_for(rest[gamma:], draft_tokens, p_logits.shape[-1])
    return Verdict(list(range(n)), token, rest[:gamma], drafts[:n], out.token)


def teaching_verifier(rule: Callable[..., tuple[int, torch.Tensor]]) -> StepVerifier:
    """Wrap a reference rule `rule(draft_tokens, q_probs, p_probs, generator) -> (n, token)`
    (`verify.rejection_sample`, or a broken one) as a `StepVerifier`. It runs as written, with
    its own host syncs: for teaching and for the tests of the tests, not for speed."""

    def verifier(draft_tokens, q_probs, p_logits, cfg, generator=None) -> Verdict:
        p_probs = logits_to_probs(p_logits, cfg)  # (γ+1, V)
        n, token = rule(draft_tokens, q_probs.to(p_probs.device), p_probs, generator)
        n, token = int(n), torch.as_tensor(token, device=p_logits.device)
        return Verdict(list(range(n)), int(token), draft_tokens.tolist(), draft_tokens[:n], token)

    return verifier


def value_flags(
    draft_tokens: torch.Tensor,
    q_probs: torch.Tensor,
    p_probs: torch.Tensor,
    alive: torch.Tensor | None = None,
) -> torch.Tensor:
    """Every value check of one verification as four flags, (4,) bool on the device, with no
    host sync: q_probs bad (NaN, inf or negative), p_probs bad, a draft token outside [0, V),
    a draft token of zero draft probability. Draft i came from q_probs[i]: (γ,) and (γ, V) in
    a chain, (N,) and (N, V) for a tree, whose empty slots (`alive` False) skip the last check.
    One pass per tensor (`aminmax`: NaN makes both ends NaN, which fails both comparisons)."""
    device, vocab = p_probs.device, p_probs.shape[1]

    def bad(probs: torch.Tensor) -> torch.Tensor:
        if probs.numel() == 0:
            return torch.zeros((), dtype=torch.bool, device=device)
        lo, hi = torch.aminmax(probs)
        return ~((lo >= 0) & (hi < math.inf))

    x = draft_tokens.to(device)  # (γ,)
    outside = (x < 0) | (x >= vocab)  # (γ,)
    q_x = q_probs[torch.arange(x.shape[0], device=device), x.clamp(0, vocab - 1)]  # (γ,)
    zero = q_x <= 0 if alive is None else alive & (q_x <= 0)  # (γ,)
    return torch.stack([bad(q_probs), bad(p_probs), outside.any(), zero.any()])


def greedy_flags(best: torch.Tensor) -> torch.Tensor:
    """`value_flags` of a greedy verification, which reads only the target's scores: (4,) bool,
    only p's flag can be set, where `best` (the maxima of its rows) holds a NaN."""
    no = torch.zeros((), dtype=torch.bool, device=best.device)
    return torch.stack([no, torch.isnan(best).any(), no, no])


def raise_for(flags: list, draft_tokens: torch.Tensor, vocab: int) -> None:
    """Turn the flags of `value_flags`, read on the host, into the error they stand for (if any)."""
    q_bad, p_bad, outside, q_zero = map(bool, flags)
    if q_bad:
        raise ValueError("q_probs contains NaN, inf or negative probabilities")
    if p_bad:
        raise ValueError("p_probs contains NaN, inf or negative probabilities")
    if outside:
        raise ValueError(f"draft_tokens must lie in [0, {vocab}), got {draft_tokens.tolist()}")
    if q_zero:
        raise ValueError("a draft token has q(x) = 0: q_probs is not the distribution it came from")


def rejection_sample_on_device(
    draft_tokens: torch.Tensor,
    q_probs: torch.Tensor,
    p_probs: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The acceptance rule with no host sync and no checks: (n, next_token), both 0-d tensors
    on the device (shapes as in `verify.rejection_sample`). No Python branch: the first rejection
    n is an argmax, and the next token is drawn from one row computed for whichever n it is:
    norm(max(0, p[n] − q[n])) if n < γ, else the bonus p[γ]."""
    gamma = draft_tokens.shape[0]
    device, vocab = p_probs.device, p_probs.shape[1]
    x = draft_tokens.to(device).clamp(0, vocab - 1)  # (γ,) clamped: the fused check reports it
    # All randomness up front, in rejection_sample's order: γ coins, then the next token's uniform.
    coins = rand(gamma, generator=generator, device=device)  # (γ,)
    u = uniforms(1, generator, device)  # (1, 1)
    idx = torch.arange(gamma, device=device)
    accept = coins * q_probs[idx, x] < p_probs[idx, x]  # (γ,) u < p(x)/q(x), as first_rejection
    stop = torch.cat([~accept, accept.new_ones(1)])  # (γ+1,) a rejection, or the end
    n = stop.to(torch.uint8).argmax()  # 0-d: the first rejection, γ if none (first maximum)
    # index_select, not p_probs[n]: indexing with a 0-d tensor reads it on the host (a sync).
    row = n[None]  # (1,)
    p_n = p_probs.index_select(0, row)[0]  # (V,)
    if gamma:
        q_n = q_probs.index_select(0, row.clamp_max(gamma - 1))[0]  # (V,)
        drafted = (n < gamma).to(p_n.dtype)  # 0-d: 0 at the bonus row, which has no q
        residual = p_n.addcmul(q_n, drafted, value=-1).clamp_min_(0)  # (V,) max(0, p − q)
    else:
        residual = p_n.clamp_min(0)
    mass = residual.sum()
    # residual_distribution's guard: no residual mass (p == q) means sampling from p: add p·1.
    weights = residual.addcmul_(p_n, (mass <= 0).to(p_n.dtype))  # (V,)
    # Normalise as rejection_sample does (the same token from the same uniform); not the bonus.
    weights = weights / torch.where(n == gamma, 1.0, torch.where(mass > 0, mass, p_n.sum()))
    token = inverse_cdf(weights[None].cumsum(-1, dtype=cdf_dtype(device)), u)[0]  # 0-d
    return n, token


def _greedy_verify_on_device(draft_tokens: torch.Tensor, p_logits: torch.Tensor) -> DeviceOutcome:
    """Greedy verification with no host sync: accept drafts while they equal the target's argmax.
    draft_tokens (γ,), p_logits (γ+1, V); n and the next token are 0-d."""
    best, target_choice = p_logits.max(-1)  # (γ+1,) each: argmax's first-maximum rule
    matches = draft_tokens.to(p_logits.device) == target_choice[:-1]  # (γ,)
    stop = torch.cat([~matches, matches.new_ones(1)])  # (γ+1,) a mismatch, or the end
    n = stop.to(torch.uint8).argmax()  # 0-d: the first mismatch, γ if none
    next_token = target_choice.index_select(0, n[None])[0]  # 0-d, no sync (see above)
    return DeviceOutcome(n, next_token, greedy_flags(best))
