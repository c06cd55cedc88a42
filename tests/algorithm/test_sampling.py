"""Sampling helpers: processing order, edge cases, and the generator discipline."""

import math

import pytest
import torch

from specdec_lab import sampling
from specdec_lab.proof import stats


def test_temperature_top_k_top_p() -> None:
    logits = torch.tensor([3.0, 2.0, 1.0, 0.0])
    full = sampling.logits_to_probs(logits)
    torch.testing.assert_close(full, logits.softmax(-1))
    top2 = sampling.logits_to_probs(logits, top_k=2)
    assert (top2[2:] == 0).all() and top2.sum().item() == pytest.approx(1)
    # top_p keeps the smallest prefix whose mass reaches top_p: 0.665 + 0.245 >= 0.8
    nucleus = sampling.logits_to_probs(logits, top_p=0.8)
    assert (nucleus > 0).tolist() == [True, True, False, False]
    hot = sampling.logits_to_probs(logits, sampling.SamplingConfig(temperature=0.5))
    torch.testing.assert_close(hot, (logits / 0.5).softmax(-1))
    # The notebooks' short form (a temperature, top_k and top_p) builds the same SamplingConfig.
    cfg = sampling.SamplingConfig(0.7, 3, 0.9)
    assert torch.equal(
        sampling.logits_to_probs(logits, cfg), sampling.logits_to_probs(logits, 0.7, 3, 0.9)
    )
    with pytest.raises(TypeError, match="inside it"):
        sampling.logits_to_probs(logits, cfg, top_k=2)


def test_top_p_always_keeps_the_most_likely_token() -> None:
    probs = sampling.logits_to_probs(torch.tensor([10.0, 0.0, 0.0]), top_p=0.01)
    assert probs.tolist() == [1.0, 0.0, 0.0]


def test_temperature_zero_is_one_hot_argmax() -> None:
    probs = sampling.logits_to_probs(
        torch.tensor([[0.1, 0.9, 0.3], [2.0, 1.0, 0.0]]), sampling.SamplingConfig(0.0)
    )
    assert probs.tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]


@pytest.mark.parametrize(
    "settings, message",  # (temperature, top_k, top_p)
    [
        ((-1.0,), "temperature"),
        ((float("nan"),), "temperature"),
        ((1.0, None, 0.0), "top_p"),
        ((1.0, None, 1.5), "top_p"),
        ((1.0, 0), "top_k"),
    ],
)
def test_bad_sampling_settings(settings, message) -> None:
    with pytest.raises(ValueError, match=message):  # checked once, when they are built
        sampling.SamplingConfig(*settings)
    with pytest.raises(ValueError, match=message):  # the short form builds them too
        sampling.logits_to_probs(torch.zeros(4), *settings)


def test_nan_logits_rejected() -> None:
    with pytest.raises(ValueError, match="NaN"):
        sampling.logits_to_probs(torch.tensor([0.0, float("nan")]))


def test_sampling_uses_only_the_given_generator() -> None:
    probs = torch.full((3, 10), 0.1)
    a = sampling.sample(probs, torch.Generator().manual_seed(7))
    torch.manual_seed(0)
    b = sampling.sample(probs, torch.Generator().manual_seed(7))
    assert torch.equal(a, b)


# --------------------------------------------------------------- inverse-CDF sampling (`sample`)
DELTA = 1e-6
LAWS = {
    "dense": torch.tensor([0.1, 0.2, 0.3, 0.15, 0.25]),
    "zeros inside and at both ends": torch.tensor([0.0, 0.0, 0.4, 0.0, 0.35, 0.25, 0.0, 0.0]),
    "ties": torch.tensor([0.2, 0.2, 0.2, 0.0, 0.2, 0.2]),
    "unnormalised": torch.tensor([3.0, 0.0, 1.0, 4.0]),
    "tiny masses": torch.tensor([1 - 3e-4, 1e-4, 1e-4, 1e-4]),
}


def _sample_law(sampler, probs: torch.Tensor, n: int, seed: int = 0) -> list[int]:
    """n draws of `sampler` from `probs`, as one (n, V) batch of identical rows."""
    g = torch.Generator().manual_seed(seed)
    return sampler(probs.expand(n, -1), g).tolist()


@pytest.mark.parametrize("name", list(LAWS))
def test_sample_follows_the_exact_law(name) -> None:
    probs = LAWS[name]
    law = (probs / probs.sum()).numpy()
    n = stats.samples_needed(tol=0.02, delta=DELTA, n_outcomes=len(law))
    check = stats.check_against_law(_sample_law(sampling.sample, probs, n), law, DELTA)
    assert check.passed, check  # zero-probability tokens drawn would make the p-value 0


def test_sample_of_a_one_hot_is_that_token() -> None:
    probs = torch.nn.functional.one_hot(torch.tensor(3), 7).float()
    for v in (probs, torch.cat([probs, torch.zeros(151_929)])):  # also at a real vocabulary
        assert set(_sample_law(sampling.sample, v, 2000)) == {3}
    assert int(sampling.sample(probs)) == 3  # (V,) -> ()


def test_sample_check_catches_a_broken_sampler() -> None:
    # The test of the test: the same check must reject a sampler that is off by one token.
    def off_by_one(probs, g):
        return (sampling.sample(probs, g) + 1) % probs.shape[-1]

    probs = LAWS["dense"]
    n = stats.samples_needed(tol=0.02, delta=DELTA, n_outcomes=5)
    check = stats.check_against_law(_sample_law(off_by_one, probs, n), probs.numpy(), DELTA)
    assert not check.passed, check


