"""Tests for specdec_lab.measure.profiling: accounting, knee finding, timing plumbing and records.

Nothing here asserts a timing value (the machine may be busy); only counts, shapes and maths.
"""

from __future__ import annotations

import json

import pytest
import torch
from transformers import DynamicCache, LlamaConfig

from specdec_lab import theory
from specdec_lab.measure import profiling, records, timing

# A config small enough to count by hand: head_dim = 8 // 2 = 4, grouped-query attention.
HAND = LlamaConfig(
    vocab_size=32,
    hidden_size=8,
    intermediate_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
)
# Per layer: q 8·8 + o 8·8 + k 8·4 + v 8·4 = 192, MLP 3·8·16 = 384 -> 576; two layers 1152;
# lm_head 32·8 = 256 -> 1408 matmul weights. Embedding 256, norms 8·(2·2 + 1) = 40 -> 1704.
HAND_MATMUL, HAND_PARAMS = 1408, 1704


# --- knee finder --------------------------------------------------------------------------------

KS = [1, 2, 4, 8, 16, 32, 64]


def test_knee_flat_then_linear():
    latencies = [max(1.0, k / 8) for k in KS]  # free up to k = 8, then linear in k
    assert profiling.find_knee(KS, latencies, tol=0.1) == 8
    assert profiling.find_knee(KS, latencies, tol=1.0) == 16  # 2.0 ≤ 2.0 at k = 16


def test_knee_edges():
    assert profiling.find_knee(KS, [1.0] * len(KS)) == 64  # flat: everything is free
    assert profiling.find_knee(KS, [1.0 + k for k in KS], tol=0.0) == 1  # never free
    assert profiling.find_knee([1], [3.0]) == 1


def test_knee_stops_at_first_crossing_and_ignores_order():
    # a noisy dip at k = 8 after k = 4 already crossed must not move the knee
    ks, lat = [8, 1, 4, 2], [1.05, 1.0, 1.5, 1.08]
    assert profiling.find_knee(ks, lat, tol=0.1) == 2


def test_knee_rejects_bad_input():
    with pytest.raises(ValueError, match="k = 1"):
        profiling.find_knee([2, 4], [1.0, 1.0])
    with pytest.raises(ValueError):
        profiling.find_knee([1, 2], [1.0])


# --- accounting ---------------------------------------------------------------------------------


def test_param_and_matmul_counts_by_hand():
    assert profiling.matmul_params(HAND) == HAND_MATMUL
    assert profiling.param_count(HAND) == HAND_PARAMS


def test_flops_bytes_intensity_by_hand():
    k, batch, context = 3, 2, 5
    # 2 FLOPs per weight per token (6 tokens) + attention: 4 · layers 2 · heads 2 · head_dim 4
    # · k 3 · attended (5 + 3) · batch 2
    flops = 2 * HAND_MATMUL * 6 + 4 * 2 * 2 * 4 * 3 * 8 * 2
    assert profiling.forward_flops(HAND, k, batch, context) == flops == 19968
    # fp32 weights once + K and V for 8 positions · 2 layers · 1 kv head · head_dim 4 · batch 2
    nbytes = HAND_MATMUL * 4 + 2 * 2 * 1 * 4 * 8 * 2 * 4
    assert profiling.forward_bytes(HAND, k, batch, context, bytes_per_el=4) == nbytes == 6656
    assert profiling.kv_cache_bytes(HAND, tokens=8, batch=2, bytes_per_el=4) == 1024
    assert profiling.arithmetic_intensity(HAND, k, batch, context, bytes_per_el=4) == 3.0


def test_batch1_decode_intensity_is_about_two_flops_per_weight_byte():
    cfg = profiling.LADDER["7B"].config()
    ai = profiling.arithmetic_intensity(cfg, k=1, batch=1, context=0, bytes_per_el=2)
    assert ai == pytest.approx(1.0, rel=1e-3)  # 2 FLOPs per 2-byte weight
    assert profiling.arithmetic_intensity(cfg, k=8, bytes_per_el=2) == pytest.approx(8.0, rel=0.01)


@pytest.mark.parametrize("name", ["tiny-1M", "mini-8M"])
def test_param_count_matches_real_model(name):
    model = profiling.build_model(profiling.LADDER[name])
    assert profiling.param_count(model.config) == sum(p.numel() for p in model.parameters())
    assert profiling.LADDER[name].params == profiling.param_count(model.config)


def test_param_count_matches_meta_7b_and_tied():
    model = profiling.build_model(profiling.LADDER["7B"], device="meta", dtype=torch.float16)
    assert profiling.param_count(model.config) == sum(p.numel() for p in model.parameters())
    assert 6.5e9 < profiling.param_count(model.config) < 7e9
    tied = profiling.ModelShape("tied", 16, 1, 2, 32, vocab_size=64, tie_embeddings=True)
    model = profiling.build_model(tied)
    assert profiling.param_count(tied) == sum(p.numel() for p in model.parameters())


