"""Roofline accounting and a ladder of Llama-shaped models: is *this* device memory-bound?

Speculative decoding (Leviathan et al., arXiv:2211.17192; p = target, q = draft) pays off because
one target forward over γ+1 tokens costs about as much as one over 1 token, as long as the
forward is *memory-bound*: the time goes into streaming the weights (and KV cache) from memory,
and the extra arithmetic hides behind it. This module measures where that stops being true on the
device at hand: device peaks (`measure_bandwidth`, `measure_matmul_flops`), the `LADDER` of model
shapes (~1M to ~7B parameters) timed by `latency_sweep`, and the roofline (`forward_flops`,
`forward_bytes`, `ridge_point`, `roofline_latency`, `find_knee`, `plot_roofline`).

Units: times in seconds, bandwidth in GB/s (1e9 bytes/s), compute in FLOP/s (one multiply-add is
2 FLOPs), arithmetic intensity in FLOP/byte.

Recorded-results schema (what a GPU script writes to `data/results/gpu-*.json` via
`records.save_results`; the notebook reads the same keys)::

    {"device_info": {...},          # env.device_info(device)
     "created": "2025-01-01T00:00:00+00:00",
     "results": {
        "dtype": "float16", "prefix": 32,
        "bandwidth_gbs": float, "matmul_flops": float,
        "models": {name: {"params": int, "ks": [int], "latency_s": [float], "knee": int}},
        "batch": {"target": name, "gamma": int, "batches": [int],    # optional
                  "t_k1_s": [float], "t_verify_s": [float]}}}

Latencies are medians in seconds; `ks` and `latency_s` are parallel lists, as are `batches`,
`t_k1_s` (target, k = 1) and `t_verify_s` (target, k = γ+1).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from specdec_lab.measure.timing import Timing, time_fn, timer

if TYPE_CHECKING:  # transformers' model classes take seconds to import: load them on first use
    from transformers import LlamaConfig, LlamaForCausalLM

CPU_MAX_PARAMS = 1_000_000_000
"""`build_model` refuses to allocate models larger than this on the CPU (a 7B fp32 is 27 GB)."""


# --- device peaks --------------------------------------------------------------------------


def measure_bandwidth(
    device: torch.device | str, nbytes: int = 2**28, *, warmup: int = 2, repeats: int = 5
) -> float:
    """Memory bandwidth in GB/s from a large tensor copy (`nbytes` read + `nbytes` written), far
    above the last-level cache (on a GPU use ~1 GiB). A peak is a best case, so this uses the
    fastest repeat (STREAM's convention): a busy neighbour can only slow a repeat down."""
    device = torch.device(device)
    n = nbytes // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    timing = time_fn(lambda: dst.copy_(src), device=device, warmup=warmup, repeats=repeats)
    return 2 * n * 4 / timing.min / 1e9


def measure_matmul_flops(
    device: torch.device | str,
    n: int = 1024,
    dtype: torch.dtype = torch.float32,
    *,
    warmup: int = 2,
    repeats: int = 5,
) -> float:
    """Dense matmul throughput in FLOP/s (an (n, n) @ (n, n) product is 2·n³ FLOPs), the fastest
    repeat. On a GPU use a large n (e.g. 8192) and half precision to near the tensor-core peak."""
    device = torch.device(device)
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    timing = time_fn(lambda: torch.mm(a, b, out=out), device=device, warmup=warmup, repeats=repeats)
    return 2 * n**3 / timing.min


# --- model shapes --------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelShape:
    """A Llama-shaped decoder, described by the numbers that set its cost."""

    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    vocab_size: int = 32000
    num_kv_heads: int | None = None  # None: plain multi-head attention (kv heads == heads)
    tie_embeddings: bool = False

    def config(self, **overrides: Any) -> LlamaConfig:
        """A `transformers.LlamaConfig` with this shape (`overrides` go to the config)."""
        from transformers import LlamaConfig

        shape = dict(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_heads,
            num_key_value_heads=self.num_kv_heads or self.num_heads,
            tie_word_embeddings=self.tie_embeddings,
            max_position_embeddings=4096,
        )
        return LlamaConfig(**(shape | overrides))

    @property
    def params(self) -> int:
        return param_count(self.config())


LADDER: dict[str, ModelShape] = {
    s.name: s
    for s in [
        ModelShape("tiny-1M", 128, 2, 4, 384, vocab_size=2048),
        ModelShape("mini-8M", 256, 4, 4, 768, vocab_size=8192),
        ModelShape("small-29M", 512, 6, 8, 1536, vocab_size=8192),
        ModelShape("base-134M", 768, 12, 12, 2048),  # GPT-2 small class
        ModelShape("medium-374M", 1024, 24, 16, 2816),  # GPT-2 medium class
        ModelShape("large-795M", 1280, 36, 20, 3456),  # GPT-2 large class
        ModelShape("1B", 2048, 16, 32, 8192, num_kv_heads=8),  # Llama-3.2-1B-like (32k vocab)
        ModelShape("3B", 3200, 26, 32, 8640),  # OpenLLaMA-3B shape
        ModelShape("7B", 4096, 32, 32, 11008),  # Llama-2-7B shape
    ]
}
"""Model shapes from ~1M to ~7B parameters; the name's suffix is the parameter count."""

CPU_LADDER: tuple[str, ...] = ("tiny-1M", "small-29M", "base-134M")
"""A ladder that times in seconds on a 2-core CPU: overhead-bound, in between, and compute-bound
past a few tokens. `large-795M` also fits in CPU memory (slowly)."""

GPU_LADDER: tuple[str, ...] = ("small-29M", "base-134M", "large-795M", "1B", "3B", "7B")
"""A ladder for one modern GPU in half precision (7B fp16 is ~13.5 GB of weights)."""


def build_model(
    shape: ModelShape | LlamaConfig,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    *,
    seed: int = 0,
) -> LlamaForCausalLM:
    """A randomly initialised `LlamaForCausalLM` built directly on `device` ("meta": shapes without
    memory) in `dtype`, in eval mode. Initialisation draws from a forked (CPU and CUDA) RNG seeded
    with `seed`, leaving the global RNG untouched. Refuses more than `CPU_MAX_PARAMS` on the CPU."""
    device = torch.device(device)
    # a copy: transformers writes the dtype into the config it is given
    config = shape.config() if isinstance(shape, ModelShape) else copy.deepcopy(shape)
    n = param_count(config)
    if device.type == "cpu" and n > CPU_MAX_PARAMS:
        raise ValueError(
            f"refusing to allocate a {n / 1e9:.1f}B-parameter model on the CPU; "
            "use a GPU, or device='meta' to inspect shapes"
        )
    cuda = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda), device:
        torch.manual_seed(seed)  # seeds CUDA too
        from transformers import LlamaForCausalLM

        model = LlamaForCausalLM._from_config(config, dtype=dtype)
    return model.eval()


