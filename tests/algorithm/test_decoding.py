"""Layer 2 (greedy exactness) and the decoding API on mock models, including bad input."""

import pytest
import torch

from specdec_lab import decoding, verify
from specdec_lab.proof import mock


@pytest.fixture
def pair() -> tuple[mock.MockLM, mock.MockDraft]:
    target = mock.MockLM(vocab_size=11, sharpness=2.0, seed=0)
    return target, mock.MockDraft(target, quality=0.6, seed=1)


@pytest.mark.parametrize("gamma", [1, 2, 4, 7])
@pytest.mark.parametrize("prompt", [[3], [1, 2, 3], [10, 0, 5, 5, 9]])
def test_greedy_speculative_equals_greedy_autoregressive(pair, gamma, prompt) -> None:
    target, draft = pair
    ar = decoding.autoregressive_generate(target, torch.tensor(prompt), 40, temperature=0)
    sd = decoding.speculative_generate(
        target, draft, torch.tensor(prompt), 40, gamma, temperature=0
    )
    assert torch.equal(ar.tokens, sd.tokens)
    assert sd.stats.target_calls < ar.stats.target_calls


def test_exact_token_budget_and_stats(pair, gen) -> None:
    target, draft = pair
    for n in [1, 2, 5, 17]:
        out = decoding.speculative_generate(target, draft, [1, 2], n, gamma=4, generator=gen)
        assert out.tokens.shape == (n,) and out.tokens.dtype == torch.long
        s = out.stats
        assert s.new_tokens == n == sum(s.accepted) + len(s.accepted)
        assert s.target_calls == len(s.accepted)
        assert s.draft_calls == sum(s.gammas)
        assert all(0 <= a <= g <= 4 for a, g in zip(s.accepted, s.gammas, strict=True))
        assert s.wall_time > 0


def test_perfect_draft_accepts_everything(gen) -> None:
    target = mock.MockLM(vocab_size=6, seed=3)
    perfect = mock.MockDraft(target, quality=1.0)
    out = decoding.speculative_generate(target, perfect, [0], 50, gamma=4, generator=gen)
    assert out.stats.acceptance_rate == pytest.approx(1.0)
    assert out.stats.tokens_per_target_call == 5.0


def test_acceptance_rate_estimate_matches_theory(pair) -> None:
    # Estimated α over many steps must be close to E[Σ min(p, q)] along the sampled path.
    target, draft = pair
    g = torch.Generator().manual_seed(0)
    out = decoding.speculative_generate(target, draft, [1], 4000, gamma=3, generator=g)
    ids = torch.cat([torch.tensor([1]), out.tokens])
    alpha_path = verify.acceptance_rate(target.probs(ids), draft.probs(ids)).mean().item()
    assert out.stats.acceptance_rate == pytest.approx(alpha_path, abs=0.03)


def test_eos_stops_generation(pair) -> None:
    target, draft = pair
    greedy = decoding.autoregressive_generate(target, [1, 2], 30, temperature=0).tokens
    eos = int(greedy[5])
    first = greedy.tolist().index(eos)
    out = decoding.speculative_generate(target, draft, [1, 2], 30, temperature=0, eos_token_id=eos)
    assert out.tokens.tolist() == greedy[: first + 1].tolist()


def test_library_never_touches_the_global_rng(pair) -> None:
    target, draft = pair
    torch.manual_seed(99)
    before = torch.get_rng_state()
    decoding.speculative_generate(
        target, draft, [1], 30, generator=torch.Generator().manual_seed(0)
    )
    decoding.autoregressive_generate(target, [1], 30, generator=torch.Generator().manual_seed(0))
    assert torch.equal(before, torch.get_rng_state())


def test_sampling_settings_are_keyword_only(pair) -> None:
    target, draft = pair
    with pytest.raises(TypeError, match="positional"):
        decoding.autoregressive_generate(target, [1], 3, 0.0)  # a temperature by position
    with pytest.raises(TypeError, match="positional"):
        decoding.speculative_generate(target, draft, [1], 3, 2, 0.0)


def test_same_generator_seed_same_output(pair) -> None:
    target, draft = pair
    a = decoding.speculative_generate(
        target, draft, [1], 30, generator=torch.Generator().manual_seed(5)
    )
    b = decoding.speculative_generate(
        target, draft, [1], 30, generator=torch.Generator().manual_seed(5)
    )
    assert torch.equal(a.tokens, b.tokens)


