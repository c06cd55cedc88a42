"""Any pair, any family: tiny random models of each registry family, with the family's quirks,
saved to disk and loaded through `load_pair(target=..., draft=...)` like a user's own pair.

GPT-2 (tied, n_positions=320), GPT-NeoX (partial rotary, padded vocabulary), Qwen2 (draft and
target padded to different sizes, draft tied, no BOS) and Llama (grouped-query attention, tied).
Also: the position limit, the vocabulary checks, the memory guard with injected free memory, the
GPU dry run, and the bench command on every family in float32 and bfloat16.
"""

import json
import math

import pytest
import torch

from specdec_lab import decoding, env, models
from specdec_lab.__main__ import main
from specdec_lab.engine import sessions
from specdec_lab.measure import bench, profiling
from specdec_lab.models import memory, pairs

N_NEW = 24
TEXTS = ["def f(x):\n    return x + 1\n", "The quick brown fox"]


@pytest.fixture(scope="module", params=models.TINY_FAMILIES)
def family(request, tmp_path_factory):
    """(family name, target dir, draft dir, pair loaded from those directories)."""
    target_dir, draft_dir = models.save_tiny_pair(request.param, tmp_path_factory.mktemp("pair"))
    pair = models.load_pair(target=str(target_dir), draft=str(draft_dir), device="cpu")
    return request.param, target_dir, draft_dir, pair


def test_quirks_survive_saving_and_loading(family) -> None:
    name, _, _, pair = family
    t, d, tok = pair.target, pair.draft, pair.tokenizer
    widths = sessions.vocab_size_of(t), sessions.vocab_size_of(d)
    assert pair.vocab_size == min(len(tok), *widths) and pair.dtype == torch.float32
    tied = t.get_output_embeddings().weight is t.get_input_embeddings().weight
    if name == "gpt2":
        assert tied and pair.max_positions == 320 and widths == (len(tok), len(tok))
    if name == "gpt_neox":
        assert t.config.rope_parameters["partial_rotary_factor"] == 0.25
        assert widths[0] == widths[1] > len(tok) == pair.vocab_size  # padded rows are cut off
    if name == "qwen2":
        assert widths[0] != widths[1] and min(widths) > pair.vocab_size
        assert not tied and d.get_output_embeddings().weight is d.get_input_embeddings().weight
        assert tok.bos_token_id is None and pair.encode("ab").tolist() == tok("ab")["input_ids"]
    if name == "llama":
        assert tied and t.config.num_key_value_heads < t.config.num_attention_heads
    if tok.bos_token_id is not None:
        assert pair.encode("ab")[0] == tok.bos_token_id


def test_greedy_is_exact(family) -> None:
    """Speculative greedy == our autoregressive greedy == transformers' generate (float32)."""
    _, _, _, pair = family
    padded = list(range(pair.vocab_size, sessions.vocab_size_of(pair.target)))
    eos = pair.tokenizer.eos_token_id
    accepted = drafted = 0
    for text in TEXTS:
        ids = pair.encode(text)
        ar = decoding.autoregressive_generate(
            pair.target, ids, N_NEW, temperature=0, eos_token_id=eos, vocab_size=pair.vocab_size
        )
        # generate decodes the same vocabulary once the padded rows are suppressed
        hf = pair.target.generate(
            ids[None],
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=N_NEW,
            do_sample=False,
            suppress_tokens=padded or None,
        )[0, len(ids) :]
        assert ar.tokens.tolist() == hf.tolist()
        for gamma in (1, 4):
            spec = decoding.speculative_generate(
                pair.target,
                pair.draft,
                ids,
                N_NEW,
                gamma,
                temperature=0,
                eos_token_id=eos,
                vocab_size=pair.vocab_size,
            )
            assert spec.tokens.tolist() == ar.tokens.tolist()
            accepted += sum(spec.stats.accepted)
            drafted += sum(spec.stats.gammas)
    assert 0 < accepted < drafted  # both accepted drafts and rollbacks happened


