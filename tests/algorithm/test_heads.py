"""The self-drafting head: exact with any weights, no extra target call, learns in seconds on a
micro Llama, and round-trips through its float16 checkpoint."""

import copy
import itertools
import types

import pytest
import torch

from specdec_lab import decoding, heads
from specdec_lab.course import head_training
from specdec_lab.engine.sessions import HFSession
from specdec_lab.proof import stats
from specdec_lab.sampling import SamplingConfig

VOCAB = 32  # the `micro` Llama's (tests/conftest.py)


def _untrained(micro) -> heads.DraftHead:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        return heads.DraftHead(heads.HeadConfig(32, mlp_size=64)).eval()


@pytest.fixture(scope="module")
def step_clock():
    """Training's clock, advancing 5 ms per reading: a budget of seconds becomes a budget of
    steps (about 1,000 in 6 s), the same on a fast laptop and on a busy CI machine, where the
    wall clock once left 2 steps in 6 s."""
    readings = itertools.count(step=0.005)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(head_training, "time", types.SimpleNamespace(perf_counter=readings.__next__))
        yield


def _train(micro, seconds: float, token_ids: torch.Tensor | None = None):
    sequences = torch.randint(1, VOCAB, (64, 32), generator=torch.Generator().manual_seed(3))
    cfg = heads.HeadConfig(32, mlp_size=64)
    return head_training.train_head(
        micro, sequences, seconds, cfg=cfg, lr=3e-3, progress=False, token_ids=token_ids
    )


@pytest.fixture(scope="module")
def trained(micro, step_clock):
    return _train(micro, 6)


TRUNCATED = torch.tensor([0, 3, 5, 8, 9, 11, 14, 17, 20, 23, 26, 30])  # 12 of the 32 tokens


@pytest.fixture(scope="module")
def truncated(micro, step_clock):
    return _train(micro, 4, TRUNCATED)[0]


PROMPTS = [torch.tensor([0, 5, 9]), torch.tensor([0, 17]), torch.tensor([0, 3, 3, 30, 8])]


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_head_drafting_is_exact_and_needs_no_extra_target_call(micro, gamma) -> None:
    for prompt in PROMPTS:
        expected = micro.generate(prompt[None], max_new_tokens=24, do_sample=False)[0, -24:]
        session, drafter = heads.head_drafter(micro, _untrained(micro))
        out = decoding.speculative_generate(session, drafter, prompt, 24, gamma, temperature=0)
        assert torch.equal(out.tokens, expected)
        s = out.stats
        assert s.target_calls == len(s.steps)  # one target forward per step, drafting included
        assert s.gammas[0] == 0  # the first step has no features yet: it only reads the prompt
        assert sum(s.gammas[1:]) == s.draft_calls  # one head forward per drafted token


def test_session_keeps_the_hidden_states_in_step_with_the_cache(micro) -> None:
    session = HFSession(micro, keep_hidden=True)
    ids = torch.tensor([0, 4, 8, 15, 16, 23, 42 % VOCAB])
    session.logits(ids[:4])
    session.logits(ids)
    session.crop(5)
    assert session.hidden.shape == (5, 32)
    fresh = micro.get_decoder()(input_ids=ids[None, :5]).last_hidden_state[0]
    torch.testing.assert_close(session.hidden, fresh, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="keep_hidden"):
        heads.HeadDrafter(_untrained(micro), HFSession(micro))


def test_training_raises_acceptance(micro, trained) -> None:
    head, log = trained
    assert log["steps"] > 10 and log["last_loss"] < log["first_loss"]
    assert all(p.requires_grad for p in micro.parameters())  # the target is left as it was
    before, _ = head_training.measure_head(micro, _untrained(micro), PROMPTS, 24, 3)
    after, exact = head_training.measure_head(micro, head, PROMPTS, 24, 3)
    assert exact
    assert after.acceptance_rate > before.acceptance_rate + 0.3, (before, after)
    assert after.tokens_per_target_call > before.tokens_per_target_call


def test_checkpoint_round_trip_in_float16(trained, tmp_path) -> None:
    head, _ = trained
    path = heads.save_head(head, tmp_path / "head", {"alpha_greedy": 0.5})
    assert path.stat().st_size < 2 * sum(p.numel() for p in head.parameters()) + 4096  # fp16
    loaded = heads.load_head(tmp_path / "head")
    h, e = torch.randn(2, 32), torch.randn(2, 32)
    with torch.no_grad():
        torch.testing.assert_close(loaded(h, e), head(h, e), atol=2e-2, rtol=2e-2)
    with pytest.raises(FileNotFoundError, match="python -m specdec_lab train-head"):
        heads.load_head(tmp_path / "missing")