# ---------------------------------------------------------------- bad input: clear messages
def _spec(pair, **overrides):
    target, draft = pair
    kwargs = dict(input_ids=torch.tensor([1, 2]), max_new_tokens=5)
    kwargs.update(overrides)
    return decoding.speculative_generate(target, draft, **kwargs)


@pytest.mark.parametrize(
    "overrides, error, message",
    [
        ({"gamma": 0}, ValueError, "gamma"),
        ({"gamma": -2}, ValueError, "gamma"),
        ({"temperature": -0.5}, ValueError, "temperature"),
        ({"top_p": 0.0}, ValueError, "top_p"),
        ({"top_p": 1.01}, ValueError, "top_p"),
        ({"input_ids": torch.tensor([], dtype=torch.long)}, ValueError, "empty"),
        ({"input_ids": torch.tensor([[1, 2], [3, 4]])}, ValueError, "batch size 2"),
        ({"input_ids": torch.tensor([1.0, 2.0])}, TypeError, "integer"),
        ({"max_new_tokens": 0}, ValueError, "max_new_tokens"),
    ],
)
def test_bad_generation_arguments(pair, overrides, error, message) -> None:
    with pytest.raises(error, match=message):
        _spec(pair, **overrides)


def test_mismatched_vocab_sizes(pair) -> None:
    target, _ = pair
    other = mock.MockLM(vocab_size=12)
    with pytest.raises(ValueError, match="vocabulary sizes differ"):
        decoding.speculative_generate(target, other, [1], 5)


def test_prompt_token_out_of_range(pair) -> None:
    with pytest.raises(ValueError, match=r"\[0, 11\)"):
        _spec(pair, input_ids=torch.tensor([1, 99]))


@pytest.mark.parametrize(
    "tokens, q, p, error, message",
    [
        (
            torch.tensor([0]),
            torch.full((1, 3), 1 / 3),
            torch.full((1, 3), 1 / 3),
            ValueError,
            "2 rows",
        ),
        (
            torch.tensor([0]),
            torch.full((1, 4), 1 / 4),
            torch.full((2, 3), 1 / 3),
            ValueError,
            "vocabulary",
        ),
        (
            torch.tensor([0]),
            torch.tensor([[float("nan"), 0.5, 0.5]]),
            torch.full((2, 3), 1 / 3),
            ValueError,
            "NaN",
        ),
        (
            torch.tensor([0]),
            torch.full((1, 3), 1 / 3),
            torch.full((2, 3), float("nan")),
            ValueError,
            "NaN",
        ),
        (
            torch.tensor([[0]]),
            torch.full((1, 3), 1 / 3),
            torch.full((2, 3), 1 / 3),
            ValueError,
            "1-D",
        ),
        (
            torch.tensor([5]),
            torch.full((1, 3), 1 / 3),
            torch.full((2, 3), 1 / 3),
            ValueError,
            "lie in",
        ),
        (
            torch.tensor([0.0]),
            torch.full((1, 3), 1 / 3),
            torch.full((2, 3), 1 / 3),
            TypeError,
            "integer",
        ),
        ([0], torch.full((1, 3), 1 / 3), torch.full((2, 3), 1 / 3), TypeError, "torch.Tensor"),
        (
            torch.tensor([0]),
            torch.tensor([[0.0, 0.5, 0.5]]),
            torch.full((2, 3), 1 / 3),
            ValueError,
            "q\\(x\\) = 0",
        ),
    ],
)
def test_bad_verify_inputs(tokens, q, p, error, message) -> None:
    with pytest.raises(error, match=message):
        verify.rejection_sample(tokens, q, p)


def test_custom_verifier_is_refused_for_greedy(pair) -> None:
    with pytest.raises(ValueError, match="greedy"):
        _spec(pair, temperature=0, verifier=lambda *a: (0, torch.tensor(0)))


class _NaNModel:
    """A mock model whose scores turn NaN after the third position."""

    vocab_size = 5

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(ids.shape[0], self.vocab_size)
        out[3:] = float("nan")
        return out


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_autoregressive_decoding_refuses_nan_scores(temperature) -> None:
    # Checked on the device and read once per call (no host sync per token): still an error.
    with pytest.raises(ValueError, match="NaN"):
        decoding.autoregressive_generate(_NaNModel(), [0], 6, temperature=temperature)