def test_sampling_runs_and_is_seeded(family) -> None:
    _, _, _, pair = family
    ids = pair.encode(TEXTS[0])

    def run():
        return decoding.speculative_generate(
            pair.target,
            pair.draft,
            ids,
            N_NEW,
            3,
            temperature=1.0,
            top_k=50,
            generator=torch.Generator().manual_seed(0),
            vocab_size=pair.vocab_size,
        )

    first, second = run(), run()
    assert len(first.tokens) == N_NEW and int(first.tokens.max()) < pair.vocab_size
    assert torch.equal(first.tokens, second.tokens)
    assert first.stats.target_calls < N_NEW  # some drafts were accepted


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_bench_command_on_every_family(family, dtype, tmp_path, capsys) -> None:
    name, target_dir, draft_dir, _ = family
    out = tmp_path / "bench.json"
    argv = ["bench", "--target", str(target_dir), "--draft", str(draft_dir), "--smoke"]
    assert main([*argv, "--dtype", dtype, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    record = json.loads(out.read_text())["results"]
    rows = {r["method"]: r for r in record["rows"]}
    assert record["dtype"] == dtype
    rt = "lean" if name in ("llama", "qwen2") else "hf"  # the lean forward covers these two
    assert {f"autoregressive T=0.7 (ours, {rt})", f"speculative γ=3 T=1 (ours, {rt})"} <= set(rows)
    assert (f"speculative γ=3 (ours, {'hf' if rt == 'lean' else 'lean'})" in rows) == (rt == "lean")
    if "HF assisted (default schedule)" not in rows:  # skipped rows must say why
        assert "skipped HF assisted" in printed
    for row in rows.values():
        assert 0 <= row["repeated_4grams"] <= 1
        low, mid, high = row["spread"]
        assert low <= mid <= high
        assert (row["mismatches"] is None) == (row["temperature"] > 0)
    if dtype == "float32":  # asserted by the bench itself; here: that it recorded it
        assert all(r["mismatches"] == 0 for r in rows.values() if r["temperature"] == 0)


# ---------------------------------------------------------------------------- position limit
def _count_forwards(model) -> list[int]:
    calls = [0]
    model.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


def test_position_limit_raises_before_any_forward(tmp_path) -> None:
    target_dir, draft_dir = models.save_tiny_pair("gpt2", tmp_path)
    pair = models.load_pair(target=str(target_dir), draft=str(draft_dir), device="cpu")
    calls = _count_forwards(pair.target)
    ids = torch.zeros(300, dtype=torch.long)  # 300 + 30 > n_positions = 320
    for generate in (
        lambda: decoding.autoregressive_generate(pair.target, ids, 30, temperature=0),
        lambda: decoding.speculative_generate(pair.target, pair.draft, ids, 30, 3, temperature=0),
        lambda: bench.run_bench(pair, [ids], bench.BenchConfig(max_new_tokens=30)),
    ):
        with pytest.raises(ValueError, match=r"300 tokens \+ max_new_tokens=30 needs 329.*320"):
            generate()
    assert calls[0] == 0
    # 320 positions: allowed
    out = decoding.autoregressive_generate(pair.target, ids, 20, temperature=0)
    assert len(out.tokens) == 20


def test_vocabulary_checks(tmp_path) -> None:
    target_dir, draft_dir = models.save_tiny_pair("qwen2", tmp_path)
    pair = models.load_pair(target=str(target_dir), draft=str(draft_dir), device="cpu")
    ids = pair.encode(TEXTS[0])
    with pytest.raises(ValueError, match="vocabulary sizes differ"):  # paddings differ
        decoding.speculative_generate(pair.target, pair.draft, ids, 4, temperature=0)
    too_wide = sessions.vocab_size_of(pair.draft) + 1
    with pytest.raises(ValueError, match=f"vocab_size={too_wide} exceeds the draft's"):
        decoding.speculative_generate(pair.target, pair.draft, ids, 4, vocab_size=too_wide)
    with pytest.raises(ValueError, match="exceeds the model's"):
        decoding.autoregressive_generate(pair.target, ids, 4, vocab_size=10**6)


def test_tokenizers_that_differ_are_refused(tmp_path) -> None:
    target_dir, _ = models.save_tiny_pair("gpt2", tmp_path / "a")
    _, llama_draft = models.save_tiny_pair("llama", tmp_path / "b")  # "<s>" where GPT-2 has a byte
    with pytest.raises(ValueError, match="tokenizers differ"):
        models.load_pair(target=str(target_dir), draft=str(llama_draft), device="cpu")


def test_load_pair_arguments() -> None:
    with pytest.raises(ValueError, match="needs draft= too"):
        models.load_pair(target="some/model")
    with pytest.raises(ValueError, match="unknown dtype"):
        models.load_pair(dtype="float8")


# ------------------------------------------------------------------------------ memory guard
def test_model_bytes_matches_the_roofline_accounting() -> None:
    """Two independent counts: meta-device parameters vs profiling's closed form (Llama)."""
    for name in ("tiny-1M", "small-29M"):
        cfg = profiling.LADDER[name].config()
        expected = profiling.param_count(cfg) * 2 + profiling.kv_cache_bytes(cfg, 100, 1, 2)
        assert models.model_bytes(cfg, torch.bfloat16, context_tokens=100) == expected


def test_check_fits_with_injected_free_memory() -> None:
    models.check_fits(1000, "cpu", "x", free=math.ceil(1000 * memory.HEADROOM))
    with pytest.raises(models.InsufficientMemoryError, match="needs about"):
        models.check_fits(1000, "cpu", "x", free=1000)


def test_fit_ladder_keeps_the_largest_that_fit(capsys) -> None:
    names = ("tiny-1M", "mini-8M", "small-29M")
    size = {n: models.model_bytes(profiling.LADDER[n].config(), torch.float16, 512) for n in names}
    # room for the smallest next to mini-8M, but not next to small-29M
    free = int((size["tiny-1M"] + size["mini-8M"]) * memory.HEADROOM) + 1
    kept = models.fit_ladder(names, profiling.LADDER, "cuda", torch.float16, free=free)
    assert kept == ["tiny-1M", "mini-8M"]
    assert "small-29M would not fit" in capsys.readouterr().out
    assert models.fit_ladder(names, profiling.LADDER, "cuda", torch.float16, free=10**12) == list(
        names
    )
    with pytest.raises(models.InsufficientMemoryError):
        models.fit_ladder(names, profiling.LADDER, "cuda", torch.float16, free=1000)


def test_guard_runs_in_a_dry_run_and_not_on_a_plain_cpu(monkeypatch, tmp_path) -> None:
    target_dir, draft_dir = models.save_tiny_pair("llama", tmp_path)
    kw = dict(target=str(target_dir), draft=str(draft_dir), device="cpu")
    monkeypatch.setenv(env.FREE_MEMORY_GIB, "0.00001")  # 10 KiB "free"
    models.load_pair(**kw)  # plain CPU: no guard
    monkeypatch.setenv(env.FORCE_GPU_PATHS, "1")
    assert env.gpu_paths("cpu") and env.dry_run("cpu")
    with pytest.raises(models.InsufficientMemoryError, match="GiB are free on cpu"):
        models.load_pair(**kw)


def test_out_of_memory_while_loading_frees_and_falls_back(monkeypatch, capsys, tmp_path) -> None:
    target_dir, draft_dir = models.save_tiny_pair("llama", tmp_path)
    released = []
    monkeypatch.setattr(env, "release_memory", released.append)
    real_load = pairs._load_model

    def load(source, device, dtype):
        if "gpt2" in source or "qwen" in source.lower():  # the stand-in dirs of the hub pairs
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real_load(source, device, dtype)

    monkeypatch.setattr(pairs, "_load_model", load)
    monkeypatch.setenv(env.FORCE_GPU_PATHS, "1")
    with pytest.raises(models.InsufficientMemoryError, match="out of memory.*freed"):
        models.load_pair("gpt2", device="cpu")
    assert released == [torch.device("cpu")]
    # the hub pair stands in as a tiny Qwen2 pair here, runs out of memory, and is skipped
    monkeypatch.setitem(models.PAIRS, "mine", models.PairSpec(str(draft_dir), str(target_dir)))
    pair = models.load_first_pair(["qwen2.5", "mine"], device="cpu")
    assert pair.name == "mine" and "pair 'qwen2.5' is not available" in capsys.readouterr().out


def test_dry_run_loads_a_stand_in_for_a_hub_pair(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(models.HubUnavailableError):  # no dry run: the hub is needed
        models.load_pair("qwen2.5", device="cpu")
    monkeypatch.setenv(env.FORCE_GPU_PATHS, "1")
    pair = models.load_pair("qwen2.5", device="cpu", dtype="bfloat16")
    assert "stand-in" in pair.describe() and pair.dtype == torch.bfloat16
    assert sessions.vocab_size_of(pair.target) != sessions.vocab_size_of(pair.draft)
    monkeypatch.setenv(env.STAND_INS, "0")  # a dry run of the fallback branch instead
    with pytest.raises(models.HubUnavailableError):
        models.load_pair("qwen2.5", device="cpu")


def test_hub_pair_offline_falls_back_with_one_sentence(monkeypatch, capsys, tmp_path) -> None:
    target_dir, draft_dir = models.save_tiny_pair("llama", tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setitem(models.PAIRS, "mine", models.PairSpec(str(draft_dir), str(target_dir)))
    pair = models.load_first_pair(["qwen2.5", "mine"], device="cpu")
    assert pair.name == "mine"
    assert capsys.readouterr().out.count("pair 'qwen2.5' is not available here") == 1
    with pytest.raises(models.HubUnavailableError):  # the last candidate's error propagates
        models.load_first_pair(["qwen2.5", "gpt2"], device="cpu")


# --------------------------------------------------------------------------------- n-grams
def test_repeated_ngram_fraction() -> None:
    f = bench.repeated_ngram_fraction
    assert f([1, 2, 3, 4, 5, 6, 7]) == 0  # no 4-gram repeats
    assert f([1, 2, 3, 4, 1, 2, 3, 4]) == 1 / 5  # (1,2,3,4) again, out of 5 4-grams
    assert f([7] * 10) == 6 / 7  # every 4-gram after the first repeats it
    assert f([1, 2, 1, 2, 1], n=2) == 2 / 4
    assert math.isnan(f([1, 2, 3]))  # shorter than n: no 4-gram at all
    with pytest.raises(ValueError):
        f([1, 2], n=0)
