"""The GPU recording script runs on the CPU at --smoke size and writes the documented schema."""

import importlib.util
from pathlib import Path

import torch

from specdec_lab import profiling

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.py"


def test_gpu_check_profile_smoke() -> None:
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    out = gpu_check.profile(torch.device("cpu"), smoke=True)
    assert out["bandwidth_gbs"] > 0 and out["matmul_flops"] > 0
    for model in out["models"].values():
        assert len(model["ks"]) == len(model["latency_s"])
        assert model["knee"] == profiling.find_knee(model["ks"], model["latency_s"])
    batch = out["batch"]
    assert len(batch["batches"]) == len(batch["t_k1_s"]) == len(batch["t_verify_s"])
    assert set(out["pair"]["predicted_speedup"]) == {"0.6", "0.7", "0.8"}