def test_inverse_cdf_never_returns_a_token_of_zero_probability() -> None:
    # u · total can round up to the total; the guard then picks the last token of positive mass,
    # never a trailing zero. u = 1 stands for that rounding; u = 0 for the first draw.
    cdf = torch.tensor(
        [[0.0, 0.25, 0.25, 1.0, 1.0, 1.0]], dtype=torch.float64
    )  # p: 0 .25 0 .75 0 0
    for u, expected in [(0.0, 1), (0.25, 3), (1.0, 3), (0.2499, 1)]:
        assert (
            int(sampling.inverse_cdf(cdf, torch.tensor([[u]], dtype=torch.float64))[0]) == expected
        )


@pytest.mark.parametrize(
    "probs", [torch.tensor([0.5, float("nan")]), torch.tensor([0.5, -0.1, 0.6]), torch.zeros(3)]
)
def test_sample_refuses_invalid_weights(probs) -> None:
    with pytest.raises(ValueError, match="finite and non-negative"):
        sampling.sample(probs)


def test_sample_is_reproducible_and_leaves_the_global_rng_alone() -> None:
    probs = torch.rand(4, 1000, generator=torch.Generator().manual_seed(3))
    torch.manual_seed(0)
    before = torch.get_rng_state()
    a = sampling.sample(probs, torch.Generator().manual_seed(11))
    b = sampling.sample(probs, torch.Generator().manual_seed(11))
    assert torch.equal(a, b) and a.shape == (4,)
    assert torch.equal(before, torch.get_rng_state())


# --------------------------------------------------------------- greedy, tiny temperatures
def test_greedy_is_argmax_with_its_first_maximum_rule() -> None:
    g = torch.Generator().manual_seed(0)
    for vocab in (3, 50, 151_936):
        logits = torch.randint(0, 3, (5, vocab), generator=g).float()  # many ties
        assert torch.equal(sampling.greedy(logits), logits.argmax(-1))
        assert torch.equal(sampling.greedy(logits[0]), logits[0].argmax())


@pytest.mark.parametrize("temperature", [1e-38, 1e-30, 1e-6])
def test_tiny_temperature_is_greedy(temperature) -> None:
    logits = torch.randn(3, 151_936, generator=torch.Generator().manual_seed(0)) * 5
    probs = sampling.logits_to_probs(logits, temperature)
    assert not probs.isnan().any()
    assert torch.equal(probs, sampling.logits_to_probs(logits, 0.0))
    assert sampling.SamplingConfig(temperature).greedy
    assert not sampling.SamplingConfig(2e-5).greedy  # vLLM's threshold is 1e-5


def test_nan_logits_rejected_on_every_path() -> None:
    bad = torch.tensor([[0.0, 1.0], [float("nan"), 0.0]])
    for cfg in (1.0, 0.0, sampling.SamplingConfig(top_p=0.5), sampling.SamplingConfig(top_k=1)):
        with pytest.raises(ValueError, match="NaN"):
            sampling.logits_to_probs(bad, cfg)
    with pytest.raises(ValueError, match="NaN or \\+inf"):
        sampling.logits_to_probs(torch.tensor([0.0, float("inf")]))


# --------------------------------------------------------------- top-p without a full sort
def _top_p_full_sort(logits, temperature=1.0, top_k=None, top_p=None):
    """The implementation before the partial sort, verbatim: the reference to match exactly."""
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, -math.inf)
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        sorted_probs = sorted_logits.softmax(-1)
        mass_before = sorted_probs.cumsum(-1) - sorted_probs
        drop_sorted = mass_before >= top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, -math.inf)
    return logits.softmax(-1)


# Not 0.999: there the boundary tokens carry ~1e-7, the float32 rounding of the cumulative sum,
# and which of them survives depends on the summation order in the old code and the new alike.
@pytest.mark.parametrize("top_p", [0.05, 0.5, 0.9, 0.99])
@pytest.mark.parametrize("spread", [1.0, 4.0])  # flat rows need k past 256: the doubling
def test_top_p_equals_the_full_sort(top_p, spread) -> None:
    g = torch.Generator().manual_seed(int(top_p * 1000) + int(spread))
    logits = spread * torch.randn(6, 5000, generator=g)  # continuous: no ties
    for temperature, top_k in [(1.0, None), (0.7, None), (1.3, 300)]:
        mine = sampling.logits_to_probs(logits, temperature, top_k, top_p)
        assert torch.equal(mine, _top_p_full_sort(logits, temperature, top_k, top_p))
        assert torch.equal(mine[2], sampling.logits_to_probs(logits[2], temperature, top_k, top_p))


def test_top_p_partial_path_equals_the_sorting_path(monkeypatch) -> None:
    g = torch.Generator().manual_seed(5)
    probs = (3 * torch.randn(4, 3000, generator=g)).softmax(-1)
    partial = {p: sampling.top_p_drop(probs, p) for p in (0.3, 0.8, 0.95)}
    monkeypatch.setattr(sampling, "TOP_P_FIRST_K", 10**9)  # sort at once, as on an accelerator
    for p, drop in partial.items():
        assert torch.equal(drop, sampling.top_p_drop(probs, p))
