"""The whole Llama-family model, in one screen: a lean forward over a transformers model's weights.

Why. A 1M-parameter draft does almost no arithmetic per token, so its forward time is set by
*overhead*: Python, module dispatch, hooks, mask building, cache bookkeeping. The forward below
runs the same weights and took 28% to 50% less time than transformers' eager one for the draft's
one-token forward on the 2-core CPUs we measured (notebook 05 measures it on your machine). Its
matmuls go through `linear.Linear`. Its **preallocated KV cache** rolls back by moving a length
pointer (vLLM v1 does the same by not advancing its computed-token count; gpt-fast indexes a
static cache by position).

Covered: Llama and SmolLM2 (grouped-query attention, tied embeddings), Qwen2 (q/k/v biases,
untied head) and Mistral without a sliding window, with the model's own RoPE settings (default,
linear, llama3, yarn: we call the model's rotary module, so its scaling is the one applied).
`lean_support(model)` says why anything else is not covered; the sessions then fall back to
transformers' own forward rather than compute different logits.

Batch 1 only. Shapes: k = tokens fed in this call, L = cache length before it, d = hidden size,
H / Hkv = query / key-value heads, hd = head size, V = vocabulary.
"""

from __future__ import annotations

import math
import time
import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from specdec_lab.engine.linear import PROBE_MARGIN, Linear, model_packing

FAMILIES = ("llama", "qwen2", "mistral")
_ROPE_TYPES = ("default", "linear", "llama3", "yarn")  # static: a table per position suffices
CHUNK = 256  # the cache grows by whole chunks of positions
ONE_ROW_REPEATS = 5  # one-token forwards timed each way to choose plain decoding's path
ONE_ROW_PATHS = (0, 1, 4, 6)  # F.linear (0), or the packed copies over the row padded to m rows
_BUILT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its LeanLlama


def lean_support(model) -> str | None:
    """None if `LeanLlama(model)` computes the model's own logits, else the reason it would not."""
    config = getattr(model, "config", None)
    family = getattr(config, "model_type", type(model).__name__)
    if family not in FAMILIES:
        return f"the lean forward covers {', '.join(FAMILIES)}, not {family!r}"
    checks = [
        (getattr(config, "sliding_window", None) is None, "it has a sliding window"),
        (getattr(config, "hidden_act", "silu") == "silu", f"its activation is {config.hidden_act}"),
        (not getattr(config, "mlp_bias", False), "its MLP has biases"),
        (getattr(config, "pretraining_tp", 1) == 1, "it uses pretraining_tp > 1"),
        (_rope_type(config) in _ROPE_TYPES, f"its RoPE type is {_rope_type(config)!r}"),
        (getattr(config, "final_logit_softcapping", None) is None, "it soft-caps its logits"),
    ]
    for ok, why in checks:
        if not ok:
            return f"{family} model not covered: {why}"
    if (why := _modified(model)) is not None:
        return f"{family} model not covered: {why}"
    return None


def _weights_stamp(model) -> tuple:
    """Which tensors `model` holds, and how often each was written in place (`_version`)."""
    return tuple((p.data_ptr(), p._version, p.dtype, p.device) for p in model.parameters())


def _modified(model) -> str | None:
    """Why the model's forward computes something other than its plain weights (which the lean
    forward reads), if it does: an adapter, quantised weights, a wrapped projection or a hook.
    A model loaded from GGUF carries a quantiser but holds dequantised float weights: exact."""
    if getattr(model, "peft_config", None):
        return "it carries a peft adapter"
    quantization = getattr(model, "hf_quantizer", None) or getattr(
        model.config, "quantization_config", None
    )
    if quantization is not None and not _dequantised(model, quantization):
        return "its weights are quantised"
    nn_module = torch.nn.modules.module
    if nn_module._global_forward_hooks or nn_module._global_forward_pre_hooks:
        return "a global forward hook is registered"
    for name, module in model.named_modules():
        if module._forward_hooks or module._forward_pre_hooks or hasattr(module, "_hf_hook"):
            return f"{name or 'the model'} has a forward hook"
        if module.__class__.__module__.split(".")[0] not in ("torch", "transformers"):
            return f"{name} is a {type(module).__name__}, not a plain torch or transformers module"
    return None


