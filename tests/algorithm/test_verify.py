"""Layer 1: exact checks of the acceptance rule, with no randomness or with peaked inputs."""

import itertools

import pytest
import torch

from specdec_lab import verify
from specdec_lab.drafters import one_hot
from specdec_lab.engine import fused
from specdec_lab.proof import stats
from specdec_lab.sampling import SamplingConfig, logits_to_probs, sample

GREEDY, T1 = SamplingConfig(0.0), SamplingConfig(1.0)


def greedy_verify(drafts: torch.Tensor, p_logits: torch.Tensor) -> tuple[int, int]:
    """The loop's greedy verification, read on the host: (n, next token)."""
    q = one_hot(drafts, p_logits.shape[1])  # what a greedy drafter reports; greedy never reads it
    verdict = fused.verify_on_device(drafts, q, p_logits, GREEDY)
    return verdict.n, verdict.next_token


def fast_rejection_sample(drafts, q, p, generator=None) -> tuple[int, int]:
    """The on-device twin of `verify.rejection_sample`, its input checks read in one sync."""
    n, token = fused.rejection_sample_on_device(drafts, q, p, generator)
    n, token, *flags = torch.cat([n[None], token[None], fused.value_flags(drafts, q, p)]).tolist()
    fused.raise_for(flags, drafts, p.shape[1])
    return n, token


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
    assert greedy_verify(torch.tensor([1, 2, 0]), p_logits) == (3, 1)
    assert greedy_verify(torch.tensor([1, 1, 0]), p_logits) == (1, 2)


def test_greedy_verify_is_rejection_sampling_at_temperature_zero(gen) -> None:
    logits = torch.randn(5, 9, generator=gen)  # (γ+1, V)
    p = logits_to_probs(logits, GREEDY)
    drafts = torch.tensor([int(logits[0].argmax()), int(logits[1].argmax()), 0, 0])
    q = torch.nn.functional.one_hot(drafts, 9).float()
    assert verify.rejection_sample(drafts, q, p, gen)[0] == greedy_verify(drafts, logits)[0]


# ------------------------------------------------------------ the one-sync verifiers
def _instances(n: int, seed: int = 0):
    """Random verification instances (draft_tokens, q_probs, p_probs) with the edge cases:
    point-mass drafts (n-gram q), p == q rows, zeros in p, γ = 0, and V = 2 up to 50."""
    g = torch.Generator().manual_seed(seed)
    for i in range(n):
        vocab, gamma = [2, 3, 7, 50][i % 4], i % 5
        p = logits_to_probs(3 * torch.randn(gamma + 1, vocab, generator=g))  # (γ+1, V)
        q = logits_to_probs(p[:gamma].log() + (i % 3) * torch.randn(gamma, vocab, generator=g))
        if i % 6 == 1 and gamma:  # point-mass draft
            q[0] = torch.nn.functional.one_hot(torch.tensor(i % vocab), vocab).float()
        if i % 6 == 2 and gamma:  # p == q at the last draft: the residual guard
            q[-1] = p[gamma - 1]
        if i % 6 == 3:  # zeros in p (top-k'd target)
            p[:, 0] = 0
            p = p / p.sum(-1, keepdim=True)
        drafts = torch.stack([sample(row, g) for row in q]) if gamma else torch.zeros(0).long()
        yield drafts, q, p


def test_fast_rejection_sample_makes_the_references_draws() -> None:
    # Same uniforms in the same order: the same (n, next token), so the same output law.
    for i, (drafts, q, p) in enumerate(_instances(3000)):
        ref = verify.rejection_sample(drafts, q, p, torch.Generator().manual_seed(i))
        fast = fast_rejection_sample(drafts, q, p, torch.Generator().manual_seed(i))
        assert ref[0] == fast[0] and int(ref[1]) == fast[1], (i, ref, fast)


def test_fast_rejection_sample_follows_the_exact_law() -> None:
    # Monte Carlo against the exact law of (n, next token) for a fixed γ = 2 draft, with point
    # mass at the first draft: n = 0 w.p. 1 − a0, ... (a_i = min(1, p_i(x_i)/q_i(x_i))).
    p = torch.tensor([[0.5, 0.3, 0.2], [0.2, 0.2, 0.6], [0.1, 0.6, 0.3]])
    q = torch.tensor([[0.0, 1.0, 0.0], [0.4, 0.1, 0.5]])
    drafts = torch.tensor([1, 2])
    a = [min(1.0, float(p[i, x] / q[i, x])) for i, x in enumerate(drafts.tolist())]
    law = torch.cat(
        [
            (1 - a[0]) * verify.residual_distribution(p[0], q[0]),
            a[0] * (1 - a[1]) * verify.residual_distribution(p[1], q[1]),
            a[0] * a[1] * p[2],
        ]
    )  # outcome 3 n + token
    g = torch.Generator().manual_seed(0)
    n_samples = stats.samples_needed(tol=0.02, delta=1e-6, n_outcomes=9)
    outcomes = []
    for _ in range(n_samples):
        n, x = fast_rejection_sample(drafts, q, p, g)
        outcomes.append(3 * n + x)
    check = stats.check_against_law(outcomes, law.numpy(), 1e-6)
    assert check.passed, check


class _SyncCounter:
    """Counts the host syncs a call makes: every way a tensor's value reaches Python."""

    NAMES = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__")

    def __init__(self, monkeypatch) -> None:
        self.count = 0
        for name in self.NAMES:
            original = getattr(torch.Tensor, name)

            def counted(*args, _original=original, **kwargs):
                self.count += 1
                return _original(*args, **kwargs)

            monkeypatch.setattr(torch.Tensor, name, counted)


def test_the_loops_verifier_syncs_once(monkeypatch) -> None:
    instances = list(_instances(12, seed=1))
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    drafts = logits[:3].argmax(-1)
    counter = _SyncCounter(monkeypatch)
    for d, q, p in instances:
        before = counter.count
        fused.verify_on_device(d, q, p.log(), T1, torch.Generator().manual_seed(0))
        assert counter.count - before == 1
    for d in (drafts, torch.tensor([0, 0, 0])):
        before = counter.count
        greedy_verify(d, logits)
        assert counter.count - before == 1
    before = counter.count  # the counter has power: the readable reference syncs several times
    verify.rejection_sample(*instances[2], torch.Generator().manual_seed(0))
    assert counter.count - before > 2


@pytest.mark.parametrize(
    "tokens, q, p, message",
    [
        ([0], [[float("nan"), 0.5, 0.5]], [[1 / 3] * 3] * 2, "q_probs contains NaN"),
        ([0], [[1 / 3] * 3], [[float("inf"), 0, 0], [1 / 3] * 3], "p_probs contains NaN"),
        ([0], [[1.5, -0.5, 0.0]], [[1 / 3] * 3] * 2, "negative"),
        ([5], [[1 / 3] * 3], [[1 / 3] * 3] * 2, "lie in"),
        ([0], [[0.0, 0.5, 0.5]], [[1 / 3] * 3] * 2, "q\\(x\\) = 0"),
    ],
)
def test_fused_checks_of_both_verifiers(tokens, q, p, message) -> None:
    args = torch.tensor(tokens), torch.tensor(q), torch.tensor(p)
    for verifier in (verify.rejection_sample, fast_rejection_sample):
        with pytest.raises(ValueError, match=message):
            verifier(*args)


def test_greedy_verify_refuses_nan_scores() -> None:
    with pytest.raises(ValueError, match="NaN"):
        greedy_verify(torch.tensor([0]), torch.tensor([[0.0, float("nan")], [1.0, 0]]))
