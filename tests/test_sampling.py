"""Sampling helpers: processing order, edge cases, and the generator discipline."""

import pytest
import torch

from specdec_lab import sampling


def test_temperature_top_k_top_p() -> None:
    logits = torch.tensor([3.0, 2.0, 1.0, 0.0])
    full = sampling.logits_to_probs(logits)
    torch.testing.assert_close(full, logits.softmax(-1))
    top2 = sampling.logits_to_probs(logits, top_k=2)
    assert (top2[2:] == 0).all() and top2.sum().item() == pytest.approx(1)
    # top_p keeps the smallest prefix whose mass reaches top_p: 0.665 + 0.245 >= 0.8
    nucleus = sampling.logits_to_probs(logits, top_p=0.8)
    assert (nucleus > 0).tolist() == [True, True, False, False]
    hot = sampling.logits_to_probs(logits, temperature=0.5)
    torch.testing.assert_close(hot, (logits / 0.5).softmax(-1))


def test_top_p_always_keeps_the_most_likely_token() -> None:
    probs = sampling.logits_to_probs(torch.tensor([10.0, 0.0, 0.0]), top_p=0.01)
    assert probs.tolist() == [1.0, 0.0, 0.0]


def test_temperature_zero_is_one_hot_argmax() -> None:
    probs = sampling.logits_to_probs(
        torch.tensor([[0.1, 0.9, 0.3], [2.0, 1.0, 0.0]]), temperature=0
    )
    assert probs.tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"temperature": -1.0}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": 0}, "top_k"),
    ],
)
def test_bad_sampling_settings(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        sampling.logits_to_probs(torch.zeros(4), **kwargs)


def test_nan_logits_rejected() -> None:
    with pytest.raises(ValueError, match="NaN"):
        sampling.logits_to_probs(torch.tensor([0.0, float("nan")]))


def test_sampling_uses_only_the_given_generator() -> None:
    probs = torch.full((3, 10), 0.1)
    a = sampling.sample(probs, torch.Generator().manual_seed(7))
    torch.manual_seed(0)
    b = sampling.sample(probs, torch.Generator().manual_seed(7))
    assert torch.equal(a, b)