def test_ladder_is_increasing_and_named_by_size():
    sizes = [shape.params for shape in profiling.LADDER.values()]
    assert sizes == sorted(sizes)
    assert 0.5e6 < sizes[0] < 2e6
    assert set(profiling.CPU_LADDER) | set(profiling.GPU_LADDER) <= set(profiling.LADDER)
    assert all(profiling.LADDER[n].params < profiling.CPU_MAX_PARAMS for n in profiling.CPU_LADDER)


def test_build_model_refuses_7b_on_cpu():
    with pytest.raises(ValueError, match="refusing"):
        profiling.build_model(profiling.LADDER["7B"], device="cpu")


def test_build_model_is_seeded_and_leaves_global_rng_alone():
    state = torch.random.get_rng_state()
    a = profiling.build_model(profiling.LADDER["tiny-1M"], seed=3)
    b = profiling.build_model(profiling.LADDER["tiny-1M"], seed=3)
    assert torch.equal(torch.random.get_rng_state(), state)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)


# --- roofline maths -----------------------------------------------------------------------------


def test_ridge_and_roofline_time():
    assert profiling.ridge_point(990e12, 4800.0) == pytest.approx(206.25)
    # memory-bound: 1 GB at 10 GB/s beats 1 GFLOP at 100 GFLOP/s
    assert profiling.roofline_time(1e9, 1e9, 100e9, 10.0) == pytest.approx(0.1)
    assert profiling.roofline_time(1e12, 1e9, 100e9, 10.0) == pytest.approx(10.0)
    # HAND at k=3, batch 2, context 5, fp32: 19968 FLOPs, 6656 bytes
    t = profiling.roofline_latency(HAND, 3, 2, 5, 4, flops_per_s=1e6, gb_per_s=1e-6)
    assert t == pytest.approx(max(19968 / 1e6, 6656 / 1e3))


def test_speedup_with_measured_verify_cost():
    alpha, gamma, c = 0.8, 4, 0.05
    paper = (1 - alpha ** (gamma + 1)) / ((1 - alpha) * (gamma * c + 1))
    assert theory.speedup(alpha, gamma, c) == pytest.approx(paper)
    assert theory.speedup(0.0, gamma, c) == pytest.approx(1 / (gamma * c + 1))
    slower = theory.speedup(alpha, gamma, c, verify_cost=2.0)
    assert slower == pytest.approx(paper * (gamma * c + 1) / (gamma * c + 2))
    assert theory.speedup(1.0, gamma, c, 1.5) == pytest.approx(5 / (4 * c + 1.5))
    for bad in [dict(alpha=1.5), dict(verify_cost=0.0), dict(verify_cost=float("nan"))]:
        with pytest.raises(ValueError):
            theory.speedup(**{"alpha": alpha, "gamma": gamma, "c": c, **bad})


def test_plot_roofline_returns_data_and_closes():
    plt = pytest.importorskip("matplotlib.pyplot")
    before = plt.get_fignums()
    plotted = profiling.plot_roofline(100e9, 10.0, {"m": [(0.5, 4e9), (8.0, 60e9)]})
    assert plt.get_fignums() == before
    assert plotted.ridge == pytest.approx(10.0)
    assert plotted.ridge in plotted.intensity
    assert max(plotted.roof) == pytest.approx(100e9)
    assert plotted.roof[plotted.intensity.index(plotted.ridge)] == pytest.approx(100e9)
    assert plotted.roof[0] == pytest.approx(plotted.intensity[0] * 10e9)
    assert plotted.points == {"m": [(0.5, 4e9), (8.0, 60e9)]}


# --- timing plumbing (counts only, never durations) ---------------------------------------------


def test_time_fn_counts_calls_and_samples():
    calls, resets = [], []
    measured = timing.time_fn(
        lambda: calls.append(1), device="cpu", warmup=2, repeats=4, reset=lambda: resets.append(1)
    )
    assert len(measured) == len(measured.samples) == 4
    assert len(calls) == len(resets) == 6
    assert all(t >= 0 for t in measured.samples)
    assert measured.min <= measured.median
    with pytest.raises(ValueError):
        timing.time_fn(lambda: None, device="cpu", repeats=0)


def test_timer_fills_stopwatch():
    with timing.timer("cpu") as sw:
        sum(range(100))
    assert sw.seconds >= 0


def test_timer_reads_the_clock_it_is_given():
    ticks = iter([10.0, 12.5])  # a fake clock: the block "takes" 2.5 of its units
    with timing.timer("cpu", clock=lambda: next(ticks)) as sw:
        pass
    assert sw.seconds == 2.5
    measured = timing.time_fn(lambda: None, device="cpu", warmup=0, repeats=3, clock=lambda: 0.0)
    assert measured.samples == (0.0, 0.0, 0.0)


def test_measurements_are_positive():
    assert profiling.measure_bandwidth("cpu", nbytes=2**20, warmup=0, repeats=2) > 0
    assert profiling.measure_matmul_flops("cpu", n=64, warmup=0, repeats=2) > 0


