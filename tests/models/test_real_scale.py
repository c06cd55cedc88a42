"""What real pairs bring (issue 17): list-valued EOS, tiny temperatures, hub drafts with their
own tokenizer, position limits, soft-capped logits, drafters that propose nothing, and the
vocabulary-cost harness. Each bug here had a test that failed before its fix."""

import pytest
import torch
from transformers import (
    CohereConfig,
    CohereForCausalLM,
    Gemma2Config,
    Gemma2ForCausalLM,
    GPT2Config,
    GPT2LMHeadModel,
    GraniteConfig,
    GraniteForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
)

from specdec_lab import decoding, drafters, heads, models
from specdec_lab.engine import logits
from specdec_lab.engine.sessions import open_session
from specdec_lab.measure import vocab_cost
from specdec_lab.models import pairs, stand_ins
from specdec_lab.proof import mock


@pytest.fixture
def pair() -> tuple[mock.MockLM, mock.MockDraft]:
    target = mock.MockLM(vocab_size=11, sharpness=2.0, seed=0)
    return target, mock.MockDraft(target, quality=0.6, seed=1)


# ------------------------------------------------------------------------------ list EOS
def _greedy(target, n=30) -> list[int]:
    return decoding.autoregressive_generate(target, [1, 2], n, temperature=0).tokens.tolist()


def test_list_eos_stops_at_the_first_of_them(pair) -> None:
    target, draft = pair
    free = _greedy(target)
    unused = next(t for t in range(11) if t not in free)
    stop = free[6]
    expected = free[: free.index(stop) + 1]
    for eos in ([unused, stop], (stop, unused), [stop]):
        ar = decoding.autoregressive_generate(target, [1, 2], 30, temperature=0, eos_token_id=eos)
        sd = decoding.speculative_generate(
            target, draft, [1, 2], 30, 3, temperature=0, eos_token_id=eos
        )
        lookup = decoding.speculative_generate(
            target, drafters.PromptLookupDrafter(11), [1, 2], 30, 3, temperature=0, eos_token_id=eos
        )
        for out in (ar, sd, lookup):
            assert out.tokens.tolist() == expected, eos
            assert out.stats.new_tokens == len(expected)


def test_list_eos_when_sampling(pair) -> None:
    target, draft = pair
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        out = decoding.speculative_generate(
            target, draft, [1, 2], 40, 4, generator=g, eos_token_id=[3, 7]
        )
        tokens = out.tokens.tolist()
        ends = [i for i, x in enumerate(tokens) if x in (3, 7)]
        assert ends == [] or ends == [len(tokens) - 1]  # nothing after the first end of text


@pytest.mark.parametrize("eos", [-1, [3, -2], "3", 2.0, [1.0], True, {"id": 3}])
def test_bad_eos_is_refused(pair, eos) -> None:
    target, draft = pair
    with pytest.raises(ValueError, match="eos_token_id"):
        decoding.autoregressive_generate(target, [1], 5, eos_token_id=eos)
    with pytest.raises(ValueError, match="eos_token_id"):
        decoding.speculative_generate(target, draft, [1], 5, eos_token_id=eos)


# ------------------------------------------------------------------------ tiny temperature
@pytest.mark.parametrize("temperature", [1e-38, 1e-20, 1e-6])
def test_tiny_temperature_decodes_greedily(pair, temperature) -> None:
    target, draft = pair
    greedy = _greedy(target)
    g = torch.Generator().manual_seed(0)
    ar = decoding.autoregressive_generate(target, [1, 2], 30, temperature=temperature, generator=g)
    sd = decoding.speculative_generate(
        target, draft, [1, 2], 30, 4, temperature=temperature, generator=g
    )
    assert ar.tokens.tolist() == greedy == sd.tokens.tolist()


# ------------------------------------------------------------------------ HeuristicGamma
class _NothingDrafter:
    """Proposes nothing, ever: every step is a prompt-lookup miss."""

    vocab_size = 11
    calls = 0

    def propose(self, ids, gamma, cfg, generator):
        return torch.empty(0, dtype=torch.long), torch.empty(0, self.vocab_size)

    def crop(self, length: int) -> None:
        pass