def _dequantised(model, quantization) -> bool:
    """A GGUF checkpoint whose weights transformers unpacked to plain float tensors on load. Its
    quantiser's flags differ across versions (5.24 leaves `dequantize` False on its llama path,
    which unpacks every weight), so the weights themselves decide."""
    config = getattr(quantization, "quantization_config", quantization)
    fields = config if isinstance(config, dict) else vars(config)
    method = fields.get("quant_method")
    method = getattr(method, "value", method)  # transformers' QuantizationMethod enum
    plain = (torch.Tensor, torch.nn.Parameter)
    return method == "gguf" and all(
        type(p) in plain and p.is_floating_point() for p in model.parameters()
    )


def _rope_type(config) -> str:
    params = getattr(config, "rope_parameters", None) or {}
    return params.get("rope_type", params.get("type", "default"))


class KVCache:
    """Keys and values of every layer, preallocated: `k`, `v` are (layers, 1, Hkv, capacity, hd)
    (the 1 is the batch axis: PyTorch's CPU attention kernel is fastest on 4-D inputs).
    Positions [0, length) hold valid entries; `reserve` grows the buffers by `CHUNK` positions.
    """

    def __init__(self, layers: int, kv_heads: int, head_dim: int, dtype, device) -> None:
        self.k = torch.empty(layers, 1, kv_heads, 0, head_dim, dtype=dtype, device=device)
        self.v = torch.empty_like(self.k)
        self.length = 0

    @property
    def capacity(self) -> int:
        return self.k.shape[3]

    @torch.inference_mode()
    def reserve(self, positions: int) -> None:
        """Make room for `positions` entries in all (one copy of the valid part, if it grows)."""
        if positions <= self.capacity:
            return
        size = math.ceil(positions / CHUNK) * CHUNK
        for name in ("k", "v"):
            old = getattr(self, name)
            # zeros, not garbage: a static forward attends over every entry, masked (0 x NaN
            # would still be NaN)
            new = old.new_zeros(*old.shape[:3], size, old.shape[4])  # (layers, 1, Hkv, size, hd)
            new[..., : self.length, :] = old[..., : self.length, :]
            setattr(self, name, new)

    def crop(self, length: int) -> None:
        """Forget every position from `length` on: a pointer moves, nothing is copied."""
        self.length = min(self.length, length)

    @torch.inference_mode()
    def keep(self, start: int, rows: torch.Tensor) -> None:
        """Keep entries `start + rows` (ascending) as positions start, start+1, ...: a token tree's
        accepted branch moves down over its rejected siblings (SGLang keeps it by remapping)."""
        src, end = start + rows, start + rows.shape[0]  # (n,)
        self.k[..., start:end, :] = self.k[..., src, :]
        self.v[..., start:end, :] = self.v[..., src, :]
        self.length = end


@dataclass(frozen=True)
class Layer:
    """One decoder layer: its norms' weights and its projections (`Linear`s), the model's own."""

    attn_norm: torch.Tensor
    q: Linear
    k: Linear
    v: Linear
    o: Linear
    mlp_norm: torch.Tensor
    gate: Linear
    up: Linear
    down: Linear