def test_forward_latency_samples_and_cache_rollback():
    model = profiling.build_model(profiling.LADDER["tiny-1M"])
    timing = profiling.forward_latency(model, k=3, batch=2, prefix=5, warmup=1, repeats=2)
    assert len(timing) == 2
    with pytest.raises(ValueError):
        profiling.forward_latency(model, k=0)
    # the rollback latency_sweep relies on: crop takes a NEGATIVE count in transformers 5.x
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(torch.zeros(1, 5, dtype=torch.long), cache=cache, use_cache=True)
        model(torch.zeros(1, 3, dtype=torch.long), cache=cache, use_cache=True)
    assert cache.get_seq_length() == 8
    cache.crop(-3)
    assert cache.get_seq_length() == 5


def test_latency_sweep_prefills_once_rolls_back_and_interleaves(monkeypatch):
    model = profiling.build_model(profiling.LADDER["tiny-1M"])
    seen = []  # (batch, new tokens, cached tokens before the call)
    forward = model.forward

    def spy(input_ids, cache, use_cache):
        seen.append((*input_ids.shape, cache.get_seq_length()))
        return forward(input_ids=input_ids, cache=cache, use_cache=use_cache)

    monkeypatch.setattr(model, "forward", spy)
    timings = profiling.latency_sweep(model, [1, 4], batch=2, prefix=5, warmup=1, repeats=2)
    assert [len(t) for t in timings] == [2, 2]
    prefill, warmups, rounds = [(2, 5, 0)], [(2, 1, 5), (2, 4, 5)], [(2, 1, 5), (2, 4, 5)] * 2
    assert seen == prefill + warmups + rounds


# --- records ------------------------------------------------------------------------------------


def test_results_json_round_trip(tmp_path):
    results = {"bandwidth_gbs": 12.5, "models": {"tiny-1M": {"ks": [1, 2], "latency_s": [1e-3]}}}
    path = records.save_results(tmp_path / "sub" / "cpu-test.json", results, device="cpu")
    record = records.load_results(path)
    assert record["results"] == results
    assert record["device_info"]["device"] == "cpu"
    assert record["path"] == str(path)
    assert json.loads(path.read_text())["created"]


def test_load_recorded(tmp_path):
    assert records.load_recorded(directory=tmp_path) == []
    assert records.load_recorded(directory=tmp_path / "missing") == []
    assert records.load_recorded("no-such-prefix-*.json") == []
    for name in ["gpu-b.json", "gpu-a.json", "cpu-c.json"]:
        records.save_results(tmp_path / name, {"name": name}, device="cpu")
    found = records.load_recorded(directory=tmp_path)
    assert [r["results"]["name"] for r in found] == ["gpu-a.json", "gpu-b.json"]
    (tmp_path / "gpu-bad.json").write_text("{}")
    with pytest.raises(ValueError, match="not a results record"):
        records.load_recorded(directory=tmp_path)


def test_runtime_sweep_times_both_runtimes_on_the_same_weights() -> None:
    model = profiling.build_model(profiling.LADDER["tiny-1M"].config(vocab_size=64), seed=0)
    times = timing.runtime_sweep(model, [1, 4], ("hf", "lean"), repeats=2, prefix=8)
    assert set(times) == {"hf", "lean"}
    assert all(len(t) == 2 and all(0 < x < 10 for x in t) for t in times.values())
    curve = timing.verify_curve(model, "lean", max_tokens=3)
    assert len(curve) == 3 and curve[0] == 1.0 and all(x > 0 for x in curve)


H200_STEPPED = [1.0, 1.12, 1.08, 1.08, 1.09, 1.12, 1.11, 1.10, 1.12, 1.13, 1.11]  # base-134M's
STEPPED_KS = [1, 2, 3, 4, 5, 6, 8, 12, 16, 32, 64]


def test_climb_start_survives_a_step_where_the_band_knee_does_not() -> None:
    """The recorded H200 curve steps 12% from k = 1 to 2, then stays flat: the band knee reads
    1, the climb never starts."""
    assert profiling.find_knee(STEPPED_KS, H200_STEPPED, 0.1) == 1
    assert profiling.climb_start(STEPPED_KS, H200_STEPPED, 0.1) == 64


def test_climb_start_finds_where_a_curve_grows_with_k() -> None:
    ks = [1, 2, 4, 8, 16, 32, 64]
    assert profiling.climb_start(ks, [10.0, 10.2, 10.5, 12.5, 15.0, 25.0, 50.0]) == 4
    assert profiling.climb_start(ks, [1.0 + k for k in ks], tol=0.0) == 1  # climbs from k = 2
    assert profiling.climb_start(ks, [1.0] * len(ks)) == 64
    noisy = [1.0, 1.1, 1.1, 1.8, 1.1, 1.1, 1.1]  # one slow point at k = 8, flat after it
    assert profiling.climb_start(ks, noisy) == 64
    with pytest.raises(ValueError, match="k = 1"):
        profiling.climb_start([2, 4], [1.0, 2.0])


def test_regime_names_overhead_past_twice_the_floor() -> None:
    assert profiling.regime(3.7, 1.0) == "overhead-bound"  # the recorded 7B shape, eager
    assert profiling.regime(1.3, 1.0) == "memory-bound"
    with pytest.raises(ValueError):
        profiling.regime(0.0, 1.0)