def test_int8_storage_halves_the_file_and_keeps_each_weight_within_half_a_step(
    trained, tmp_path
) -> None:
    head, _ = trained
    fp16 = heads.save_head(head, tmp_path / "fp16", {})
    int8 = heads.save_head(head, tmp_path / "int8", {}, int8=True)
    assert int8.stat().st_size < 0.65 * fp16.stat().st_size
    loaded = heads.load_head(tmp_path / "int8")
    pairs = zip(head.state_dict().items(), loaded.state_dict().items(), strict=True)
    for (name, w), (_, v) in pairs:
        if w.ndim == 2:  # int8 rows: within half a quantisation step of the weight
            step = w.abs().amax(dim=1, keepdim=True) / 127
            assert ((v - w).abs() <= step / 2 + 1e-6).all(), name
            assert not torch.equal(v, w.half().float()), name  # not silently stored as fp16
    h, e = torch.randn(2, 32), torch.randn(2, 32)
    with torch.no_grad():
        torch.testing.assert_close(loaded(h, e), head(h, e), atol=3e-2, rtol=3e-2)


def test_training_continues_a_head_from_its_weights_and_vocabulary(micro, truncated) -> None:
    before = {k: v.clone() for k, v in truncated.state_dict().items()}
    sequences = torch.randint(1, VOCAB, (64, 32), generator=torch.Generator().manual_seed(4))
    cfg = heads.HeadConfig(32, mlp_size=16)  # ignored: the head continued keeps its own shape
    start, _ = head_training.train_head(
        micro, sequences, 0, cfg=cfg, progress=False, init=truncated
    )
    more, log = head_training.train_head(
        micro, sequences, 1, cfg=cfg, lr=1e-3, progress=False, init=truncated
    )
    for name, value in before.items():
        assert torch.equal(start.state_dict()[name], value)  # no step yet: the same head
        assert torch.equal(truncated.state_dict()[name], value)  # the one continued is untouched
    assert more.cfg == truncated.cfg and torch.equal(more.token_ids, TRUNCATED)
    assert log["steps"] > 0
    assert not torch.equal(more.fuse.weight, truncated.fuse.weight)


@pytest.mark.parametrize(("vocab", "top_k"), [("full", 2), ("truncated", 3)])
def test_head_sampling_law(micro, trained, truncated, vocab, top_k) -> None:
    # T = 1 with top-k: the head's q is the processed distribution it sampled from (for the
    # truncated head, exactly zero off its 12 tokens). The first step only reads the prompt;
    # the head drafts the second and third tokens.
    head = trained[0] if vocab == "full" else truncated
    prompt = torch.tensor([0, 5, 9])
    law = stats.exact_sequence_law(micro, prompt, 3, temperature=1.0, top_k=top_k)
    n = stats.samples_needed(tol=0.07, delta=1e-6, n_outcomes=int((law > 0).sum()))
    g = torch.Generator().manual_seed(0)
    session, drafter = heads.head_drafter(micro, head)
    seqs, drafted = [], 0
    for _ in range(n):
        out = decoding.speculative_generate(
            session, drafter, prompt, 3, 2, top_k=top_k, generator=g
        )
        seqs.append(out.tokens.tolist())
        drafted += sum(out.stats.accepted)
    check = stats.check_against_law(stats.encode_sequences(seqs, VOCAB), law, 1e-6)
    assert check.passed, check
    assert drafted > n // 8  # the head's drafts were in play


def test_truncated_head_is_exact_and_drafts_only_its_tokens(micro, truncated, tmp_path) -> None:
    assert truncated.cfg.draft_vocab == len(TRUNCATED)
    prompt = PROMPTS[0]
    expected = micro.generate(prompt[None], max_new_tokens=24, do_sample=False)[0, -24:]
    session, drafter = heads.head_drafter(micro, truncated)
    out = decoding.speculative_generate(session, drafter, prompt, 24, 3, temperature=0)
    assert torch.equal(out.tokens, expected)
    # sampled: q is zero off the list, a distribution on it, and every drafted token is on it
    session, drafter = heads.head_drafter(micro, truncated)
    session.logits(prompt)
    tokens, q = drafter.propose(prompt, 4, SamplingConfig(1.0), torch.Generator().manual_seed(0))
    off = torch.ones(VOCAB, dtype=torch.bool)
    off[TRUNCATED] = False
    assert torch.isin(tokens, TRUNCATED).all()
    assert (q[:, off] == 0).all()
    torch.testing.assert_close(q.sum(-1), torch.ones(4))
    # the checkpoint keeps the list, and loads back to the same drafts
    heads.save_head(truncated, tmp_path / "t", {})
    loaded = heads.load_head(tmp_path / "t")
    assert torch.equal(loaded.token_ids, TRUNCATED)
    with pytest.raises(ValueError, match="token_ids"):
        heads.DraftHead(heads.HeadConfig(32, draft_vocab=4))