class LeanLlama:
    """A Llama-family forward over `model`'s parameters and a preallocated `KVCache`. `packed`
    (None: as `linear.model_packing` and `linear.can_pack` say) gives each projection and the LM
    head a copy prepacked for oneDNN; False reads the model's own weights alone. With `packed`
    None, plain decoding's one-token forward then goes through the packed copies too where that
    measured faster here (`one_row_path`); True leaves one row to `F.linear`."""

    def __init__(self, model, packed: bool | None = None) -> None:
        if (why := lean_support(model)) is not None:
            raise ValueError(f"{why}; use runtime='hf' for this model")
        c = model.config
        self.heads = c.num_attention_heads
        self.kv_heads = c.num_key_value_heads or c.num_attention_heads
        self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        self.eps = c.rms_norm_eps
        self.scale = self.head_dim**-0.5
        decoder = model.get_decoder()
        self.embed = decoder.embed_tokens.weight  # (V', d)
        self.norm = decoder.norm.weight  # (d,)
        self.lm_head = model.get_output_embeddings().weight  # (V', d), maybe `embed` itself
        self.rotary = decoder.rotary_emb
        if packed is None:
            packed = model_packing(sum(p.numel() * p.element_size() for p in model.parameters()))
        self.packed = packed

        def linear(p) -> Linear:
            return Linear(p.weight, p.bias, packed)

        self.layers = [
            Layer(
                m.input_layernorm.weight,
                *(linear(p) for p in (a.q_proj, a.k_proj, a.v_proj, a.o_proj)),
                m.post_attention_layernorm.weight,
                *(linear(p) for p in (m.mlp.gate_proj, m.mlp.up_proj, m.mlp.down_proj)),
            )
            for m in decoder.layers
            for a in [m.self_attn]
        ]
        self.heads_by_vocab: dict[int | None, Linear] = {}  # the LM head, per vocab_size asked
        self.cos = self.sin = self.embed.new_empty(0, self.head_dim)  # (positions, hd) tables
        self.stamp = _weights_stamp(model)
        self.one_row_rows = 0  # one row through F.linear, unless measured faster packed
        self.one_row_seconds: dict[int, float] = {}  # the measurement: {rows: seconds}
        if packed is None and any(p.packed is not None for p in self.linears()):
            self.one_row_rows = self.one_row_path()

    def linears(self) -> list[Linear]:
        """Every projection of every layer, and the LM heads built so far."""
        found = [p for layer in self.layers for p in vars(layer).values() if isinstance(p, Linear)]
        return found + list(self.heads_by_vocab.values())

    @torch.inference_mode()
    def one_row_path(self, repeats: int = ONE_ROW_REPEATS) -> int:
        """Plain decoding's fastest path for one row here, of ONE_ROW_PATHS: 0 (`F.linear`) or m
        (each packed copy over the row and m - 1 rows of zeros), timed on this model's own
        one-token forward, LM head included: the fastest of `repeats` forwards each way,
        interleaved after a warm-up round, 8 tokens cached (the model streams its weights from
        memory, which `linear.packing_wins`' one cached weight cannot show). A packed path must
        take at most `linear.PROBE_MARGIN` of F.linear's time. Sets every packed copy's
        `one_row_rows`; keeps the seconds in `one_row_seconds`."""
        self.logits(self.embed[:1])  # builds the LM head, so that its one row is timed too
        packed = [p for p in self.linears() if p.packed is not None]
        ids = torch.arange(9, device=self.embed.device) % self.embed.shape[0]
        cache = self.new_cache(9)
        self.forward(ids[:8], cache)
        best = dict.fromkeys(ONE_ROW_PATHS, math.inf)
        for round_ in range(1 + repeats):
            for rows in best:
                for p in packed:
                    p.one_row_rows = rows
                cache.crop(8)
                start = time.perf_counter()
                self.logits(self.forward(ids[8:], cache))
                if round_:
                    best[rows] = min(best[rows], time.perf_counter() - start)
        fastest = min((m for m in best if m), key=best.get)
        chosen = fastest if best[fastest] <= PROBE_MARGIN * best[0] else 0
        for p in packed:
            p.one_row_rows = chosen
        self.one_row_seconds = best
        return chosen

    @classmethod
    def of(cls, model) -> LeanLlama:
        """`model`'s lean forward, built once (packing copies every weight) and reused while the
        model's weights stay the same tensors at the same version (a training step or a `.to()`
        rebuilds it). It holds the model's tensors, not the model: it goes when the model goes."""
        if (why := lean_support(model)) is not None:
            raise ValueError(f"{why}; use runtime='hf' for this model")
        lean = _BUILT.get(model)
        if lean is None or lean.stamp != _weights_stamp(model):
            lean = _BUILT[model] = cls(model)
        return lean

    def new_cache(self, positions: int = 0) -> KVCache:
        cache = KVCache(
            len(self.layers), self.kv_heads, self.head_dim, self.embed.dtype, self.embed.device
        )
        cache.reserve(positions)
        return cache

    @torch.inference_mode()
    def forward(
        self,
        tokens: torch.Tensor,
        cache: KVCache,
        positions: torch.Tensor | None = None,
        allowed: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Feed `tokens` (k,) after the cache's L entries; return the final hidden states (k, d).
        Token i sits at position L + i and sees the cache and tokens 0..i, unless a token tree
        passes its own `positions` (k,) and `allowed` (k, L + k)."""
        k, start = tokens.shape[0], cache.length
        end = start + k
        cache.reserve(end)
        cos, sin = self._rope(positions if positions is not None else slice(start, end))
        causal = allowed is None and start == 0 and k > 1  # a fresh prefill: SDPA's own mask
        if allowed is None and start > 0 and k > 1:  # token i sees entries 0 .. start + i
            allowed = chain_mask(k, end, tokens.device, self.embed.dtype)

        def write(i: int, keys: torch.Tensor, values: torch.Tensor):  # (1, Hkv, k, hd) each
            cache.k[i, ..., start:end, :] = keys
            cache.v[i, ..., start:end, :] = values
            return cache.k[i, ..., :end, :], cache.v[i, ..., :end, :]  # (1, Hkv, L + k, hd)

        x = self._decoder(tokens, cos, sin, write, allowed, causal)
        cache.length = end
        return x

    @torch.inference_mode()
    def forward_static(
        self,
        tokens: torch.Tensor,
        slots: torch.Tensor,
        cache: KVCache,
        positions: torch.Tensor | None = None,
        allowed: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`forward` with every shape fixed by k and the cache's capacity, and no host read: the
        form a CUDA graph (or any capture) can replay. `tokens`, `slots` (k,) and `positions` (k,)
        are device tensors: token i is written to cache entry `slots[i]` and rotated as position
        `positions[i]` (default: its slot). It attends over the whole capacity, through `allowed`
        (k, capacity), by default the chain's: entries 0 .. slots[i]. Entries past the valid ones
        must be finite (the cache is zeroed as it grows), and `prepare_static(capacity)` must have
        run. `cache.length` is the caller's to move: nothing here reads or sets it."""
        positions = slots if positions is None else positions
        if allowed is None:  # (k, capacity): token i sees entries 0 .. slots[i]
            entries = torch.arange(cache.capacity, device=slots.device)
            allowed = entries[None] <= slots[:, None]
        cos, sin = self.cos.index_select(0, positions), self.sin.index_select(0, positions)

        def write(i: int, keys: torch.Tensor, values: torch.Tensor):  # (1, Hkv, k, hd) each
            cache.k[i].index_copy_(2, slots, keys)
            cache.v[i].index_copy_(2, slots, values)
            return cache.k[i], cache.v[i]  # (1, Hkv, capacity, hd)

        return self._decoder(tokens, cos, sin, write, allowed, False)

    def prepare_static(self, capacity: int, vocab_size: int | None = None) -> None:
        """Build, before any capture, what the forward would otherwise build lazily: the RoPE
        tables for `capacity` positions and the LM head for `vocab_size`."""
        self._rope(slice(0, capacity))
        self.logits(self.embed.new_zeros(1, self.embed.shape[1]), vocab_size)

    def _decoder(self, tokens, cos, sin, write, allowed, causal: bool) -> torch.Tensor:
        """The decoder layers over `tokens` (k,) rotated by cos/sin (k, hd): `write(i, keys,
        values)` stores layer i's new keys and values and returns what attention reads; `allowed`
        is its mask (None: all, or SDPA's causal one if `causal`). Returns hidden states (k, d)."""
        k = tokens.shape[0]
        x = F.embedding(tokens, self.embed)  # (k, d)
        for i, w in enumerate(self.layers):
            h = _rms_norm(x, w.attn_norm, self.eps)
            q = w.q(h).view(1, k, self.heads, -1).transpose(1, 2)  # (1, H, k, hd)
            kk = w.k(h).view(1, k, self.kv_heads, -1).transpose(1, 2)
            v = w.v(h).view(1, k, self.kv_heads, -1).transpose(1, 2)
            keys, values = write(i, _rotate(kk, cos, sin), v)
            a = F.scaled_dot_product_attention(
                _rotate(q, cos, sin),
                keys,
                values,
                attn_mask=allowed,
                is_causal=causal,
                scale=self.scale,
                enable_gqa=True,
            )  # (1, H, k, hd)
            x = x + w.o(a.transpose(1, 2).reshape(k, -1))
            h = _rms_norm(x, w.mlp_norm, self.eps)
            x = x + w.down(F.silu(w.gate(h)) * w.up(h))
        return _rms_norm(x, self.norm, self.eps)  # (k, d)

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor, vocab_size: int | None = None) -> torch.Tensor:
        """The LM head on final hidden states (k, d): (k, vocab_size), padded rows never computed."""
        if vocab_size not in self.heads_by_vocab:
            head = Linear(self.lm_head[:vocab_size], None, self.packed, self.one_row_rows)
            self.heads_by_vocab[vocab_size] = head
        return self.heads_by_vocab[vocab_size](hidden)

    def _rope(self, positions: torch.Tensor | slice) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and signed sin (k, hd) at `positions`, from tables the model's rotary module fills
        once. The sign of the first half is folded into sin: see `_rotate`."""
        needed = positions.stop if isinstance(positions, slice) else int(positions.max()) + 1
        if needed > self.cos.shape[0]:
            size = math.ceil(needed / CHUNK) * CHUNK
            ids = torch.arange(size, device=self.embed.device)[None]  # (1, size)
            cos, sin = self.rotary(self.embed[:1], ids)  # (1, size, hd) in the model's dtype
            half = self.head_dim // 2
            self.cos, self.sin = cos[0], torch.cat([-sin[0, :, :half], sin[0, :, half:]], -1)
        if isinstance(positions, torch.Tensor):  # a tree's positions, built on the host: one
            positions = positions.to(self.cos.device, non_blocking=True)  # copy, no wait
        return self.cos[positions], self.sin[positions]


def chain_mask(k: int, end: int, device: torch.device, dtype: torch.dtype):
    """What k new tokens after `end - k` cached ones may attend to: token i sees entries
    0 .. end - k + i, a causal mask aligned to the bottom right. On CUDA in float16/bfloat16 it
    is `causal_lower_right`, which SDPA serves with its fused kernels (an explicit mask would
    send it to its math kernel, which upcasts to float32 and expands K/V for grouped-query
    attention); elsewhere an explicit boolean mask (k, end)."""
    if device.type == "cuda" and dtype in (torch.float16, torch.bfloat16):
        return causal_lower_right(k, end)
    return torch.ones(k, end, dtype=torch.bool, device=device).tril(end - k)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' LlamaRMSNorm: normalise in float32, cast back, then scale."""
    if x.dtype == torch.float32:
        return F.rms_norm(x, x.shape[-1:], weight, eps)  # the same, fused
    return weight * F.rms_norm(x.float(), x.shape[-1:], eps=eps).to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding of x (..., k, hd), as transformers computes it:
    x·cos + rotate_half(x)·sin with rotate_half(x) = (−x2, x1). Rolling x by hd/2 gives
    (x2, x1); the minus sign sits in `signed_sin`, so the result is bit-identical."""
    return x * cos + x.roll(x.shape[-1] // 2, -1) * signed_sin
