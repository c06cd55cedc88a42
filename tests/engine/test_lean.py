"""The lean runtime (`specdec_lab.engine.llama`, `sessions.LeanSession`) against transformers' own forward.

Tiny random models of each covered family (Llama with grouped-query attention and tied
embeddings, SmolLM2-shaped Llama, Qwen2 with q/k/v biases and an untied head, Mistral without a
window): logits match transformers' forward in float32, greedy output equals `generate`, a
rollback moves a pointer, a tree keeps its accepted branch. Families and configs it does not
cover fall back to transformers, or raise when the lean path is forced.
"""

import copy
import gc
import weakref

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    GPT2Config,
    LlamaConfig,
    MistralConfig,
    Qwen2Config,
)

from specdec_lab import decoding, tree
from specdec_lab.engine import linear, llama, sessions
from specdec_lab.engine.linear import Linear, can_pack
from specdec_lab.proof import mock

V = 96
SMALL = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_attention_heads=4)
CONFIGS = {
    "llama-gqa-tied": LlamaConfig(
        **SMALL, num_key_value_heads=1, num_hidden_layers=2, tie_word_embeddings=True
    ),
    "smollm2-like": LlamaConfig(
        **SMALL,
        num_key_value_heads=2,
        num_hidden_layers=2,
        tie_word_embeddings=True,
        rope_theta=100000.0,
        rms_norm_eps=1e-5,
    ),
    "llama3-rope": LlamaConfig(
        **SMALL,
        num_key_value_heads=2,
        num_hidden_layers=1,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    ),
    "qwen2-bias-untied": Qwen2Config(
        **SMALL, num_key_value_heads=2, num_hidden_layers=2, tie_word_embeddings=False
    ),
    "mistral-no-window": MistralConfig(
        **SMALL, num_key_value_heads=2, num_hidden_layers=2, sliding_window=None
    ),
}


def _model(config, seed: int = 0):
    torch.manual_seed(seed)
    config.initializer_range = 0.3  # peaked enough that greedy paths are not all ties
    model = AutoModelForCausalLM.from_config(config).eval()
    model.generation_config.eos_token_id = None  # `generate` runs the full length, as ours do
    return model


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def model(request):
    return _model(CONFIGS[request.param])


