"""Verification: the acceptance rule of speculative sampling, as pure functions of probabilities.

Notation of Leviathan, Kalman & Matias 2023, "Fast Inference from Transformers via Speculative
Decoding", arXiv:2211.17192, Algorithm 1: **p is the target** distribution, **q is the draft**.

A draft token x ~ q is accepted with probability min(1, p(x)/q(x)). On the first rejection the
replacement is drawn from the residual norm(max(0, p - q)). If all γ drafts are accepted, a bonus
token is drawn from the target's next distribution p[γ]. The output is then distributed exactly
as p; `one_step_law` computes that law in closed form so the tests can check it without sampling.

Nothing here touches a model: these functions can be tested without any weights.

`rejection_sample` is the readable reference the notebooks teach. `rejection_sample_fast` and
`greedy_verify` are what a decoding loop on an accelerator wants: they run where the
probabilities are, draw every uniform up front and read the result with a single host sync per
step (a sync stalls the host until the device has finished all queued work). Their input checks
are fused into that same sync.
"""

from __future__ import annotations

import math

import torch

from specdec_lab.sampling import cdf_dtype, inverse_cdf, rand, sample, uniforms


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


def _bad_values(
    draft_tokens: torch.Tensor, q_probs: torch.Tensor, p_probs: torch.Tensor
) -> torch.Tensor:
    """Every value check of one verification as four flags, (4,) bool on the device, with no
    host sync: q_probs bad (NaN, inf or negative), p_probs bad, a draft token outside [0, V),
    a draft token of zero draft probability.

    One pass per tensor (`aminmax`: NaN makes both ends NaN, which fails both comparisons), and
    the caller reads all four flags with ONE host sync.
    """
    device, vocab = p_probs.device, p_probs.shape[1]

    def bad(probs: torch.Tensor) -> torch.Tensor:
        if probs.numel() == 0:
            return torch.zeros((), dtype=torch.bool, device=device)
        lo, hi = torch.aminmax(probs)
        return ~((lo >= 0) & (hi < math.inf))

    x = draft_tokens.to(device)  # (γ,)
    outside = (x < 0) | (x >= vocab)  # (γ,)
    q_x = q_probs[torch.arange(x.shape[0], device=device), x.clamp(0, vocab - 1)]  # (γ,)
    return torch.stack([bad(q_probs), bad(p_probs), outside.any(), (q_x <= 0).any()])


