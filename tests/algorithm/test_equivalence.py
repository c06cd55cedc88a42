"""Layer 3: Monte Carlo against the exact target law, sized so a correct sampler fails with
probability ≤ 2δ (δ = 1e-6), plus the test of the test: every broken sampler must be caught."""

import math

import pytest
import torch

from specdec_lab import decoding, drafters, tree, verify
from specdec_lab.engine.sessions import open_session
from specdec_lab.proof import broken, mock, stats
from specdec_lab.sampling import SamplingConfig, logits_to_probs, sample

DELTA = 1e-6
SETTINGS = {  # (temperature, top_k, top_p)
    "T=1": (1.0, None, None),
    "T=0.6 top_k=2": (0.6, 2, None),
    "T=1.3 top_p=0.7": (1.3, None, 0.7),
}


def _one_token_outcomes(p, q, n, verifier, generator) -> list[int]:
    """Emit the first token of a γ=1 step n times: the draft if kept, else the replacement."""
    out = []
    for _ in range(n):
        x = sample(q, generator)
        kept, nxt = verifier(x[None], q[None], torch.stack([p, p]), generator)
        out.append(int(x) if kept else int(nxt))
    return out


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_single_token_law(setting) -> None:
    cfg = SamplingConfig(*SETTINGS[setting])
    g = torch.Generator().manual_seed(0)
    logits_p, logits_q = torch.randn(2, 6, generator=g)
    p, q = logits_to_probs(logits_p, cfg), logits_to_probs(logits_q, cfg)
    n = stats.samples_needed(tol=0.05, delta=DELTA, n_outcomes=6)
    check = stats.check_against_law(
        _one_token_outcomes(p, q, n, verify.rejection_sample, g), p, DELTA
    )
    assert check.passed, check


@pytest.mark.parametrize("name", list(broken.VERIFIERS))
def test_single_token_check_catches_broken_verifiers(name) -> None:
    g = torch.Generator().manual_seed(0)
    p = torch.tensor([0.05, 0.1, 0.15, 0.2, 0.2, 0.3])
    q = torch.tensor([0.4, 0.3, 0.1, 0.1, 0.05, 0.05])
    n = stats.samples_needed(tol=0.05, delta=DELTA, n_outcomes=6)
    check = stats.check_against_law(
        _one_token_outcomes(p, q, n, broken.VERIFIERS[name], g), p, DELTA
    )
    assert not check.passed, check


# ------------------------------------------------------------ multi-token outputs, end to end
VOCAB, LENGTH = 3, 3  # 27 outcomes
PROMPT = torch.tensor([0, 2])


@pytest.fixture(scope="module")
def pair():
    target = mock.MockLM(vocab_size=VOCAB, sharpness=1.5, seed=4)
    return target, mock.MockDraft(target, quality=0.3, seed=5)


def _sequence_check(
    pair, setting, draft=None, verifier=verify.rejection_sample, gamma=2, prompt=PROMPT
):
    temperature, top_k, top_p = SETTINGS[setting]
    target, default_draft = pair
    law = stats.exact_sequence_law(target, prompt, LENGTH, temperature, top_k, top_p)
    n = stats.samples_needed(tol=0.06, delta=DELTA, n_outcomes=law.shape[0])
    g = torch.Generator().manual_seed(1)
    seqs = [
        decoding.speculative_generate(
            target,
            draft or default_draft,
            prompt,
            LENGTH,
            gamma,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            generator=g,
            verifier=verifier,
        ).tokens.tolist()
        for _ in range(n)
    ]
    return stats.check_against_law(stats.encode_sequences(seqs, VOCAB), law, DELTA)


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_multi_token_law(pair, setting) -> None:
    check = _sequence_check(pair, setting)
    assert check.passed, check


@pytest.mark.parametrize("name", list(broken.VERIFIERS))
def test_multi_token_check_catches_broken_verifiers(pair, name) -> None:
    check = _sequence_check(pair, "T=1", verifier=broken.VERIFIERS[name])
    assert not check.passed, check


def test_multi_token_check_catches_raw_q_reporting(pair) -> None:
    # HF #47932: only visible when processing (here top-k) changes q.
    _, draft = pair
    check = _sequence_check(pair, "T=0.6 top_k=2", draft=broken.RawQDrafter(draft))
    assert not check.passed, check


REPETITIVE = torch.tensor([0, 1, 2, 0, 1])  # prompt lookup finds matches from the first step


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_multi_token_law_prompt_lookup(pair, setting) -> None:
    # q is one-hot: a draft x is kept with probability p(x), the residual is p without x.
    lookup = drafters.PromptLookupDrafter(VOCAB)
    check = _sequence_check(pair, setting, draft=lookup, prompt=REPETITIVE)
    assert check.passed, check
    assert lookup.calls > 0


def test_multi_token_check_catches_broken_prompt_lookup(pair) -> None:
    lookup = drafters.PromptLookupDrafter(VOCAB)
    check = _sequence_check(
        pair, "T=1", draft=lookup, prompt=REPETITIVE, verifier=broken.VERIFIERS["always accept"]
    )
    assert not check.passed, check