def test_online_training_draws_fresh_windows_and_raises_acceptance(micro, step_clock) -> None:
    """train_head_online (train-head --online): fresh target features for every batch, drawn
    by `windows(n)`, with train_head's loss and schedule."""
    drawn: list[torch.Size] = []
    sequences = torch.randint(1, VOCAB, (64, 32), generator=torch.Generator().manual_seed(3))
    gen = torch.Generator().manual_seed(0)

    def windows(n: int) -> torch.Tensor:
        rows = sequences[torch.randint(len(sequences), (n,), generator=gen)]
        drawn.append(rows.shape)
        return rows

    cfg = heads.HeadConfig(32, mlp_size=64)
    head, log = head_training.train_head_online(
        micro, windows, 6, cfg, batch_size=4, lr=3e-3, progress=False
    )
    assert log["steps"] > 10 and log["tokens_seen"] == 4 * 32 * log["steps"]
    assert drawn and set(drawn) == {torch.Size([4, 32])}  # a fresh batch every step
    assert all(p.requires_grad for p in micro.parameters())  # the target is left as it was
    before, _ = head_training.measure_head(micro, _untrained(micro), PROMPTS, 24, 3)
    after, exact = head_training.measure_head(micro, head, PROMPTS, 24, 3)
    assert exact and after.acceptance_rate > before.acceptance_rate + 0.3, (before, after)


def test_token_stream_windows_are_consecutive_tokens_of_the_text(tmp_path) -> None:
    class Chars:  # a tokenizer: one id per character
        def __call__(self, texts, add_special_tokens=False):
            return {"input_ids": [[ord(c) for c in t] for t in texts]}

    text = tmp_path / "a.txt"
    body = "".join(chr(65 + i % 26) for i in range(5000))
    text.write_text(body)
    windows = head_training.token_stream(Chars(), [text], seed=0)
    assert windows.tokens == [5000]
    batch = windows(8, 16)
    assert batch.shape == (8, 16)
    for row in batch.tolist():
        assert "".join(map(chr, row)) in body  # a window of the text, in order


def test_on_the_cpu_a_head_drafts_in_float32_beside_a_bfloat16_target(micro, truncated, tmp_path):
    heads.save_head(truncated, tmp_path / "t", {})
    loaded = heads.load_head(tmp_path / "t", "cpu", torch.bfloat16)
    assert next(loaded.parameters()).dtype == torch.float32
    target = copy.deepcopy(micro).to(torch.bfloat16)
    session, drafter = heads.head_drafter(target, loaded)
    assert drafter.table_t.dtype == torch.float32  # the LM head's rows, cast to the head's dtype
    # built once per LM-head weight: a second drafter shares it, a changed weight rebuilds it
    assert heads.head_drafter(target, loaded)[1].table_t is drafter.table_t
    with torch.no_grad():
        target.get_output_embeddings().weight.mul_(2)
    rebuilt = heads.head_drafter(target, loaded)[1].table_t
    torch.testing.assert_close(rebuilt, 2 * drafter.table_t, rtol=1e-2, atol=1e-2)
    prompt = PROMPTS[0]
    out = decoding.speculative_generate(session, drafter, prompt, 8, 2, temperature=0)
    assert out.stats.draft_calls > 0 and out.tokens.shape == (8,)
    # sampled: a proposal from the float32 head is a distribution on its own tokens
    ids = torch.cat([prompt, out.tokens])
    tokens, q = drafter.propose(ids, 3, SamplingConfig(1.0), torch.Generator().manual_seed(0))
    assert tokens.shape == (3,)
    assert torch.isin(tokens, TRUNCATED).all()
    torch.testing.assert_close(q.sum(-1), torch.ones(3))


@pytest.mark.parametrize("vocab", ["full", "truncated"])
def test_first_draft_logits_are_what_propose_drafts_after_each_prefix(
    micro, trained, truncated, vocab
) -> None:
    # Notebook 03 §9 compares the head's expected acceptance with the draft model's on the
    # same contexts: row t of the teacher-forced logits must be the q that `propose` samples
    # from after the prefix ids[: t + 2], on a session that read only that prefix.
    head = trained[0] if vocab == "full" else truncated
    ids = torch.tensor([0, 5, 9, 3, 3, 30, 8, 17])
    session, drafter = heads.head_drafter(micro, head)
    session.logits(ids)
    rows = drafter.first_draft_logits(ids)
    assert rows.shape == (len(ids) - 1, VOCAB) and rows.dtype == torch.float32
    for t in range(len(ids) - 1):
        prefix = ids[: t + 2]
        fresh, one = heads.head_drafter(micro, head)
        fresh.logits(prefix)
        _, q = one.propose(prefix, 1, SamplingConfig(1.0), torch.Generator().manual_seed(t))
        torch.testing.assert_close(rows[t].softmax(-1), q[0])
    if vocab == "truncated":  # -inf off its list, so q is zero there
        off = torch.ones(VOCAB, dtype=torch.bool)
        off[TRUNCATED] = False
        assert torch.isinf(rows[:, off]).all()
    with pytest.raises(ValueError, match="call target.logits"):
        drafter.first_draft_logits(ids[:-1])  # the session holds more than these ids
