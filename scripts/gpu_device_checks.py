"""What only an accelerator can tell: the part of `scripts/gpu_check.py` that needs one.

Each check returns a JSON-able dict; `gpu_check.py` saves each as soon as it finishes (a run cut
short keeps what it finished). At smoke sizes (a CPU, or a GPU dry run) every check runs on tiny
shapes, so CI runs this code end to end; only the figures need the GPU.

- `verify_costs`: t(k) for k = 1..16 through the lean and the transformers sessions at 1B and 7B
  shapes (random weights), and the memory guard's estimate beside `max_memory_allocated()`;
- `syncs_per_step`: host syncs per speculative step, greedy and T = 1, with no, a host and a device
  generator, counted by CUDA's sync debug mode (one warning per synchronising call);
- `step_profile`: a `torch.profiler` table of one speculative step, and the SDPA kernel that the
  chain's verify forward takes at a Qwen2.5-7B layer's width;
- `lean_vs_hf`: the largest logit difference between the lean forward and transformers' at real
  widths (Qwen2.5-7B attention with q/k/v biases and head_dim 128; Llama-3 RoPE), in bfloat16 and
  float32;
- `greedy_mismatches`: how often greedy speculative output differs from greedy autoregressive
  output on the embedded pair, per dtype (float32: never; half precision: rounding of batched
  against single-token forwards).
"""

from __future__ import annotations

import warnings

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

from specdec_lab import data, decoding, drafters, env, models
from specdec_lab.engine import sessions
from specdec_lab.measure import profiling, timing
from specdec_lab.sampling import SamplingConfig

SDPA_KERNELS = ("flash", "efficient", "cudnn", "math")


def half_dtype(device: torch.device) -> torch.dtype:
    """What the course runs an accelerator in (`env.default_dtype`); float32 on a CPU."""
    return env.default_dtype(device) if device.type != "cpu" else torch.float32