def test_multi_token_law_lookup_then_model(pair) -> None:
    # Steps copy from the sequence (one-hot q) or draft with the model (its q): exact either way.
    _, draft = pair
    hybrid = drafters.LookupThenModel(drafters.ModelDrafter(open_session(draft)), min_ngram=2)
    check = _sequence_check(pair, "T=1", draft=hybrid, prompt=REPETITIVE, gamma=3)
    assert check.passed, check
    assert hybrid.copied > 0 and hybrid.calls > 0  # both kinds of step happened


def test_multi_token_law_adaptive_gamma(pair) -> None:
    # Both adaptive rules decide γ from the draft's own proposals or from past steps only.
    _, draft = pair
    confident = drafters.ModelDrafter(open_session(draft), confidence_threshold=0.5)
    scheduled = drafters.HeuristicGamma(drafters.ModelDrafter(open_session(draft)), initial=1)
    for drafter in [confident, scheduled]:
        check = _sequence_check(pair, "T=1", draft=drafter, gamma=3)
        assert check.passed, check


def _tree_sequence_check(
    pair, setting, branching=(2, 1), prompt=PROMPT, length=LENGTH, **broken_parts
):
    temperature, top_k, top_p = SETTINGS[setting]
    target, draft = pair
    law = stats.exact_sequence_law(target, prompt, length, temperature, top_k, top_p)
    n = stats.samples_needed(tol=0.06, delta=DELTA, n_outcomes=law.shape[0])
    g = torch.Generator().manual_seed(1)
    kwargs = dict(temperature=temperature, top_k=top_k, top_p=top_p, generator=g, **broken_parts)
    seqs = [
        tree.tree_speculative_generate(
            target, draft, prompt, length, branching, **kwargs
        ).tokens.tolist()
        for _ in range(n)
    ]
    return stats.check_against_law(stats.encode_sequences(seqs, target.vocab_size), law, DELTA)


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_multi_token_law_token_tree(pair, setting) -> None:
    # Two distinct first tokens (recursive rejection sampling at the root), a chain below each.
    check = _tree_sequence_check(pair, setting)
    assert check.passed, check


@pytest.fixture(scope="module")
def unrelated_pair():
    # Distinct siblings verified as i.i.d. are exact by accident on some small pairs (V = 3 here);
    # an unrelated draft over V = 4 puts them 0.49 in TV from p at the first position.
    target = mock.MockLM(vocab_size=4, sharpness=1.5, seed=4)
    return target, mock.MockDraft(target, quality=0.0, seed=5)


TREE_PARTS = {
    "correct": {},
    "stale residual": {"verify_siblings": broken.stale_residual},
    "distinct siblings verified as i.i.d.": {
        "siblings": broken.siblings_without_replacement_as_iid
    },
}


@pytest.mark.parametrize("name", list(TREE_PARTS))
def test_multi_token_check_catches_broken_tree_samplers(unrelated_pair, name) -> None:
    # Three distinct first tokens, checked by recursive rejection sampling (or a broken variant).
    check = _tree_sequence_check(unrelated_pair, "T=1", (3,), length=2, **TREE_PARTS[name])
    assert check.passed == (name == "correct"), check


def test_sample_size_bound() -> None:
    # samples_needed is the smallest N whose concentration bound reaches the tolerance.
    n = stats.samples_needed(0.05, 1e-6, 10)
    assert stats.tv_tolerance(n, 1e-6, 10) <= 0.05 < stats.tv_tolerance(n - 1, 1e-6, 10)
    assert 2**10 * math.exp(-2 * n * 0.05**2) <= 1e-6  # the bound P(TV ≥ t) ≤ 2^k e^(-2Nt²)
    assert stats.power_lower_bound(0.3, 0.05, n, 10) > 1 - 1e-6
    assert stats.power_lower_bound(0.05, 0.05, n, 10) == 0.0  # no power at the tolerance itself


def test_homogeneity_pvalue_tells_equal_rates_from_different_ones():
    same = stats.homogeneity_pvalue([700, 350, 1400], [1000, 500, 2000])  # 0.7 everywhere
    assert same > 0.99
    differ = stats.homogeneity_pvalue([700, 800], [1000, 1000])  # 0.7 vs 0.8, n = 1000 each
    assert differ < 1e-5
    assert stats.homogeneity_pvalue([10, 20], [10, 20]) == 1.0  # every trial a success
    with pytest.raises(ValueError):
        stats.homogeneity_pvalue([5, 11], [10, 10])
    with pytest.raises(ValueError):
        stats.homogeneity_pvalue([5], [10])


def test_equivalence_check_prints_its_verdict_and_both_tests() -> None:
    law = [0.5, 0.3, 0.2]
    rng = torch.Generator().manual_seed(0)
    same = stats.check_against_law(
        torch.multinomial(torch.tensor(law), 20_000, True, generator=rng), law
    )
    other = stats.check_against_law(torch.zeros(20_000, dtype=torch.long), law)
    assert same.passed and not other.passed
    assert str(same).startswith("same law: TV ") and "20,000 samples" in str(same)
    assert str(other).startswith("NOT the same law: TV 0.5000")
    assert f"p-value {same.pvalue:.3g}" in str(same) and f"bound {same.tol:.4f}" in str(same)