def _raise_for(flags: list, draft_tokens: torch.Tensor, vocab: int) -> None:
    """Turn the flags of `_bad_values`, read on the host, into the error they stand for."""
    q_bad, p_bad, outside, q_zero = map(bool, flags)
    if q_bad:
        raise ValueError("q_probs contains NaN, inf or negative probabilities")
    if p_bad:
        raise ValueError("p_probs contains NaN, inf or negative probabilities")
    if outside:
        raise ValueError(f"draft_tokens must lie in [0, {vocab}), got {draft_tokens.tolist()}")
    if q_zero:
        raise ValueError("a draft token has q(x) = 0: q_probs is not the distribution it came from")


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)), the distribution to resample from after a rejection.

    p, q: (V,) -> (V,). When p == q the residual is 0/0. A rejection then has probability zero,
    but rounding can still reach this branch, so we fall back to p instead of returning NaN
    (the NaN bug of jaymody/speculative-sampling #5). vLLM v0's rejection sampler clamped the
    difference p − q from below at `finfo.tiny` before normalising: every token keeps at least
    that mass, so at p == q its "residual" is uniform over the vocabulary rather than p, and
    elsewhere the law drifts slightly ("This introduces some drift to the distribution", its own
    comment). vLLM computed the residual for every position, accepted or not, hence the clamp.
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
    This is the readable reference; `rejection_sample_fast` makes the same draws in one pass.
    """
    gamma = _check_shapes(draft_tokens, q_probs, p_probs)
    _raise_for(_bad_values(draft_tokens, q_probs, p_probs).tolist(), draft_tokens, p_probs.shape[1])
    n = first_rejection(draft_tokens, q_probs, p_probs, generator)
    if n == gamma:
        return n, sample(p_probs[gamma], generator)
    return n, sample(residual_distribution(p_probs[n], q_probs[n]), generator)


def rejection_sample_fast(
    draft_tokens: torch.Tensor,
    q_probs: torch.Tensor,
    p_probs: torch.Tensor,
    generator: torch.Generator | None = None,
    *,
    check: bool = True,
) -> tuple[int, torch.Tensor]:
    """`rejection_sample` on the tensors' own device, with ONE host sync.

    Same arguments and the same draws (the same uniforms, in the same order, give the same
    result), computed by `rejection_sample_on_device`; the input checks of `check` ride along
    with n in the single `.tolist()`. Returns (n, next_token), next_token a 0-d tensor on the
    device.
    """
    _check_shapes(draft_tokens, q_probs, p_probs)
    n, token = rejection_sample_on_device(draft_tokens, q_probs, p_probs, generator)
    if not check:
        return int(n), token  # the one host sync
    n_and_flags = torch.cat([n[None], _bad_values(draft_tokens, q_probs, p_probs)]).tolist()
    _raise_for(n_and_flags[1:], draft_tokens, p_probs.shape[1])
    return n_and_flags[0], token


def rejection_sample_on_device(
    draft_tokens: torch.Tensor,
    q_probs: torch.Tensor,
    p_probs: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The acceptance rule with no host sync and no checks: (n, next_token), both 0-d tensors
    on the device, for a decoding loop that reads them together with everything else it needs
    in one sync (`decoding.speculative_step`). Shapes as in `rejection_sample`.

    No data-dependent Python branch: the first rejection n is found with an argmax, and the next
    token is drawn from one row computed for whichever n it is: the residual
    norm(max(0, p[n] − q[n])) when n < γ, else the bonus p[γ] (the residual with q = 0).
    """
    gamma = draft_tokens.shape[0]
    device, vocab = p_probs.device, p_probs.shape[1]
    x = draft_tokens.to(device).clamp(0, vocab - 1)  # (γ,) clamped: the fused check reports it
    # All randomness up front, in rejection_sample's order: γ accept coins, then the uniform that
    # draws the next token.
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
    # residual_distribution's guard: no residual mass (p == q) means sampling from p itself. The
    # residual is then all zeros, so adding p·1 gives p; otherwise adding p·0 changes nothing.
    weights = residual.addcmul_(p_n, (mass <= 0).to(p_n.dtype))  # (V,)
    # Normalise as rejection_sample does (so both draw the same token from the same uniform):
    # by the residual's mass, by p's after the guard, and not at all for the bonus row p[γ].
    weights = weights / torch.where(n == gamma, 1.0, torch.where(mass > 0, mass, p_n.sum()))
    token = inverse_cdf(weights[None].cumsum(-1, dtype=cdf_dtype(device)), u)[0]  # 0-d
    return n, token


def greedy_verify(
    draft_tokens: torch.Tensor, p_logits: torch.Tensor, *, check: bool = True
) -> tuple[int, torch.Tensor]:
    """Greedy verification: accept drafts while they equal the target's argmax.

    draft_tokens: (γ,); p_logits: (γ+1, V) target scores (logits or probabilities).
    Returns (n_accepted, next_token) where next_token is the target's argmax after the last
    accepted draft, a 0-d tensor on p_logits' device. This is `rejection_sample` with one-hot p
    (temperature 0), without the coins. One host sync, which also reads the NaN check.
    """
    if not isinstance(draft_tokens, torch.Tensor) or draft_tokens.dim() != 1:
        raise ValueError("draft_tokens must be a 1-D tensor (γ,)")
    gamma = draft_tokens.shape[0]
    if p_logits.dim() != 2 or p_logits.shape[0] != gamma + 1:
        raise ValueError(f"p_logits must have shape ({gamma + 1}, V), got {tuple(p_logits.shape)}")
    n, next_token, nan = greedy_verify_on_device(draft_tokens, p_logits)
    if not check:
        return int(n), next_token
    n_host, nan = torch.stack([n, nan.long()]).tolist()
    if nan:
        raise ValueError("p_logits contain NaN; the model produced invalid scores")
    return n_host, next_token


def greedy_verify_on_device(
    draft_tokens: torch.Tensor, p_logits: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`greedy_verify` with no host sync: (n, next_token, any NaN in p_logits), 0-d tensors."""
    best, target_choice = p_logits.max(-1)  # (γ+1,) each: argmax's first-maximum rule
    matches = draft_tokens.to(p_logits.device) == target_choice[:-1]  # (γ,)
    stop = torch.cat([~matches, matches.new_ones(1)])  # (γ+1,) a mismatch, or the end
    n = stop.to(torch.uint8).argmax()  # 0-d: the first mismatch, γ if none
    next_token = target_choice.index_select(0, n[None])[0]  # 0-d, no sync (see above)
    return n, next_token, torch.isnan(best).any()


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
    _raise_for(
        _bad_values(candidates, q_probs, p_probs[None]).tolist(), candidates, p_probs.shape[0]
    )
    p = p_probs
    for i in range(k):
        x, q = candidates[i], q_probs[i]
        if torch.rand((), generator=generator) * q[x] < p[x]:  # u < p(x)/q(x), no division
            return i, x
        p = residual_distribution(p, q)  # (V,) p_{i+1}
    return k, sample(p, generator)


def without_replacement_q(q: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """The distributions that siblings drawn from q WITHOUT replacement really come from.

    q: (V,), candidates: (k,) distinct. Row i is q with candidates[:i] removed, renormalised:
    (k, V). Pass these rows, not q repeated, to `multi_draft_sample`.
    """
    rows, q = [], q.clone()
    for x in candidates.tolist():
        rows.append(q / q.sum())
        q[x] = 0.0
    return torch.stack(rows) if rows else q.new_zeros(0, q.shape[0])


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
