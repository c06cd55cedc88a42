"""Drafters beyond one draft model: prompt lookup, the confidence stop and transformers' γ schedule.

Each is checked for its rule and for greedy exactness; the sampling laws are in
tests/algorithm/test_equivalence.py."""

import pytest
import torch

from specdec_lab import decoding, drafters
from specdec_lab.engine.sessions import open_session
from specdec_lab.proof import mock
from specdec_lab.sampling import SamplingConfig

GREEDY = SamplingConfig(temperature=0)


@pytest.fixture
def pair() -> tuple[mock.MockLM, mock.MockDraft]:
    target = mock.MockLM(vocab_size=11, sharpness=2.0, seed=0)
    return target, mock.MockDraft(target, quality=0.6, seed=1)


# ------------------------------------------------------------------------------- prompt lookup
def test_prompt_lookup_takes_the_longest_ngram_then_the_leftmost_match() -> None:
    d = drafters.PromptLookupDrafter(vocab_size=10, max_ngram=3)
    # The tail (1, 2, 3) occurs once before, at 4: its 3-gram wins over the 1-gram "3" at 0.
    tokens, q = d.propose(torch.tensor([3, 9, 9, 9, 1, 2, 3, 7, 8, 1, 2, 3]), 2)
    assert tokens.tolist() == [7, 8]
    assert torch.equal(q, torch.eye(10)[[7, 8]])
    # Two earlier occurrences of (5, 6): the leftmost one is copied, not the most recent.
    tokens, _ = d.propose(torch.tensor([5, 6, 1, 5, 6, 2, 5, 6]), 4)
    assert tokens.tolist() == [1, 5, 6, 2]
    # A match right before the tail is cut at the end of the sequence.
    tokens, _ = d.propose(torch.tensor([4, 4]), 3)
    assert tokens.tolist() == [4]
    # No earlier occurrence, and γ = 0: nothing, with shapes (0,) and (0, V).
    for ids, gamma in [([1, 2, 3], 3), ([4, 4, 4], 0)]:
        tokens, q = d.propose(torch.tensor(ids), gamma)
        assert tokens.shape == (0,) and tokens.dtype == torch.long and q.shape == (0, 10)
    assert d.calls == 5


@pytest.mark.parametrize("max_ngram", [1, 2, 3])
def test_prompt_lookup_agrees_with_transformers(max_ngram) -> None:
    g = torch.Generator().manual_seed(0)
    ours = drafters.PromptLookupDrafter(vocab_size=4, max_ngram=max_ngram)
    for _ in range(300):
        ids = torch.randint(0, 4, (int(torch.randint(2, 14, (1,), generator=g)),), generator=g)
        gamma = int(torch.randint(1, 6, (1,), generator=g))
        theirs = drafters.transformers_lookup(ids.tolist(), gamma, max_ngram)
        assert ours.propose(ids, gamma)[0].tolist() == theirs


def test_prompt_lookup_bad_ngram() -> None:
    with pytest.raises(ValueError, match="max_ngram"):
        drafters.PromptLookupDrafter(10, max_ngram=0)


@pytest.mark.parametrize("prompt", [[3], [1, 2, 3, 1, 2], [10, 0, 5, 5, 9]])
def test_greedy_prompt_lookup_equals_greedy_autoregressive(pair, prompt) -> None:
    target, _ = pair
    ar = decoding.autoregressive_generate(target, prompt, 60, temperature=0)
    d = drafters.PromptLookupDrafter(target.vocab_size)
    sd = decoding.speculative_generate(target, d, prompt, 60, 4, temperature=0)
    assert torch.equal(ar.tokens, sd.tokens)
    # Greedy decoding of this mock falls into a loop, which prompt lookup copies.
    assert sum(sd.stats.accepted) > 0 and sd.stats.target_calls < ar.stats.target_calls
    assert sd.stats.draft_calls == sd.stats.target_calls and sd.stats.draft_time >= 0


# ------------------------------------------------------------------------------------ adaptive γ
def test_confidence_threshold_stops_after_an_unsure_token(pair) -> None:
    target, draft = pair
    ids = torch.tensor([1, 2])
    full, _ = drafters.ModelDrafter(open_session(draft)).propose(ids, 6, GREEDY, None)
    confidence = [
        float(draft.probs(torch.cat([ids, full[:i]]))[-1, full[i]]) for i in range(len(full))
    ]
    threshold = sorted(confidence)[2]  # stops at the first token below the 3rd-lowest confidence
    stop = next(i for i, c in enumerate(confidence) if c < threshold)
    cut = drafters.ModelDrafter(open_session(draft), confidence_threshold=threshold)
    tokens, q = cut.propose(ids, 6, GREEDY, None)
    assert tokens.tolist() == full[: stop + 1].tolist() and q.shape == (stop + 1, 11)
    assert cut.calls == stop + 1
    with pytest.raises(ValueError, match="confidence_threshold"):
        drafters.ModelDrafter(open_session(draft), confidence_threshold=1.5)


@pytest.mark.parametrize("threshold", [0.36, 0.4, 0.5])
def test_greedy_confidence_threshold_is_exact(pair, threshold) -> None:
    target, draft = pair
    ar = decoding.autoregressive_generate(target, [1, 2], 50, temperature=0)
    cut = drafters.ModelDrafter(open_session(draft), confidence_threshold=threshold)
    sd = decoding.speculative_generate(target, cut, [1, 2], 50, 8, temperature=0)
    assert torch.equal(ar.tokens, sd.tokens)
    assert min(sd.stats.gammas) < 8 and max(sd.stats.gammas) > 1  # the stop did cut some drafts


def test_heuristic_schedule_follows_transformers_rule(pair) -> None:
    target, draft = pair
    schedule = drafters.HeuristicGamma(drafters.ModelDrafter(open_session(draft)), initial=3)
    seen = []

    def record(step: decoding.Step) -> None:
        seen.append((len(step.draft_tokens), step.n_accepted))

    out = decoding.speculative_generate(
        target, schedule, [1, 2], 200, 10, temperature=0, on_step=record
    )
    gamma, produced = 3, 0
    for drafted, n in seen:  # also capped by the cap 10 and the token budget
        assert drafted == min(gamma, 10, 200 - produced - 1)
        gamma = gamma + 2 if n == drafted else max(1, gamma - 1)
        produced += n + 1
    assert len(set(out.stats.gammas)) > 2  # it did move
    ar = decoding.autoregressive_generate(target, [1, 2], 200, temperature=0)
    assert torch.equal(ar.tokens, out.tokens)
    with pytest.raises(ValueError, match="initial"):
        drafters.HeuristicGamma(schedule, initial=0)
