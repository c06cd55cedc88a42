"""Speculative decoding on transformers models: KV-cache rollback, greedy exactness against
`model.generate`, sampling equivalence, and the offline behaviour of `load_pair`."""

from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specdec_lab import data, decoding, drafters, heads, models
from specdec_lab.data import load_prompts
from specdec_lab.proof import broken, stats

ROOT = Path(__file__).resolve().parents[2]
VOCAB = 16


def _tiny_llama(path: Path, hidden: int, layers: int, seed: int) -> Path:
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        initializer_range=0.3,  # peaky random distributions, so acceptance is neither 0 nor 1
        bos_token_id=0,
        eos_token_id=None,
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A random tiny target and draft, saved and re-loaded like any local checkpoint."""
    root = tmp_path_factory.mktemp("tiny")
    target = models.load_model(str(_tiny_llama(root / "target", 64, 3, seed=0)), device="cpu")
    # The draft is a perturbed copy of the target: it agrees often but not always, so the tests
    # exercise full acceptance, partial acceptance and rollback.
    draft = LlamaForCausalLM(target.config)
    draft.load_state_dict(target.state_dict())
    with torch.no_grad():
        for w in draft.parameters():
            w.add_(0.1 * w.std() * torch.randn(w.shape, generator=torch.Generator().manual_seed(2)))
    draft.save_pretrained(root / "draft")
    return target, models.load_model(str(root / "draft"), device="cpu")


@pytest.mark.parametrize("gamma", [1, 3, 6])
def test_greedy_matches_generate_on_tiny_models(tiny, gamma) -> None:
    target, draft = tiny
    for seed in range(4):
        prompt = torch.randint(0, VOCAB, (5,), generator=torch.Generator().manual_seed(seed))
        expected = target.generate(prompt[None], max_new_tokens=30, do_sample=False)[0, 5:]
        out = decoding.speculative_generate(target, draft, prompt, 30, gamma, temperature=0)
        assert torch.equal(out.tokens, expected)
        assert out.stats.target_calls < 30
        assert 0 < sum(out.stats.accepted) < sum(out.stats.gammas)


def test_cache_rollback_matches_a_fresh_forward(tiny) -> None:
    # After a rejection the cache is cropped; the next logits must equal a from-scratch forward.
    target, _ = tiny
    from specdec_lab.engine.sessions import open_session

    ids = torch.arange(12) % VOCAB
    session = open_session(target)
    session.logits(ids)  # cache 12 tokens
    session.crop(7)  # roll back 5
    new = torch.cat([ids[:7], torch.tensor([3, 4])])
    fresh = target(new[None]).logits[0, -2:]
    torch.testing.assert_close(session.logits(new), fresh, atol=1e-5, rtol=1e-5)


def test_batch_greater_than_one_is_refused(tiny) -> None:
    target, draft = tiny
    with pytest.raises(ValueError, match="batch size 2"):
        decoding.speculative_generate(target, draft, torch.zeros(2, 4, dtype=torch.long), 5)


DELTA = 1e-6


def _first_tokens_check(tiny, draft=None):
    target, default_draft = tiny
    prompt = torch.tensor([0, 5, 9])
    law = stats.exact_sequence_law(target, prompt, 2, temperature=1.0, top_k=4)
    support = int((law > 0).sum())  # 16 outcomes: the top-4 tree of depth 2
    n = stats.samples_needed(tol=0.06, delta=DELTA, n_outcomes=support)
    g = torch.Generator().manual_seed(0)
    seqs = [
        decoding.speculative_generate(
            target, draft or default_draft, prompt, 2, 2, top_k=4, generator=g
        ).tokens.tolist()
        for _ in range(n)
    ]
    return stats.check_against_law(stats.encode_sequences(seqs, VOCAB), law, DELTA)


def test_sampling_law_of_first_two_tokens_under_top_k(tiny) -> None:
    check = _first_tokens_check(tiny)
    assert check.passed, check


def test_sampling_check_catches_raw_q_on_real_models(tiny) -> None:
    check = _first_tokens_check(tiny, draft=broken.RawQDrafter(tiny[1]))
    assert not check.passed, check


# ------------------------------------------------------------------------------- load_pair
def test_unknown_pair_name() -> None:
    with pytest.raises(ValueError, match="unknown pair"):
        models.load_pair("gpt5")


def test_hub_pair_offline_fails_with_one_sentence(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(models.HubUnavailableError, match="unreachable") as info:
        models.load_pair("gpt2", device="cpu")
    assert info.value.__cause__ is None and "load_pair('embedded')" in str(info.value)


def test_missing_local_directory_is_explained() -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        models.load_model("/nonexistent/model-dir", device="cpu")


needs_embedded = pytest.mark.skipif(
    not (data.MODELS_DIR / "target" / "config.json").exists(), reason="embedded pair not trained"
)


@pytest.fixture(scope="module")
def embedded():
    return models.load_pair("embedded", device="cpu")


@needs_embedded
def test_embedded_pair_loads_offline(monkeypatch, embedded) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pair = models.load_pair("embedded", device="cpu")
    assert pair.vocab_size == len(pair.tokenizer)
    assert next(pair.target.parameters()).dtype == torch.float32
    assert pair.draft.num_parameters() < pair.target.num_parameters() / 5


@needs_embedded
def test_embedded_pair_hands_its_draft_model_by_default_and_its_head_by_name(embedded) -> None:
    assert embedded.drafter == "draft model" and embedded.drafters == models.DRAFTERS
    ids = embedded.encode("def f(x):")
    model_target, model_drafter = embedded.speculative()
    head_target, head_drafter = embedded.speculative("draft head")
    assert isinstance(model_drafter, drafters.ModelDrafter)
    assert isinstance(head_drafter, heads.HeadDrafter) and head_drafter.target is head_target
    runs = [
        decoding.speculative_generate(
            t, d, ids, 16, 3, temperature=0, vocab_size=embedded.vocab_size
        )
        for t, d in [(model_target, model_drafter), (head_target, head_drafter)]
    ]
    assert runs[0].tokens.tolist() == runs[1].tokens.tolist()  # greedy: the target's own text
    with pytest.raises(ValueError, match="offers the drafters"):
        embedded.speculative("head")


@needs_embedded
@pytest.mark.parametrize("row", load_prompts("code") + load_prompts("prose"), ids=lambda r: r["id"])
def test_embedded_greedy_exact_on_every_shipped_prompt(embedded, row) -> None:
    ids = embedded.encode(row["text"])
    expected = embedded.target.generate(
        ids[None], max_new_tokens=24, do_sample=False, attention_mask=torch.ones(1, len(ids))
    )[0, len(ids) :]
    out = decoding.speculative_generate(
        embedded.target,
        embedded.draft,
        ids,
        24,
        gamma=4,
        temperature=0,
        vocab_size=embedded.vocab_size,
    )
    assert out.tokens.tolist() == expected.tolist()[: len(out.tokens)]
    assert len(out.tokens) == len(expected)