def test_heuristic_gamma_ignores_steps_that_drafted_nothing(pair) -> None:
    target, _ = pair
    schedule = drafters.HeuristicGamma(_NothingDrafter(), initial=3)
    out = decoding.speculative_generate(target, schedule, [1, 2], 12, 8, temperature=0)
    assert out.tokens.tolist() == _greedy(target, 12)
    assert schedule.gamma == 3  # transformers 5.x would be at 3 + 2·12 = 27 here
    schedule.update([], 0, 7)
    assert schedule.gamma == 3
    schedule.update([4, 5], 2, 7)  # the rule itself is unchanged
    assert schedule.gamma == 5
    schedule.update([4, 5], 1, 7)
    assert schedule.gamma == 4


def test_heuristic_gamma_is_not_ratcheted_by_the_budget_capped_last_step(pair) -> None:
    # max_new_tokens = 1: the only step may draft 0 tokens; γ must not move across calls.
    target, draft = pair
    schedule = drafters.HeuristicGamma(drafters.ModelDrafter(open_session(draft)), initial=2)
    for _ in range(5):
        decoding.speculative_generate(target, schedule, [1, 2], 1, 6, temperature=0)
    assert schedule.gamma == 2


# --------------------------------------------------------------- tokenizer of a hub draft
def test_tokenizer_check_runs_for_a_hub_draft(monkeypatch, tmp_path) -> None:
    target_dir, draft_dir = models.save_tiny_pair("gpt2", tmp_path / "a")
    other = stand_ins.tiny_tokenizer("llama")  # "<s>" where GPT-2's byte tokenizer has a byte
    loaded = []
    real_load = pairs._load

    def fake_load(kind, source, **kwargs):  # "someone/draft" plays a hub id
        if source != "someone/draft":
            return real_load(kind, source, **kwargs)
        loaded.append(kind)
        if kind == "tokenizer":
            return other
        return real_load(kind, str(draft_dir), **kwargs)

    monkeypatch.setattr(pairs, "_load", fake_load)
    with pytest.raises(ValueError, match="tokenizers differ"):
        models.load_pair(target=str(target_dir), draft="someone/draft", device="cpu")
    assert "tokenizer" in loaded

    def no_tokenizer(kind, source, **kwargs):  # a hub draft that ships no tokenizer: skipped
        if source == "someone/draft" and kind == "tokenizer":
            raise OSError("no tokenizer files")
        return fake_load(kind, source, **kwargs)

    monkeypatch.setattr(pairs, "_load", no_tokenizer)
    pair = models.load_pair(target=str(target_dir), draft="someone/draft", device="cpu")
    assert pair.vocab_size == len(pair.tokenizer)


def test_tokenizer_check_skips_a_directory_without_a_tokenizer(tmp_path) -> None:
    target_dir, draft_dir = models.save_tiny_pair("llama", tmp_path)
    for name in ("tokenizer_config.json", "tokenizer.json"):
        (draft_dir / name).unlink()
    pair = models.load_pair(target=str(target_dir), draft=str(draft_dir), device="cpu")
    assert pair.vocab_size == len(pair.tokenizer)


# ------------------------------------------------------------------------- position limit
LIMIT = 16


