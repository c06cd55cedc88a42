"""Deliberately broken speculative samplers: the equivalence checks must reject every one.

A statistical test that never fails proves nothing, so the course "tests the test" with the
mistakes real implementations made. Each verifier in `VERIFIERS` has the signature of
`specdec_lab.verify.rejection_sample`; `RawQDrafter` is a drafter-level bug. The multi-draft
bugs (`stale_residual`, `siblings_without_replacement_as_iid`) break token-tree verification.
"""

from __future__ import annotations

import torch

from specdec_lab.drafters import ModelDrafter
from specdec_lab.engine.sessions import open_session
from specdec_lab.sampling import SamplingConfig, logits_to_probs, sample
from specdec_lab.verify import first_rejection, residual_distribution


def always_accept(draft_tokens, q_probs, p_probs, generator=None) -> tuple[int, torch.Tensor]:
    """Bug: keep every draft. The output then follows q, not p."""
    gamma = draft_tokens.shape[0]
    return gamma, sample(p_probs[gamma], generator)


def correction_from_q(draft_tokens, q_probs, p_probs, generator=None) -> tuple[int, torch.Tensor]:
    """Bug: after a rejection, resample from the draft q instead of norm(max(0, p − q))."""
    n = first_rejection(draft_tokens, q_probs, p_probs, generator)
    if n == draft_tokens.shape[0]:
        return n, sample(p_probs[n], generator)
    return n, sample(q_probs[n], generator)


def unnormalized_residual(
    draft_tokens, q_probs, p_probs, generator=None
) -> tuple[int, torch.Tensor]:
    """Bug: inverse-CDF sampling from max(0, p − q) without dividing by its mass.

    The cumulative sum tops out below 1, so the leftover mass piles onto the last token.
    (torch.multinomial normalises its weights, which hides this bug in many codebases.)
    """
    n = first_rejection(draft_tokens, q_probs, p_probs, generator)
    if n == draft_tokens.shape[0]:
        return n, sample(p_probs[n], generator)
    residual = (p_probs[n] - q_probs[n]).clamp_min(0)  # (V,), not normalised
    u = torch.rand(1, generator=generator)
    index = torch.searchsorted(residual.cumsum(0), u).clamp_max(residual.shape[0] - 1)
    return n, index[0]


def stale_residual(candidates, q_probs, p_probs, generator=None) -> tuple[int, torch.Tensor]:
    """Bug (multi-draft): every sibling is checked against the ORIGINAL p.

    The residual is not updated between siblings, so a second sibling gets a second chance at
    mass the first one already took: the output over-weights the draft. (Signature of
    `specdec_lab.verify.multi_draft_sample`.)
    """
    for i, x in enumerate(candidates):
        if torch.rand((), generator=generator) * q_probs[i, x] < p_probs[x]:
            return i, x
    return len(candidates), sample(residual_distribution(p_probs, q_probs[-1]), generator)


def siblings_without_replacement_as_iid(q, k, generator=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Bug (multi-draft): draw k distinct siblings, but report q for each, as if i.i.d.

    The second sibling really comes from q with the first removed; verifying it against q
    mis-states its probability (compare `specdec_lab.tree.draw_siblings`).
    """
    k = min(k, int((q > 0).sum()))
    candidates = torch.multinomial(q, k, replacement=False, generator=generator)  # (k,)
    return candidates, q.expand(k, -1)  # (k,), (k, V)


class RawQDrafter(ModelDrafter):
    """Bug (HF transformers #47932): sample from the processed q, but report q before top-k/top-p
    (the temperature-scaled softmax).

    With top-k or top-p that q is flatter than the q the token came from, so p/q is inflated,
    too many drafts are accepted, and the output drifts towards the draft.
    """

    def __init__(self, model) -> None:
        super().__init__(open_session(model))

    def propose(self, ids, gamma, cfg: SamplingConfig, generator=None):
        if gamma == 0:
            return super().propose(ids, gamma, cfg, generator)
        tokens, q_raw, raw = [], [], SamplingConfig(cfg.temperature)  # T alone
        for _ in range(gamma):
            logits = self.session.logits(ids)[-1]  # (V,)
            x = sample(logits_to_probs(logits, cfg), generator)
            tokens.append(x)
            q_raw.append(logits_to_probs(logits, raw))  # the bug: no top-k/top-p
            ids = torch.cat([ids, x[None]])
        return torch.stack(tokens), torch.stack(q_raw)  # (γ,), (γ, V)


VERIFIERS = {
    "always accept": always_accept,
    "correction from q": correction_from_q,
    "unnormalised residual": unnormalized_residual,
}
