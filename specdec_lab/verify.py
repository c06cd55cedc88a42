"""Verification: the acceptance rule of speculative sampling, as pure functions of probabilities.

Notation of Leviathan, Kalman & Matias 2023, "Fast Inference from Transformers via Speculative
Decoding", arXiv:2211.17192, Algorithm 1: **p is the target** distribution, **q is the draft**.

A draft token x ~ q is accepted with probability min(1, p(x)/q(x)). On the first rejection the
replacement is drawn from the residual norm(max(0, p - q)). If all γ drafts are accepted, a bonus
token is drawn from the target's next distribution p[γ]. The output is then distributed exactly
as p; `one_step_law` computes that law in closed form so the tests can check it without sampling.
Nothing here touches a model.

`rejection_sample` is the readable reference the notebooks teach. The decoding loop runs its
on-device twin, `engine.fused.verify_on_device`, which makes the same draws with one host sync.
"""

from __future__ import annotations

import torch

from specdec_lab.engine.fused import raise_for, value_flags
from specdec_lab.sampling import rand, sample


def _check_shape(name: str, probs: torch.Tensor, rows: int | None = None) -> None:
    if not isinstance(probs, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(probs).__name__}")
    if probs.dim() != 2:
        raise ValueError(f"{name} must have shape (rows, V), got {tuple(probs.shape)}")
    if rows is not None and probs.shape[0] != rows:
        raise ValueError(f"{name} must have {rows} rows, got shape {tuple(probs.shape)}")