@pytest.fixture(scope="module")
def short_gpt2() -> tuple[GPT2LMHeadModel, GPT2LMHeadModel]:
    """GPT-2 with a learned table of 16 positions: a 17th is an IndexError."""
    config = GPT2Config(vocab_size=32, n_positions=LIMIT, n_embd=16, n_layer=1, n_head=2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return GPT2LMHeadModel(config).eval(), GPT2LMHeadModel(config).eval()


def test_positions_allow_prompt_plus_new_minus_one(short_gpt2) -> None:
    target, draft = short_gpt2
    prompt = torch.arange(10)
    # 10 + 7 tokens, 16 positions fed (the last token is never fed back): allowed, and it runs.
    ar = decoding.autoregressive_generate(target, prompt, 7, temperature=0)
    sd = decoding.speculative_generate(target, draft, prompt, 7, 4, temperature=0)
    assert torch.equal(ar.tokens, sd.tokens) and len(ar.tokens) == 7
    with pytest.raises(ValueError, match="10 tokens \\+ max_new_tokens=8 needs 17 positions"):
        decoding.autoregressive_generate(target, prompt, 8, temperature=0)
    with pytest.raises(ValueError, match="at most 7 tokens"):
        decoding.speculative_generate(target, draft, prompt, 8, 4, temperature=0)


def test_positions_are_checked_through_sessions_and_drafters(short_gpt2) -> None:
    target, draft = short_gpt2
    prompt = torch.arange(10)
    session, drafter = open_session(target), drafters.ModelDrafter(open_session(draft))
    for call in (
        lambda: decoding.autoregressive_generate(session, prompt, 8, temperature=0),
        lambda: decoding.speculative_generate(session, draft, prompt, 8, temperature=0),
        lambda: decoding.speculative_generate(target, drafter, prompt, 8, temperature=0),
        lambda: decoding.speculative_generate(
            target, drafters.HeuristicGamma(drafter), prompt, 8, temperature=0
        ),
    ):
        with pytest.raises(ValueError, match="GPT2LMHeadModel takes at most 16"):
            call()
    assert session.calls == 0 and drafter.calls == 0  # before any forward


def test_vocab_size_must_agree_with_an_open_session(pair, short_gpt2) -> None:
    target, draft = pair
    with pytest.raises(ValueError, match="already open with vocab_size=11"):
        decoding.autoregressive_generate(open_session(target), [1], 3, vocab_size=8)
    with pytest.raises(ValueError, match="already open with vocab_size=11"):
        decoding.speculative_generate(target, open_session(draft), [1], 3, vocab_size=8)
    with pytest.raises(ValueError, match="already open with vocab_size=32"):
        decoding.speculative_generate(
            open_session(short_gpt2[0]), short_gpt2[1], [1], 3, vocab_size=20
        )
    same = decoding.autoregressive_generate(
        open_session(target, 8), [1], 3, temperature=0, vocab_size=8
    )
    assert int(same.tokens.max()) < 8


# ------------------------------------------------------------------- logits after the head
SMALL = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    bos_token_id=0,
    eos_token_id=1,
    pad_token_id=2,
)
FAMILIES = {  # each changes the logits after the LM head inside its forward
    "gemma2 soft-cap": (Gemma2ForCausalLM, Gemma2Config, dict(final_logit_softcapping=3.0)),
    "cohere scale": (CohereForCausalLM, CohereConfig, dict(logit_scale=0.25)),
    "granite scaling": (GraniteForCausalLM, GraniteConfig, dict(logits_scaling=4.0)),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_output_logits_equal_the_forward(family) -> None:
    model_cls, config_cls, extra = FAMILIES[family]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = model_cls(config_cls(**SMALL, **extra, initializer_range=0.5)).eval()
    ids = torch.randint(0, 64, (1, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(input_ids=ids).logits
        hidden = model.get_decoder()(input_ids=ids).last_hidden_state  # (1, 9, d)
        mine = logits.output_logits(model, hidden)
        by_hand = model.get_output_embeddings()(hidden)
    torch.testing.assert_close(mine, expected, atol=1e-5, rtol=1e-5)
    assert (by_hand - expected).abs().max() > 1e-2  # the LM head alone is wrong here


def test_output_logits_refuse_an_unknown_scale() -> None:
    config = LlamaConfig(**SMALL)
    config.logits_scaling = 2.0  # a family we have not read
    with pytest.raises(ValueError, match="LOGIT_SCALES"):
        logits.output_logits(LlamaForCausalLM(config), torch.zeros(1, 32))


def test_head_drafter_scores_with_output_logits(monkeypatch) -> None:
    model_cls, config_cls, extra = FAMILIES["gemma2 soft-cap"]
    model = model_cls(config_cls(**SMALL, **extra)).eval()
    seen = []

    def spy(m, hidden):
        seen.append(m)
        return logits.output_logits(m, hidden)

    monkeypatch.setattr(heads, "output_logits", spy)
    session, drafter = heads.head_drafter(model, heads.DraftHead(heads.HeadConfig(32, 16, 1)))
    out = decoding.speculative_generate(
        session, drafter, torch.tensor([0, 5, 6]), 6, 3, temperature=0
    )
    assert len(out.tokens) == 6 and seen and all(m is model for m in seen)


# ------------------------------------------------------------------------ vocabulary cost
def test_vocab_cost_harness_runs_on_a_small_vocabulary() -> None:
    target, draft = vocab_cost.table_pair(50, 20)
    ids = torch.arange(7)
    assert torch.equal(target.logits(ids), target.table[:7])
    for setting in vocab_cost.SETTINGS:
        timing = vocab_cost.time_loop(50, setting, new_tokens=8, gamma=3, repeats=1)
        assert timing.steps >= 2 and timing.ms_per_step > 0