def verify_costs(device: torch.device, smoke: bool) -> dict:
    dtype = half_dtype(device)
    shapes = ("tiny-1M",) if smoke else ("1B", "7B")
    ks = [1, 2, 4] if smoke else list(range(1, 17))
    out: dict = {"dtype": str(dtype).removeprefix("torch."), "ks": ks, "shapes": {}}
    for name in shapes:
        shape = profiling.LADDER[name]
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        model = profiling.build_model(shape, device=device, dtype=dtype)
        t = timing.runtime_sweep(model, ks, ("hf", "lean"), repeats=2 if smoke else 5)
        row = {rt: [round(1e3 * x, 4) for x in ts] for rt, ts in t.items()}
        row["unit"] = "ms per forward, min of the repeats"
        row["estimate_bytes"] = models.model_bytes(shape.config(), dtype)
        if device.type == "cuda":
            row["max_memory_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
        out["shapes"][name] = row
        del model
        env.release_memory(device)
    return out


def _embedded(device: torch.device, dtype: torch.dtype | None = None):
    return models.load_pair("embedded", device, dtype or half_dtype(device))


def syncs_per_step(device: torch.device, smoke: bool) -> dict:
    if device.type != "cuda":
        return {"skipped": "counted with CUDA's sync debug mode, which only CUDA has"}
    pair = _embedded(device)
    prompt = pair.encode(data.load_prompts("code", 1)[0]["text"])
    generators = {
        "none": lambda: None,
        "host": lambda: torch.Generator().manual_seed(0),
        "device": lambda: torch.Generator(device).manual_seed(0),
    }
    out: dict = {}
    real = decoding.speculative_step
    for temperature in (0.0, 1.0):
        for kind, make in generators.items():
            per_step: list[int] = []

            def counted(*args, per_step=per_step, **kwargs):
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    torch.cuda.set_sync_debug_mode("warn")
                    try:
                        result = real(*args, **kwargs)
                    finally:
                        torch.cuda.set_sync_debug_mode("default")
                per_step.append(sum("synchroniz" in str(w.message) for w in caught))
                return result

            decoding.speculative_step = counted
            try:
                decoding.speculative_generate(
                    pair.target, pair.draft, prompt, 32, 4, temperature=temperature,
                    generator=make(), vocab_size=pair.vocab_size,
                )  # fmt: skip
            finally:
                decoding.speculative_step = real
            out[f"T={temperature:g}, {kind} generator"] = {
                "steps": len(per_step),
                "max": max(per_step),
                "mean": round(sum(per_step) / len(per_step), 2),
            }
    return out


def _qwen_layer(device, dtype, smoke: bool):
    """Two layers at Qwen2.5-7B's attention width (28 heads, 4 KV heads, head_dim 128, biased
    q/k/v), random weights; at smoke sizes the same proportions, narrower."""
    width, heads, kv, mlp = (256, 4, 2, 512) if smoke else (3584, 28, 4, 18944)
    config = Qwen2Config(
        vocab_size=1024, hidden_size=width, intermediate_size=mlp, num_hidden_layers=2,
        num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=4096,
    )  # fmt: skip
    return _random(config, device, dtype)


def _llama3_layer(device, dtype, smoke: bool):
    """Two layers of Llama-3-8B's shape with its RoPE scaling, random weights."""
    width, heads, kv, mlp = (256, 4, 2, 512) if smoke else (4096, 32, 8, 14336)
    rope = {
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
    }  # fmt: skip
    config = LlamaConfig(
        vocab_size=1024, hidden_size=width, intermediate_size=mlp, num_hidden_layers=2,
        num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=131072,
        rope_parameters=rope,
    )  # fmt: skip
    return _random(config, device, dtype)


def _random(config, device, dtype):
    with torch.device(device):
        torch.manual_seed(0)
        return AutoModelForCausalLM.from_config(config, dtype=dtype).eval()


def step_profile(device: torch.device, smoke: bool) -> dict:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    pair = _embedded(device)
    prompt = pair.encode(data.load_prompts("code", 1)[0]["text"])
    decoding.speculative_generate(pair.target, pair.draft, prompt, 8, 4, temperature=0.0)  # warm
    target = sessions.open_session(pair.target, pair.vocab_size)
    drafter = drafters.ModelDrafter(sessions.open_session(pair.draft, pair.vocab_size))
    ids = prompt.to(device)
    target.logits(ids[:-1])
    with profile(activities=activities) as prof:
        decoding.speculative_step(target, drafter, ids, 4, SamplingConfig(0.0))
        env.synchronize(device)
    sort = "cuda_time_total" if device.type == "cuda" else "cpu_time_total"
    table = prof.key_averages().table(sort_by=sort, row_limit=20)

    layer = _qwen_layer(device, half_dtype(device), smoke)
    session = sessions.open_session(layer, runtime="lean")
    chain = torch.randint(1024, (69,), device=device)
    session.logits(chain[:64])
    with profile(activities=activities) as verify_prof:
        session.logits(chain)  # 5 new tokens after 64 cached: the chain's verify forward
        env.synchronize(device)
    names = {e.key for e in verify_prof.key_averages()}
    kernels = sorted(k for k in SDPA_KERNELS if any(k in n and "attention" in n for n in names))
    return {"step_table": table, "verify_sdpa_kernels": kernels}


def lean_vs_hf(device: torch.device, smoke: bool) -> dict:
    out = {}
    for name, build in (("qwen2.5-7b attention", _qwen_layer), ("llama-3 rope", _llama3_layer)):
        for dtype in dict.fromkeys((half_dtype(device), torch.float32)):
            model = build(device, dtype, smoke)
            ids = torch.randint(1024, (48,), generator=torch.Generator().manual_seed(1))
            lean_session = sessions.open_session(model, runtime="lean")
            hf_session = sessions.open_session(model, runtime="hf")
            assert (lean_session.runtime, hf_session.runtime) == ("lean", "hf")
            lean, hf = (s.logits(ids).float() for s in (lean_session, hf_session))
            out[f"{name}, {str(dtype).removeprefix('torch.')}"] = {
                "max_abs_diff": float((lean - hf).abs().max()),
                "logit_std": float(hf.std()),
                "argmax_agree": float((lean.argmax(-1) == hf.argmax(-1)).float().mean()),
            }
            del model
            env.release_memory(device)
    return out


def greedy_mismatches(device: torch.device, smoke: bool) -> dict:
    dtypes = [torch.float32] + ([torch.bfloat16, torch.float16] if device.type != "cpu" else [])
    prompts = data.load_prompts("code", 2 if smoke else 8)
    n_new = 16 if smoke else 64
    out = {}
    for dtype in dtypes:
        pair = _embedded(device, dtype)
        differ, first = 0, []
        for p in prompts:
            ids = pair.encode(p["text"])
            kw = {"temperature": 0.0, "vocab_size": pair.vocab_size}
            ar = decoding.autoregressive_generate(pair.target, ids, n_new, **kw).tokens
            sd = decoding.speculative_generate(pair.target, pair.draft, ids, n_new, 4, **kw).tokens
            if not torch.equal(ar, sd):
                differ += 1
                first.append(int((ar != sd).nonzero()[0]))
        out[str(dtype).removeprefix("torch.")] = {
            "prompts": len(prompts),
            "new_tokens": n_new,
            "differ": differ,
            "first_difference_at": first,
        }
    return out


CHECKS = {
    "verify-costs": verify_costs,
    "syncs": syncs_per_step,
    "step-profile": step_profile,
    "lean-vs-hf": lean_vs_hf,
    "greedy-mismatches": greedy_mismatches,
}