def _check_shapes(draft_tokens: torch.Tensor, q_probs: torch.Tensor, p_probs: torch.Tensor) -> int:
    """Validate shapes (no pass over the data): draft_tokens (γ,), q_probs (γ, V),
    p_probs (γ+1, V). Returns γ."""
    if not isinstance(draft_tokens, torch.Tensor):
        raise TypeError(f"draft_tokens must be a torch.Tensor, got {type(draft_tokens).__name__}")
    if draft_tokens.dim() != 1:
        raise ValueError(
            f"draft_tokens must be 1-D (γ,), got shape {tuple(draft_tokens.shape)}; "
            "batched verification is not supported"
        )
    if draft_tokens.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"draft_tokens must be an integer tensor, got {draft_tokens.dtype}")
    gamma = draft_tokens.shape[0]
    _check_shape("q_probs", q_probs, rows=gamma)
    _check_shape("p_probs", p_probs, rows=gamma + 1)
    if q_probs.shape[1] != p_probs.shape[1]:
        raise ValueError(
            f"vocabulary sizes differ: q_probs has V={q_probs.shape[1]}, p_probs has "
            f"V={p_probs.shape[1]}; draft and target must share a vocabulary"
        )
    return gamma


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)), the distribution to resample from after a rejection.

    p, q: (V,) -> (V,). When p == q the residual is 0/0. A rejection then has probability zero,
    but rounding can still reach this branch, so we fall back to p instead of returning NaN
    (jaymody/speculative-sampling #5). Clamping p − q from below at a tiny positive number, as
    vLLM v0 did, avoids the NaN too but gives every token that mass: at p == q its "residual" is
    uniform over the vocabulary rather than p, and elsewhere the law drifts slightly.
    """
    residual = (p - q).clamp_min(0)  # (V,)
    mass = residual.sum()
    if mass <= 0:
        return p / p.sum()
    return residual / mass


def first_rejection(
    draft_tokens: torch.Tensor,
    q_probs: torch.Tensor,
    p_probs: torch.Tensor,
    generator: torch.Generator | None = None,
) -> int:
    """The accept coins of Algorithm 1: the index of the first rejected draft, γ if none is.

    draft_tokens (γ,), q_probs (γ, V), p_probs (≥ γ, V). Draft i is accepted iff u_i < p(x)/q(x).
    """
    gamma, device = draft_tokens.shape[0], p_probs.device
    idx = torch.arange(gamma, device=device)
    p_x = p_probs[idx, draft_tokens]  # (γ,)
    q_x = q_probs[idx, draft_tokens]  # (γ,)
    # One uniform per draft position, drawn up front: the coins of the γ positions are independent.
    u = rand(gamma, generator=generator, device=device)  # (γ,)
    accept = u * q_x < p_x  # u < p/q without dividing: no 0/0, no inf, never if p(x) = 0
    return gamma if bool(accept.all()) else int((~accept).nonzero()[0])


def rejection_sample(
    draft_tokens: torch.Tensor,
    q_probs: torch.Tensor,
    p_probs: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[int, torch.Tensor]:
    """Leviathan et al. Algorithm 1 for one speculative step.

    draft_tokens: (γ,) tokens proposed by the draft, x_i ~ q_i.
    q_probs: (γ, V) the draft distributions the tokens were drawn from (processed, not raw).
    p_probs: (γ+1, V) the target distributions at the same positions, plus one past the last draft.

    Returns (n_accepted, next_token): the first n_accepted drafts are kept, then next_token is
    appended. It is the residual sample at the first rejection, or the bonus sample from p[γ].
    """
    gamma = _check_shapes(draft_tokens, q_probs, p_probs)
    raise_for(value_flags(draft_tokens, q_probs, p_probs).tolist(), draft_tokens, p_probs.shape[1])
    n = first_rejection(draft_tokens, q_probs, p_probs, generator)
    if n == gamma:
        return n, sample(p_probs[gamma], generator)
    return n, sample(residual_distribution(p_probs[n], q_probs[n]), generator)


def multi_draft_sample(
    candidates: torch.Tensor,
    q_probs: torch.Tensor,
    p_probs: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[int, torch.Tensor]:
    """Verify k candidates for ONE position: recursive rejection sampling.

    SpecInfer (Miao et al. 2023, arXiv:2305.09781) and SpecTr (Sun et al. 2023,
    arXiv:2310.15141). candidates: (k,), candidate i drawn from q_probs[i] (k, V); p_probs: (V,).
    Candidate i is accepted with probability min(1, p_i(x)/q_i(x)); on a rejection
    p_{i+1} = norm(max(0, p_i − q_i)) and the next candidate is tried against it. If all k are
    rejected, returns (k, a token drawn from the last residual); else (i, candidates[i]).

    Each round is one ordinary rejection step, so its output follows p_i, and p_{i+1} is exactly
    p_i conditioned on a rejection: the output follows p. This needs candidate i to be drawn from
    q_probs[i] *given the earlier candidates*: for i.i.d. siblings every row is the same q; for
    siblings drawn without replacement pass `without_replacement_q` (the earlier ones removed).
    """
    if not isinstance(candidates, torch.Tensor) or candidates.dim() != 1:
        raise ValueError("candidates must be a 1-D tensor (k,)")
    k = candidates.shape[0]
    _check_shape("q_probs", q_probs, rows=k)
    _check_shape("p_probs", p_probs[None])
    if q_probs.shape[1] != p_probs.shape[0]:
        raise ValueError(f"q_probs has V={q_probs.shape[1]}, p_probs has V={p_probs.shape[0]}")
    flags = value_flags(candidates, q_probs, p_probs[None]).tolist()
    raise_for(flags, candidates, p_probs.shape[0])
    p = p_probs
    for i in range(k):
        x, q = candidates[i], q_probs[i]
        u = rand(1, generator=generator, device=p.device)[0]
        if u * q[x] < p[x]:  # u < p(x)/q(x), no division
            return i, x
        p = residual_distribution(p, q)  # (V,) p_{i+1}
    return k, sample(p, generator)


def without_replacement_q(q: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """The distributions that siblings drawn from q WITHOUT replacement really come from.

    q: (V,), candidates: (k,) distinct. Row i is q with candidates[:i] removed, renormalised:
    (k, V). Pass these rows, not q repeated, to `multi_draft_sample`. Batched too: q (..., V)
    and candidates (..., k) give (..., k, V). No host sync: the removals are one scatter.
    """
    k, vocab = candidates.shape[-1], q.shape[-1]
    batch = candidates.shape[:-1]
    earlier = torch.ones(k, k, dtype=torch.bool, device=q.device).tril(-1)  # [i, j]: j < i
    removed = torch.zeros(*batch, k, vocab, dtype=torch.bool, device=q.device)
    index = candidates[..., None, :].expand(*batch, k, k)  # (..., k, k): row i lists all of them
    removed.scatter_(-1, index, earlier.expand(*batch, k, k))  # row i: candidates[:i]
    rows = q[..., None, :].expand(*batch, k, vocab).masked_fill(removed, 0.0)  # (..., k, V)
    return rows / rows.sum(-1, keepdim=True)


def multi_draft_law(q_probs: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """The exact output law of `multi_draft_sample` when candidate i ~ q_probs[i] independently.

    q_probs: (k, V), p: (V,) -> (V,). Round i accepts x with probability min(p_i, q_i)(x) and
    is reached with probability Π_{j<i} (1 − Σ min(p_j, q_j)). The identity: this equals p.
    """
    law, reach = torch.zeros_like(p), torch.ones(())
    for q in q_probs:
        accepted = torch.minimum(p, q)  # (V,)
        law = law + reach * accepted
        reach = reach * (1 - accepted.sum()).clamp_min(0)
        p = residual_distribution(p, q)
    return law + reach * p


def one_step_law(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The exact law of the token emitted at one position by the rejection rule.

    p, q: (V,) -> (V,). P(out = x) = q(x)·min(1, p(x)/q(x)) + P(reject)·residual(x), where
    P(reject) = 1 − Σ_x min(p(x), q(x)). The identity this module exists for is: this equals p.
    """
    accepted = torch.minimum(p, q)  # q(x)·min(1, p(x)/q(x)), written without division
    p_reject = (1 - accepted.sum()).clamp_min(0)
    return accepted + p_reject * residual_distribution(p, q)


def acceptance_rate(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """α(p, q) = Σ_x min(p(x), q(x)) = 1 − TV(p, q). p, q: (..., V) -> (...)."""
    return torch.minimum(p, q).sum(-1)
