"""Layer 1: exact checks of the acceptance rule, with no randomness or with peaked inputs."""

import itertools

import pytest
import torch

from specdec_lab import verify
from specdec_lab.sampling import logits_to_probs


def _family(seed: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(vocab, generator=g) ** (1 + seed % 4)
    q = torch.rand(vocab, generator=g) ** (1 + seed % 3)
    return p / p.sum(), q / q.sum()


def _edge_cases() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    v = 6
    uniform = torch.full((v,), 1 / v)
    one_hot = torch.nn.functional.one_hot(torch.tensor(2), v).float()
    half = torch.tensor([0.5, 0.5, 0, 0, 0, 0])
    other_half = torch.tensor([0, 0, 0, 0, 0.5, 0.5])
    peaked = logits_to_probs(torch.tensor([30.0, 0, 0, 0, 0, -30.0]))
    # fp16-sized probabilities: masses near fp16's smallest normal number (6e-5).
    tiny = torch.tensor([1 - 5 * 6e-5, 6e-5, 6e-5, 6e-5, 6e-5, 6e-5])
    return {
        "p == q": (uniform, uniform.clone()),
        "disjoint supports": (half, other_half),
        "one-hot q": (uniform, one_hot),
        "one-hot p": (one_hot, uniform),
        "q = 0 where p > 0": (uniform, half),
        "p = 0 where q > 0": (half, uniform),
        "both one-hot, equal": (one_hot, one_hot.clone()),
        "peaked logits": (peaked, uniform),
        "fp16-sized masses": (tiny, uniform),
        "fp16-sized masses in q": (uniform, tiny),
    }


FAMILIES = {
    f"random seed={s} V={v}": _family(s, v) for s, v in itertools.product(range(6), [2, 5, 50])
}
FAMILIES.update(_edge_cases())


def test_enough_families() -> None:
    assert len(FAMILIES) >= 20


@pytest.mark.parametrize("name", list(FAMILIES))
def test_one_step_law_equals_target(name: str) -> None:
    p, q = FAMILIES[name]
    law = verify.one_step_law(p, q)
    assert torch.isfinite(law).all()
    torch.testing.assert_close(law, p, atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_residual_is_a_distribution(name: str) -> None:
    p, q = FAMILIES[name]
    r = verify.residual_distribution(p, q)
    assert torch.isfinite(r).all() and (r >= 0).all()
    assert r.sum().item() == pytest.approx(1.0, abs=1e-6)
    # The residual never puts mass where p <= q.
    assert (r[p <= q] == 0).all() or torch.equal(p, q) or (p - q).clamp_min(0).sum() == 0


def test_acceptance_rate_is_one_minus_tv() -> None:
    for p, q in FAMILIES.values():
        tv = 0.5 * (p - q).abs().sum()
        assert verify.acceptance_rate(p, q).item() == pytest.approx(1 - tv.item(), abs=1e-6)


def test_peaked_logits_accept_matching_draft(gen) -> None:
    # p and q both put ~all mass on token 3: the draft is accepted, the bonus comes from p[γ].
    logits = torch.full((3, 5), -40.0)
    logits[:, 3] = 40.0
    probs = logits_to_probs(logits)  # (γ+1, V) with γ = 2
    n, nxt = verify.rejection_sample(torch.tensor([3, 3]), probs[:2], probs, gen)
    assert (n, int(nxt)) == (2, 3)


def test_peaked_logits_reject_and_resample_from_target(gen) -> None:
    q = logits_to_probs(torch.tensor([[40.0, -40, -40, -40]]))  # draft sure of token 0
    p = logits_to_probs(torch.tensor([[-40.0, -40, 40, -40], [0.0, 0, 0, 0]]))  # target: token 2
    n, nxt = verify.rejection_sample(torch.tensor([0]), q, p, gen)
    assert (n, int(nxt)) == (0, 2)


def test_point_mass_draft_accepts_with_probability_p_of_x() -> None:
    # An n-gram drafter has one-hot q: accept with p(x), residual = p without x, renormalised.
    p = torch.tensor([0.5, 0.3, 0.2])
    q = torch.tensor([0.0, 1.0, 0.0])
    assert verify.acceptance_rate(p, q).item() == pytest.approx(0.3)
    torch.testing.assert_close(verify.residual_distribution(p, q), torch.tensor([5 / 7, 0, 2 / 7]))


def test_p_equals_q_never_rejects_and_never_nans() -> None:
    p = logits_to_probs(torch.randn(5, 7, generator=torch.Generator().manual_seed(0)))
    for seed in range(200):
        g = torch.Generator().manual_seed(seed)
        n, nxt = verify.rejection_sample(torch.tensor([1, 2, 3, 4]), p[:4], p, g)
        assert n == 4 and 0 <= int(nxt) < 7


def test_draft_token_with_zero_target_mass_is_always_rejected() -> None:
    q = torch.tensor([[0.5, 0.5, 0.0]])
    p = torch.tensor([[0.0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]])
    for seed in range(100):
        n, nxt = verify.rejection_sample(
            torch.tensor([0]), q, p, torch.Generator().manual_seed(seed)
        )
        assert n == 0 and int(nxt) == 2  # residual max(0, p - q) is one-hot on token 2


def test_greedy_verify() -> None:
    p_logits = torch.tensor([[0.0, 5, 0], [0, 0, 5], [5, 0, 0], [0, 5, 0]])  # argmax 1, 2, 0, 1
    assert verify.greedy_verify(torch.tensor([1, 2, 0]), p_logits) == (3, torch.tensor(1))
    n, nxt = verify.greedy_verify(torch.tensor([1, 1, 0]), p_logits)
    assert (n, int(nxt)) == (1, 2)


def test_greedy_verify_is_rejection_sampling_at_temperature_zero(gen) -> None:
    logits = torch.randn(5, 9, generator=gen)  # (γ+1, V)
    p = logits_to_probs(logits, temperature=0)
    drafts = torch.tensor([int(logits[0].argmax()), int(logits[1].argmax()), 0, 0])
    q = torch.nn.functional.one_hot(drafts, 9).float()
    assert verify.rejection_sample(drafts, q, p, gen)[0] == verify.greedy_verify(drafts, logits)[0]