# --- latency of one forward over k new tokens ----------------------------------------------


@torch.inference_mode()
def latency_sweep(
    model: LlamaForCausalLM,
    ks: Sequence[int],
    batch: int = 1,
    *,
    prefix: int = 32,
    warmup: int = 2,
    repeats: int = 5,
    generator: torch.Generator | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> list[Timing]:
    """One `Timing` (`repeats` samples) per k in `ks` of a forward of k new tokens per sequence
    (k = γ+1: a verification), logits included, on a `prefix`-token KV cache cropped back after
    every forward, untimed. After `warmup` calls per k, the repeats run in interleaved rounds, so
    a burst of load spreads over all ks. Token ids come from `generator` (seeded 0 if None)."""
    if not ks or min(ks) < 1 or batch < 1 or prefix < 1:
        raise ValueError(
            f"need ks, batch, prefix >= 1, got ks={ks}, batch={batch}, prefix={prefix}"
        )
    device = next(model.parameters()).device
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    ids = torch.randint(model.config.vocab_size, (batch, prefix + max(ks)), generator=gen)
    ids = ids.to(device)  # (batch, prefix + max k)
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    model(ids[:, :prefix], cache=cache, use_cache=True)  # fill the cache: (batch, prefix)

    def forward(k: int) -> None:
        model(ids[:, prefix : prefix + k], cache=cache, use_cache=True)  # (batch, k) new tokens

    for k in ks:
        for _ in range(warmup):
            forward(k)
            cache.crop(-k)  # transformers 5.x: crop takes a NEGATIVE count of tokens to drop
    samples: list[list[float]] = [[] for _ in ks]
    for _ in range(repeats):
        for i, k in enumerate(ks):
            with timer(device, clock) as sw:
                forward(k)
            cache.crop(-k)  # back to `prefix` tokens, outside the timed region
            samples[i].append(sw.seconds)
    return [Timing(tuple(s)) for s in samples]


def forward_latency(model: LlamaForCausalLM, k: int, batch: int = 1, **sweep: Any) -> Timing:
    """`latency_sweep` for a single k: the time of one forward of `k` new tokens per sequence for
    `batch` sequences on top of a cached prefix (keywords as in `latency_sweep`)."""
    return latency_sweep(model, [k], batch, **sweep)[0]


# --- roofline accounting -------------------------------------------------------------------


def _dims(config: LlamaConfig) -> tuple[int, int, int, int, int, int, int]:
    d, n_layers = config.hidden_size, config.num_hidden_layers
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or d // heads
    return d, n_layers, heads, kv_heads, head_dim, config.intermediate_size, config.vocab_size


def matmul_params(config: LlamaConfig) -> int:
    """Weights that take part in a matmul each forward: attention, MLP and the LM head (not the
    embedding table, a lookup of a few rows, nor the norm gains)."""
    d, n_layers, heads, kv_heads, hd, inter, vocab = _dims(config)
    attn = d * heads * hd * 2 + d * kv_heads * hd * 2  # q, o and k, v projections
    mlp = 3 * d * inter  # gate, up, down
    return n_layers * (attn + mlp) + vocab * d  # + lm_head


def param_count(config: LlamaConfig | ModelShape) -> int:
    """Total parameters of `LlamaForCausalLM(config)` (equals `sum(p.numel())` of the model)."""
    if isinstance(config, ModelShape):
        config = config.config()
    d, n_layers, _, _, _, _, vocab = _dims(config)
    norms = d * (2 * n_layers + 1)  # two RMSNorms per layer + the final one
    embed = 0 if config.tie_word_embeddings else vocab * d  # a tied table is the lm_head itself
    return matmul_params(config) + embed + norms


def kv_cache_bytes(config: LlamaConfig, tokens: int, batch: int = 1, bytes_per_el: int = 2) -> int:
    """Bytes of keys + values for `tokens` positions of `batch` sequences across all layers."""
    _, n_layers, _, kv_heads, hd, _, _ = _dims(config)
    return 2 * n_layers * kv_heads * hd * tokens * batch * bytes_per_el


def forward_flops(config: LlamaConfig, k: int, batch: int = 1, context: int = 0) -> int:
    """FLOPs of one forward over `k` new tokens for `batch` sequences with `context` cached:
    2·matmul_params per token, plus attention's Q·Kᵀ and A·V, 2·2·heads·head_dim FLOPs per pair
    per layer over the full k×(context+k) block (as SDPA with a causal mask computes it)."""
    _, n_layers, heads, _, hd, _, _ = _dims(config)
    attn = 4 * n_layers * heads * hd * k * (context + k) * batch
    return 2 * matmul_params(config) * k * batch + attn


def forward_bytes(
    config: LlamaConfig, k: int, batch: int = 1, context: int = 0, bytes_per_el: int = 2
) -> int:
    """Bytes moved from memory by one forward, a lower bound: every matmul weight, the cached
    keys and values, and the new ones written, once each (activations stay in cache)."""
    weights = matmul_params(config) * bytes_per_el
    return weights + kv_cache_bytes(config, context + k, batch, bytes_per_el)


def arithmetic_intensity(
    config: LlamaConfig, k: int, batch: int = 1, context: int = 0, bytes_per_el: int = 2
) -> float:
    """FLOP per byte of one forward: ≈ k·batch·2/bytes_per_el while the weights dominate."""
    flops = forward_flops(config, k, batch, context)
    return flops / forward_bytes(config, k, batch, context, bytes_per_el)


def ridge_point(flops_per_s: float, gb_per_s: float) -> float:
    """The roofline's ridge in FLOP/byte: below it a kernel is memory-bound, above compute-bound."""
    return flops_per_s / (gb_per_s * 1e9)


def roofline_time(flops: float, nbytes: float, flops_per_s: float, gb_per_s: float) -> float:
    """Roofline lower bound on run time (s): the slower of doing the maths and moving the bytes."""
    return max(flops / flops_per_s, nbytes / (gb_per_s * 1e9))


def roofline_latency(
    config: LlamaConfig,
    k: int,
    batch: int = 1,
    context: int = 0,
    bytes_per_el: int = 2,
    *,
    flops_per_s: float,
    gb_per_s: float,
) -> float:
    """Roofline lower bound (s) on one forward of `k` new tokens: `roofline_time` applied to
    `forward_flops` and `forward_bytes`."""
    flops = forward_flops(config, k, batch, context)
    nbytes = forward_bytes(config, k, batch, context, bytes_per_el)
    return roofline_time(flops, nbytes, flops_per_s, gb_per_s)


OVERHEAD_BOUND = 2.0
"""A one-token forward over this many times its memory floor is bound by overhead (kernel
launches, Python), not by bytes: the course's line between the two regimes."""


def regime(t1_s: float, floor_s: float) -> str:
    """The regime a one-token forward's time names against its memory floor (its bytes over the
    measured bandwidth): "overhead-bound" over `OVERHEAD_BOUND` times it, else "memory-bound".
    (Compute-bound is a property of larger k: past the knee of the t(k) curve.)"""
    if not (t1_s > 0 and floor_s > 0):
        raise ValueError(f"times must be positive, got t(1) = {t1_s} and floor = {floor_s}")
    return "overhead-bound" if t1_s > OVERHEAD_BOUND * floor_s else "memory-bound"


def find_knee(ks: Sequence[int], latencies: Sequence[float], tol: float = 0.1) -> int:
    """The largest k up to which latency stays within (1 + tol) × latency at k = 1 (`ks` must
    contain 1): verifying up to `knee` tokens is "free". A noisy dip past the first k over the
    bound cannot move the knee."""
    if len(ks) != len(latencies):
        raise ValueError(f"{len(ks)} ks but {len(latencies)} latencies")
    pairs = sorted(zip(ks, latencies, strict=True))
    if not pairs or pairs[0][0] != 1:
        raise ValueError("ks must include k = 1 (the latency every other k is compared to)")
    bound = (1 + tol) * pairs[0][1]
    knee = 1
    for k, t in pairs:
        if t > bound:
            break
        knee = k
    return knee


def climb_start(ks: Sequence[int], latencies: Sequence[float], tol: float = 0.1) -> int:
    """The last k before the curve climbs for good: from the next grid point on, each k costs
    more than (1 + tol) times the largest grid k at or below k / 2. Unlike `find_knee`'s band
    around t(1), a one-time step survives it: a GPU's curve that jumps 10-25% from k = 1 to 2
    (another kernel) and then stays flat to k = 256 climbs nowhere, so this is 256 where the band
    says 1. The last k measured means "flat as far as measured"."""
    pairs = sorted(zip(ks, latencies, strict=True))
    if not pairs or pairs[0][0] != 1:
        raise ValueError("ks must include k = 1 (the latency every other k is compared to)")
    t = dict(pairs)
    grid = [k for k, _ in pairs]
    knee = grid[-1]
    for i in range(len(grid) - 1, 0, -1):  # walk back while every later doubling climbs
        half = max(k for k in grid if k <= grid[i] / 2)
        if t[grid[i]] <= (1 + tol) * t[half]:
            break
        knee = grid[i - 1]
    return knee


@dataclass
class RooflineData:
    """What `plot_roofline` drew, so a notebook can assert on numbers rather than pixels."""

    intensity: list[float]  # x of the roof line (FLOP/byte)
    roof: list[float]  # attainable FLOP/s at each x
    ridge: float  # FLOP/byte
    points: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # (AI, FLOP/s)


def plot_roofline(
    flops_per_s: float,
    gb_per_s: float,
    points: dict[str, Sequence[tuple[float, float]]] | None = None,
    *,
    ax: Any = None,
    label: str = "roof",
    color: str | None = None,
    intensity_range: tuple[float, float] = (0.1, 1000.0),
) -> RooflineData:
    """Draw the roofline min(peak, AI × bandwidth) on log-log axes, and return what was drawn.

    `points` maps a series label to its (arithmetic intensity FLOP/byte, achieved FLOP/s) pairs,
    drawn as one line of markers (e.g. one model as k grows). Draws onto `ax` if given (the caller
    owns the figure); otherwise onto a new figure that is closed before returning."""
    import matplotlib.pyplot as plt
    import numpy as np

    own = ax is None
    if own:
        fig, ax = plt.subplots()
    ridge = ridge_point(flops_per_s, gb_per_s)
    lo, hi = intensity_range
    x = np.geomspace(lo, hi, 64).tolist()
    if lo < ridge < hi:
        x = sorted([*x, ridge])  # so the corner of the roof is drawn exactly
    roof = [min(flops_per_s, xi * gb_per_s * 1e9) for xi in x]
    (line,) = ax.loglog(x, roof, lw=2, color=color, label=f"{label}: ridge {ridge:.1f} FLOP/B")
    ax.axvline(ridge, color=line.get_color(), ls=":", lw=1)
    series = {name: [(float(a), float(f)) for a, f in pts] for name, pts in (points or {}).items()}
    for name, pts in series.items():
        ax.loglog([a for a, _ in pts], [f for _, f in pts], "o-", ms=4, label=name)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("FLOP/s")
    ax.legend(fontsize="small")
    if own:
        plt.close(fig)
    return RooflineData(intensity=x, roof=roof, ridge=ridge, points=series)