def _ids(n: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(V, (n,), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def _generate(model, ids: torch.Tensor, n: int) -> torch.Tensor:
    """transformers' own greedy `generate`: the n new tokens after `ids` (L,)."""
    mask = torch.ones(1, ids.shape[0], dtype=torch.long)
    return model.generate(ids[None], attention_mask=mask, max_new_tokens=n, do_sample=False)[
        0, ids.shape[0] :
    ]


def test_logits_match_transformers_in_chunks(model) -> None:
    """Prefill, then chunks of 1, 3 and 5 tokens on the cache: the max abs difference is within
    fp32 rounding of the logits' scale (32 eps relative to the largest logit: the two forwards
    sum in different orders, and CPUs differ in how their kernels block the sums; 14 eps was
    measured on an AMD EPYC, where an absolute 1e-5 failed). A real bug, a wrong rotary angle or
    a missed bias, moves logits by O(1)."""
    ids = _ids(40)
    with torch.no_grad():
        reference = model(ids[None]).logits[0]  # (40, V)
    lean = llama.LeanLlama(model)
    cache = lean.new_cache()
    out, start = [], 0
    for k in (20, 1, 3, 5, 1, 10):
        out.append(lean.logits(lean.forward(ids[start : start + k], cache)))
        start += k
    assert start == 40 and cache.length == 40
    scale = reference.abs().max()
    diff = (torch.cat(out) - reference).abs().max()
    assert diff <= 32 * torch.finfo(torch.float32).eps * max(scale, 1.0), (diff, scale)


def test_rollback_moves_a_pointer_and_recomputes_the_same(model) -> None:
    ids = _ids(30)
    lean = llama.LeanLlama(model)
    cache = lean.new_cache(64)
    keys = cache.k
    first = lean.logits(lean.forward(ids, cache))[-5:]
    cache.crop(25)
    assert cache.length == 25 and cache.k is keys  # nothing reallocated or copied
    again = lean.logits(lean.forward(ids[25:], cache))
    assert torch.allclose(again, first, atol=1e-5)


def test_cache_is_sized_to_the_call_not_the_model() -> None:
    """Qwen2.5 allows 32k positions; a 100-token answer must not allocate them."""
    config = Qwen2Config(**SMALL, num_key_value_heads=2, num_hidden_layers=1)
    config.max_position_embeddings = 32768
    m = _model(config)
    out = decoding.autoregressive_generate(m, _ids(10), 20, temperature=0, runtime="lean")
    assert out.stats.new_tokens == 20
    session = sessions.open_session(m, runtime="lean")
    session.reserve(10 + 20)
    assert session.cache.capacity == llama.CHUNK  # one chunk, not 32768 positions
    session.logits(_ids(llama.CHUNK + 5))  # grows in whole chunks when a call needs more
    assert session.cache.capacity == 2 * llama.CHUNK


def test_greedy_equals_transformers_generate(model) -> None:
    ids = _ids(12)
    ref = _generate(model, ids, 24)
    draft = _model(model.config, seed=1)  # a different random draft: rejections happen
    ar = decoding.autoregressive_generate(model, ids, 24, temperature=0, runtime="lean")
    spec = decoding.speculative_generate(model, draft, ids, 24, 4, temperature=0, runtime="lean")
    trees = tree.tree_speculative_generate(
        model, draft, ids, 24, (2, 2, 1), temperature=0, runtime="lean"
    )
    for out in (ar, spec, trees):
        assert out.tokens.tolist() == ref.tolist()
    assert spec.stats.acceptance_rate < 1  # the test saw rejections and rollbacks


def test_sampling_is_the_same_on_both_runtimes(model) -> None:
    """Same seed, same sampled tokens: the lean forward changes nothing but the speed."""
    draft = _model(model.config, seed=1)
    runs = {
        rt: decoding.speculative_generate(
            model,
            draft,
            _ids(8),
            20,
            3,
            temperature=1.0,
            generator=torch.Generator().manual_seed(0),
            runtime=rt,
        ).tokens.tolist()
        for rt in ("lean", "hf")
    }
    assert runs["lean"] == runs["hf"]


def test_tree_keeps_its_accepted_branch() -> None:
    """After a tree step the lean session holds the accepted branch's entries (no re-feed), and
    they equal what feeding the branch as a sequence would give."""
    m = _model(CONFIGS["llama-gqa-tied"])
    ids = _ids(10)
    session = sessions.open_session(m, runtime="lean")
    session.logits(ids)
    tokens, parents = torch.tensor([5, 7, 9, 11]), [-1, -1, 0, 2]  # root -> {0, 1}, 0 -> 2 -> 3
    rows = session.tree_logits(ids, tokens, parents)  # (5, V)
    path = [0, 2, 3]
    session.keep_branch(path)
    assert session.cached == 10 + 3 and session.cache.length == 13
    fresh = sessions.open_session(m, runtime="lean")
    full = fresh.logits(torch.cat([ids, tokens[path]]))  # (13, V)
    assert torch.allclose(rows[[0, 1, 3, 4]], full[[9, 10, 11, 12]], atol=1e-5)
    kept = session.cache.k[..., :13, :]
    assert torch.allclose(kept, fresh.cache.k[..., :13, :], atol=1e-5)
    nxt = torch.tensor([3])
    after = session.logits(torch.cat([ids, tokens[path], nxt]))  # feeds only the new token
    assert after.shape[0] == 1 and session.calls == 3
    assert torch.allclose(after, fresh.logits(torch.cat([ids, tokens[path], nxt])), atol=1e-5)


def test_a_tree_level_feeds_only_its_new_nodes() -> None:
    m = _model(CONFIGS["llama-gqa-tied"])
    ids = _ids(10)
    session = sessions.open_session(m, runtime="lean")
    session.logits(ids[:9])
    fed = []
    forward = session.lean.forward
    session.lean.forward = lambda tokens, *a, **k: (
        fed.append(len(tokens)) or forward(tokens, *a, **k)
    )
    session.tree_logits(ids, torch.tensor([1, 2]), [-1, -1])  # tail (1 token) + 2 nodes
    rows = session.tree_logits(ids, torch.tensor([1, 2, 3, 4]), [-1, -1, 0, 1])  # + 2 nodes
    assert fed == [3, 2] and rows.shape == (5, V)
    fresh = sessions.open_session(m, runtime="hf")
    fresh.logits(ids[:9])
    reference = fresh.tree_logits(ids, torch.tensor([1, 2, 3, 4]), [-1, -1, 0, 1])
    assert torch.allclose(rows, reference, atol=1e-5)


def test_uncovered_models_fall_back_or_raise() -> None:
    gpt2 = _model(GPT2Config(vocab_size=V, n_embd=32, n_layer=1, n_head=2))
    assert sessions.runtime_of(gpt2) == "hf" and isinstance(
        sessions.open_session(gpt2), sessions.HFSession
    )
    with pytest.raises(ValueError, match="not 'gpt2'"):
        sessions.open_session(gpt2, runtime="lean")
    windowed = _model(MistralConfig(**SMALL, num_key_value_heads=2, num_hidden_layers=1))
    windowed.config.sliding_window = 16
    assert "sliding window" in llama.lean_support(windowed)
    with pytest.warns(UserWarning, match="sliding window: running it with transformers"):
        assert sessions.runtime_of(windowed) == "hf"  # auto falls back, and says so
    with pytest.raises(ValueError, match="sliding window"):
        decoding.autoregressive_generate(windowed, _ids(4), 4, runtime="lean")
    with pytest.raises(ValueError, match="runtime must be one of"):
        sessions.open_session(windowed, runtime="fast")


def test_an_open_session_refuses_another_runtime() -> None:
    """A session passed in is returned as it is, on its own runtime: the default accepts it,
    the same runtime too, and the other one is refused, naming both (and so is `runtime_of`)."""
    m = _model(CONFIGS["llama-gqa-tied"])
    for runtime, other in (("lean", "hf"), ("hf", "lean")):
        session = sessions.open_session(m, runtime=runtime)
        assert sessions.open_session(session) is session
        assert sessions.open_session(session, runtime=runtime) is session
        for ask in (sessions.open_session, sessions.runtime_of):
            with pytest.raises(
                ValueError, match=f"'{other}', but this session runs on '{runtime}'"
            ):
                ask(session, runtime=other)
    mock_session = sessions.open_session(mock.MockLM(vocab_size=V))  # a mock has no runtime
    assert sessions.open_session(mock_session, runtime="lean") is mock_session


def test_sliding_window_model_decodes_past_its_window_on_hf() -> None:
    """transformers' sliding-window caches refuse `crop` past the window unless they record
    their past (HF session); greedy speculative output then equals `generate`."""
    config = MistralConfig(**SMALL, num_key_value_heads=2, num_hidden_layers=2, sliding_window=8)
    target, draft = _model(config), _model(config, seed=1)
    ids = _ids(6)
    ref = _generate(target, ids, 30)
    out = decoding.speculative_generate(target, draft, ids, 30, 4, temperature=0)
    assert out.tokens.tolist() == ref.tolist()


@pytest.mark.parametrize("runtime", ["lean", "hf"])
def test_a_session_refuses_a_sequence_whose_head_changed(runtime) -> None:
    session = sessions.open_session(_model(CONFIGS["llama-gqa-tied"]), runtime=runtime)
    session.logits(torch.tensor([1, 2, 3]))
    session.logits(torch.tensor([1, 2, 3, 4]))  # the same head, one new token
    with pytest.raises(ValueError, match="differ from the ones this session's cache holds"):
        session.logits(torch.tensor([1, 9, 3, 4, 5]))
    session.crop(1)  # back to the common prefix: now it is the same head
    assert session.logits(torch.tensor([1, 9, 3, 4, 5])).shape[0] == 4


SYNCS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__")


@pytest.mark.parametrize("setting", [dict(temperature=0), dict(temperature=1.0, top_k=20)])
def test_one_host_sync_per_speculative_step(setting, monkeypatch) -> None:
    """Draft, verify, accept and roll back without reading a tensor on the host, but once: the
    `.tolist()` that brings n, the next token, the drafts and the input checks over together."""
    target = _model(CONFIGS["llama-gqa-tied"])
    draft = _model(CONFIGS["llama-gqa-tied"], seed=1)
    counts, current = [], [0]
    for name in SYNCS:
        original = getattr(torch.Tensor, name)

        def counted(*args, _original=original, **kwargs):
            current[0] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    step = decoding.speculative_step

    def counted_step(*args, **kwargs):
        current[0] = 0
        out = step(*args, **kwargs)
        counts.append(current[0])
        return out

    monkeypatch.setattr(decoding, "speculative_step", counted_step)
    gen = torch.Generator().manual_seed(0)
    out = decoding.speculative_generate(
        target, draft, _ids(6), 30, 4, generator=gen, runtime="lean", **setting
    )
    assert out.stats.new_tokens == 30 and len(counts) == len(out.stats.steps) > 5
    assert set(counts) == {1}, counts


def test_unpacked_lean_forward_runs_on_the_models_own_parameters(model) -> None:
    """packed=False copies no weight: every tensor the lean forward reads is one of the model's
    own, so its memory is the model's plus the preallocated KV cache of the call."""
    lean = llama.LeanLlama(model, packed=False)
    own = {p.data_ptr() for p in model.parameters()}
    projections = [
        p for layer in lean.layers for p in vars(layer).values() if isinstance(p, Linear)
    ]
    lean.logits(lean.forward(_ids(3), lean.new_cache()))
    projections += lean.heads_by_vocab.values()
    assert all(p.packed is None for p in projections)
    read = [lean.embed, lean.norm, lean.lm_head] + [p.weight for p in projections]
    read += [p.bias for p in projections if p.bias is not None]
    read += [w for layer in lean.layers for w in (layer.attn_norm, layer.mlp_norm)]
    assert all(t.data_ptr() in own for t in read)
    cache = lean.new_cache(40)
    c = model.config
    kv_heads = c.num_key_value_heads or c.num_attention_heads
    per_position = 2 * c.num_hidden_layers * kv_heads * lean.head_dim * 4  # k and v, fp32
    assert cache.k.numel() * 4 * 2 == per_position * cache.capacity == per_position * llama.CHUNK


@pytest.mark.skipif(not can_pack(torch.ones(1)), reason="this torch cannot pack for oneDNN")
def test_packed_forward_computes_the_unpacked_logits(model) -> None:
    """The oneDNN copies sum in another order than MKL: equal to float32 rounding of the
    logits' scale (the bound of test_logits_match_transformers_in_chunks), chunk by chunk."""
    ids, out = _ids(30), {}
    for packed in (False, True):
        lean = llama.LeanLlama(model, packed=packed)
        cache, start, out[packed] = lean.new_cache(), 0, []
        for k in (20, 1, 3, 5, 1):
            out[packed].append(lean.logits(lean.forward(ids[start : start + k], cache)))
            start += k
        packs = [
            p.packed for layer in lean.layers for p in vars(layer).values() if isinstance(p, Linear)
        ]
        assert all((p is not None) == packed for p in packs)
    plain, packed = torch.cat(out[False]), torch.cat(out[True])
    scale = plain.abs().max()
    assert (packed - plain).abs().max() <= 32 * torch.finfo(torch.float32).eps * max(scale, 1.0)


@pytest.mark.skipif(not can_pack(torch.ones(1)), reason="this torch cannot pack for oneDNN")
def test_a_model_too_large_to_copy_is_not_packed_unless_told(model, monkeypatch) -> None:
    def packs(lean) -> set[bool]:
        return {
            p.packed is not None
            for layer in lean.layers
            for p in vars(layer).values()
            if isinstance(p, Linear)
        }

    monkeypatch.setattr(linear, "packing_wins", lambda shape: True)  # as if it measured faster
    assert packs(llama.LeanLlama(model)) == {True}  # a few MB of weights: packed
    monkeypatch.setattr(linear, "PACK_MAX_BYTES", 1024)  # as if the model had 1 KB to spare
    assert packs(llama.LeanLlama(model)) == {False}
    monkeypatch.setenv("SPECDEC_LAB_PACK", "1")
    assert packs(llama.LeanLlama(model)) == {True}
    monkeypatch.setenv("SPECDEC_LAB_PACK", "0")
    monkeypatch.setattr(linear, "PACK_MAX_BYTES", 2**40)
    assert packs(llama.LeanLlama(model)) == {False}


def test_lean_forward_is_built_once_and_rebuilt_when_a_weight_changes(model) -> None:
    """Sessions share one LeanLlama per model (packing copies every weight), but an in-place
    update, as a training step makes, rebuilds it: the lean logits follow the new weights."""
    model = copy.deepcopy(model)
    first = llama.LeanLlama.of(model)
    assert llama.LeanLlama.of(model) is first
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.mul_(1.5)
        reference = model(_ids(12)[None]).logits[0]  # (12, V)
    lean = llama.LeanLlama.of(model)
    assert lean is not first
    logits = lean.logits(lean.forward(_ids(12), lean.new_cache()))
    scale = reference.abs().max()
    assert (logits - reference).abs().max() <= 32 * torch.finfo(torch.float32).eps * max(scale, 1)


class _LoRALinear(torch.nn.Module):
    """A LoRA-style wrapper (as peft builds): the base layer plus a low-rank update."""

    def __init__(self, base: torch.nn.Linear, rank: int = 2) -> None:
        super().__init__()
        self.base_layer = base
        self.a = torch.nn.Linear(base.in_features, rank, bias=False)
        self.b = torch.nn.Linear(rank, base.out_features, bias=False)
        torch.nn.init.normal_(self.b.weight, std=0.5)

    @property
    def weight(self) -> torch.Tensor:  # what the lean forward would read, wrongly
        return self.base_layer.weight

    @property
    def bias(self):
        return self.base_layer.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base_layer(x) + self.b(self.a(x))


def _modifications():
    def hooked(m):
        m.model.layers[0].mlp.down_proj.register_forward_hook(lambda mod, inp, out: 2 * out)

    def pre_hooked(m):
        m.model.norm.register_forward_pre_hook(lambda mod, inp: (inp[0] * 3,))

    def lora(m):
        attn = m.model.layers[0].self_attn
        attn.q_proj = _LoRALinear(attn.q_proj)

    def quantised(m):
        m.config.quantization_config = {"quant_method": "bitsandbytes", "load_in_4bit": True}

    return {
        "forward hook": (hooked, "forward hook"),
        "pre-hook": (pre_hooked, "forward hook"),
        "LoRA-wrapped projection": (lora, "not a plain torch or transformers module"),
        "quantised": (quantised, "quantised"),
    }


@pytest.mark.parametrize("kind", sorted(_modifications()))
def test_a_modified_model_never_runs_on_the_lean_forward(kind) -> None:
    """auto falls back to transformers' forward (and says so): the logits are the modified
    model's own. Before, lean_support read only the config and the lean forward read `.weight`
    directly, computing the unmodified model's logits."""
    modify, reason = _modifications()[kind]
    model = _model(CONFIGS["llama-gqa-tied"])
    modify(model)
    assert reason in llama.lean_support(model)
    with pytest.warns(UserWarning, match="running it with transformers"):
        session = sessions.open_session(model)
    ids = _ids(12)
    with torch.no_grad():
        reference = model(ids[None]).logits[0, :, :V]
    assert torch.allclose(session.logits(ids), reference, atol=1e-5)


def test_a_gguf_model_is_covered_only_while_its_weights_are_plain_floats() -> None:
    """The weights decide, not the quantiser's flags (transformers 5.24 leaves `dequantize`
    False on its llama path, which unpacks every weight)."""
    model = _model(CONFIGS["llama-gqa-tied"])
    model.config.quantization_config = {"quant_method": "gguf", "dequantize": False}
    assert llama.lean_support(model) is None
    layer = model.model.layers[0].mlp.down_proj
    layer.weight = torch.nn.Parameter(layer.weight.to(torch.int8), requires_grad=False)
    assert "quantised" in llama.lean_support(model)


def test_the_hf_session_refuses_a_forward_without_the_cache_api() -> None:
    model = _model(CONFIGS["llama-gqa-tied"])
    real = model.forward

    def old_api(input_ids=None, past_key_values=None, **kwargs):  # transformers before `cache=`
        return real(input_ids=input_ids, **kwargs)

    model.forward = old_api
    with pytest.raises(RuntimeError, match="no `cache=` keyword"):
        sessions.HFSession(model)

    def ignores_it(input_ids=None, cache=None, **kwargs):  # takes the keyword, drops the cache
        return real(input_ids=input_ids, **kwargs)

    model.forward = ignores_it
    session = sessions.HFSession(model)
    with pytest.raises(RuntimeError, match="ignored `cache=`"):
        session.logits(_ids(6))


def test_each_new_model_hears_its_fallback_warning() -> None:
    """The once-per-model announcement forgets a model when it is collected. It used to remember
    `id(model)`: the next model, allocated at the freed address, was never warned (CI, stop 26)."""
    import gc

    for _ in range(3):
        model = _model(CONFIGS["llama-gqa-tied"])
        model.model.norm.register_forward_pre_hook(lambda mod, inp: inp)
        with pytest.warns(UserWarning, match="running it with transformers"):
            sessions.open_session(model)
        del model
        gc.collect()
    assert len(sessions._WARNED) == 0


def test_the_chain_mask_is_bottom_right_causal_and_fused_on_cuda() -> None:
    """k new tokens after L cached ones: token i sees entries 0 .. L + i. On CUDA in half
    precision the mask is SDPA's `causal_lower_right` (its fused kernels take it); elsewhere an
    explicit boolean mask. Both mean the same positions, and attend the same."""
    k, end = 4, 11
    explicit = llama.chain_mask(k, end, torch.device("cpu"), torch.float32)
    assert explicit.dtype == torch.bool and explicit.shape == (k, end)
    assert explicit.sum(1).tolist() == [end - k + 1 + i for i in range(k)]
    fused = llama.chain_mask(k, end, torch.device("cuda"), torch.bfloat16)
    assert isinstance(fused, torch.nn.attention.bias.CausalBias)
    assert torch.equal(fused._materialize("cpu"), explicit)
    on_mps = llama.chain_mask(k, end, torch.device("meta"), torch.float16)  # not CUDA: explicit
    assert isinstance(on_mps, torch.Tensor) and on_mps.dtype == torch.bool
    g = torch.Generator().manual_seed(0)
    q, kv = torch.randn(1, 4, k, 8, generator=g), torch.randn(2, 1, 2, end, 8, generator=g)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    via_bias = sdpa(q, *kv, attn_mask=fused, enable_gqa=True)
    assert torch.allclose(via_bias, sdpa(q, *kv, attn_mask=explicit, enable_gqa=True), atol=1e-6)


def test_the_kept_lean_forward_lets_the_model_go_and_be_copied() -> None:
    model = _model(CONFIGS["llama-gqa-tied"])
    sessions.open_session(model, runtime="lean").logits(_ids(4))
    copy.deepcopy(model)  # the packed copies are not the model's: nothing opaque to copy
    gone = weakref.ref(model)
    del model
    gc.collect()
    assert gone() is None


@pytest.mark.skipif(not can_pack(torch.ones(1)), reason="this torch cannot pack for oneDNN")
def test_packing_is_chosen_by_measurement(model, monkeypatch) -> None:
    """By default a weight is packed only where `packing_wins` says the packed product is
    faster here (its answer is not asserted: it is a timing)."""
    asked = []
    monkeypatch.setattr(linear, "packing_wins", lambda shape: asked.append(shape) or False)
    lean = llama.LeanLlama(model)
    projections = [
        p for layer in lean.layers for p in vars(layer).values() if isinstance(p, Linear)
    ]
    assert asked and all(p.packed is None for p in projections)


@pytest.mark.skipif(not can_pack(torch.ones(1)), reason="this torch cannot pack for oneDNN")
@pytest.mark.parametrize("packed_wins", [True, False])
def test_one_rows_path_is_chosen_on_the_models_own_forward(model, monkeypatch, packed_wins):
    """With packing chosen by measurement, the model times its own one-token forward each way
    of `llama.ONE_ROW_PATHS` and sends one row down the fastest: every packed copy and every LM
    head built later follows that choice (forced here through the margin, since a timing is not
    asserted), a spy on `F.linear` sees no one-row product when a packed path won, and the logits
    stay the unpacked forward's to float32 rounding."""
    monkeypatch.setattr(linear, "packing_wins", lambda shape: True)  # every weight has a copy
    monkeypatch.setattr(llama, "PROBE_MARGIN", 1e9 if packed_wins else 0.0)
    lean = llama.LeanLlama(model)
    assert set(lean.one_row_seconds) == set(llama.ONE_ROW_PATHS)
    assert all(0 < t < 1 for t in lean.one_row_seconds.values())  # each way timed
    timed = lean.one_row_seconds
    fastest_packed = min((m for m in timed if m), key=timed.get)
    assert lean.one_row_rows == (fastest_packed if packed_wins else 0)
    head = lean.logits(torch.zeros(1, model.config.hidden_size), vocab_size=50)  # a new head
    assert head.shape == (1, 50)
    assert {p.one_row_rows for p in lean.linears()} == {lean.one_row_rows}
    rows = []

    def spy(x, w, b=None):
        rows.append(x.numel() // x.shape[-1])
        return torch.nn.functional.linear(x, w, b)

    plain = llama.LeanLlama(model, packed=False)
    ids, out = _ids(30), {}
    for name, forward in (("plain", plain), ("chosen", lean)):
        cache, start, out[name] = forward.new_cache(), 0, []
        for k in (20, 1, 3, 1):
            if name == "chosen" and k == 1:
                monkeypatch.setattr(linear, "F", type("F", (), {"linear": staticmethod(spy)}))
            out[name].append(forward.logits(forward.forward(ids[start : start + k], cache)))
            monkeypatch.setattr(linear, "F", torch.nn.functional)
            start += k
    assert (rows == []) is packed_wins  # packed: no one-row product left to F.linear
    a, b = torch.cat(out["plain"]), torch.cat(out["chosen"])
    assert (a - b).abs().max() <= 32 * torch.finfo(torch.float32).eps * max(a.abs().max(), 1.0)


@pytest.mark.skipif(not can_pack(torch.ones(1)), reason="this torch cannot pack for oneDNN")
@pytest.mark.parametrize("rows", [0, 1, 4, 6])
def test_one_row_padded_with_zeros_is_the_same_product(rows) -> None:
    """A row sent through the packed copy alone or beside zero rows comes back as one row of
    x W^T + b, to float32 rounding, in the input's shape."""
    gen = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(48, 32, generator=gen), torch.randn(48, generator=gen)
    layer = Linear(weight, bias, packed=True, one_row_rows=rows)
    for x in (torch.randn(32, generator=gen), torch.randn(1, 32, generator=gen)):
        y = layer(x)
        assert y.shape == (*x.shape[:-1], 48)
        assert torch.allclose(y, x @ weight.T + bias, atol=1e-5, rtol=1e-5)


def test_a_forward_told_how_to_pack_measures_nothing(model) -> None:
    """`packed` True or False is taken as said: no one-token timing, one row by `F.linear`."""
    for packed in (True, False):
        lean = llama.LeanLlama(model, packed=packed)
        assert lean.one_row_seconds == {} and lean.one_row_rows == 0
        assert not any(p.one_row_rows for p in lean.linears())


@pytest.mark.skipif(not can_pack(torch.ones(1)), reason="this torch cannot pack for oneDNN")
def test_the_packing_probe_answers_once_per_shape() -> None:
    linear.packing_wins.cache_clear()
    first = linear.packing_wins((64, 32))
    assert isinstance(first, bool) and linear.packing_wins((64, 32)) is first
    assert linear.packing_wins.cache_info().hits >= 1
