"""The GPU recording script, run on the CPU: at --smoke size, and as a GPU dry run
(SPECDEC_LAB_FORCE_GPU_PATHS=1), which takes its GPU branches (bfloat16, the memory guard, the
bench in reduced precision) at smoke sizes and writes the documented schema."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from specdec_lab import data, env
from specdec_lab.measure import profiling

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"
needs_embedded = pytest.mark.skipif(
    not (data.MODELS_DIR / "target" / "config.json").exists(), reason="embedded pair not trained"
)


@pytest.fixture
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _check_profile(out: dict) -> None:
    assert out["bandwidth_gbs"] > 0 and out["matmul_flops"] > 0
    for model in out["models"].values():
        assert len(model["ks"]) == len(model["latency_s"])
        assert model["knee"] == profiling.find_knee(model["ks"], model["latency_s"])
    batch = out["batch"]
    assert len(batch["batches"]) == len(batch["t_k1_s"]) == len(batch["t_verify_s"])
    assert set(out["pair"]["predicted_speedup"]) == {"0.6", "0.7", "0.8"}


SUMMARY = {  # the figures, exactly these keys
    "7B_t1_over_floor",
    "1B_t1_over_floor",
    "c_0.5B_7B",
    "spec_speedup_alpha_0.8",
    "measured_over_predicted",
    "notebooks_passed",
    "notebooks_total",
}


def _check_bench(bench: dict) -> None:
    """The gpu-bench record: every part ran, its figures are consistent with each other."""
    assert not [part for part, r in bench.items() if "error" in r], bench
    assert set(bench["summary"]) == SUMMARY
    shapes = bench["costs"]["shapes"]
    assert list(shapes) == ["tiny-1M", "small-29M"]
    for row in shapes.values():
        for rt in ("lean", "captured"):
            assert len(row["latency_s"][rt]) == len(bench["costs"]["ks"])
            t1_over_floor = row["latency_s"][rt][0] / row["floor_s"]
            assert row[f"{rt}_t1_over_floor"] == pytest.approx(t1_over_floor)
            assert row[f"{rt}_regime"] == profiling.regime(row["latency_s"][rt][0], row["floor_s"])
    runs = bench["alpha"]["runs"]
    assert set(runs) == {"0.6", "0.7", "0.8"}
    for a, run in runs.items():
        assert 1 <= run["gamma"] < len(bench["costs"]["ks"])
        assert abs(run["realised_alpha"] - float(a)) < 0.3  # 24 tokens: a few dozen draws
        assert run["measured_over_predicted"] == pytest.approx(run["speedup"] / run["predicted"])
    summary = bench["summary"]
    assert summary["spec_speedup_alpha_0.8"] == runs["0.8"]["speedup"]
    assert summary["c_0.5B_7B"] == bench["pairs"]["c_0.5B_7B"]["captured"]
    assert {"T=0", "T=1"} <= set(bench["embedded"])


def test_gpu_check_profile_smoke(gpu_check) -> None:
    out = gpu_check.profile(torch.device("cpu"), smoke=True)
    assert out["dtype"] == "float32"
    _check_profile(out)


def test_without_a_gpu_the_full_run_is_refused(gpu_check, monkeypatch, capsys) -> None:
    monkeypatch.delenv(env.FORCE_GPU_PATHS, raising=False)
    assert gpu_check.main([]) == 2
    assert env.FORCE_GPU_PATHS in capsys.readouterr().err


@needs_embedded
def test_gpu_dry_run(gpu_check, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(env.FORCE_GPU_PATHS, "1")
    monkeypatch.setattr(gpu_check, "RESULTS", tmp_path)
    # The memory guard runs on 0.3 GiB "free": enough for small-29M next to tiny-1M in bfloat16,
    # and for the embedded pair in the bench (tests/engine/test_families.py covers what it drops).
    monkeypatch.setenv(env.FREE_MEMORY_GIB, "0.3")
    assert gpu_check.main(["--notebooks"]) == 0  # no --smoke: the GPU branch, at smoke sizes
    profile = json.loads((tmp_path / "smoke-profile-cpu.json").read_text())["results"]
    assert profile["dtype"] == "bfloat16" and list(profile["models"]) == ["tiny-1M", "small-29M"]
    _check_profile(profile)
    bench = json.loads((tmp_path / "smoke-bench-cpu.json").read_text())["results"]
    _check_bench(bench)
    device = json.loads((tmp_path / "smoke-device-cpu.json").read_text())["results"]
    assert set(device) == set(gpu_check.gpu_device_checks.CHECKS)
    assert not [part for part, r in device.items() if "error" in r], device
    assert device["greedy-mismatches"]["float32"]["differ"] == 0  # float32: exact
    logits = [r for r in device["lean-vs-hf"].values() if isinstance(r, dict)]
    assert logits and all(r["max_abs_diff"] < 1e-4 for r in logits)
    costs = device["verify-costs"]["shapes"]["tiny-1M"]
    assert len(costs["lean"]) == len(costs["hf"]) == len(device["verify-costs"]["ks"])
    assert "aten::" in device["step-profile"]["step_table"]
    assert set(device["step-profile"]["verify_sdpa_kernels"]) <= set(
        gpu_check.gpu_device_checks.SDPA_KERNELS
    )


def test_notebooks_run_as_plain_python_and_report_the_first_error(gpu_check, tmp_path) -> None:
    def notebook(*sources, tags=()):
        cells = [
            {"cell_type": "code", "source": src, "metadata": {"tags": list(tags)}}
            for src in sources
        ]
        return json.dumps({"cells": [{"cell_type": "markdown", "source": "# x"}, *cells]})

    (tmp_path / "ok.ipynb").write_text(notebook("%matplotlib inline\nx = 2", "assert x == 2"))
    (tmp_path / "bad.ipynb").write_text(notebook("y = 1", "assert y == 2, 'y is not 2'"))
    (tmp_path / "skip.ipynb").write_text(notebook("raise SystemError", tags=["nbval-skip"]))
    out = gpu_check.run_notebooks(
        [str(tmp_path / n) for n in ("ok.ipynb", "bad.ipynb", "skip.ipynb")]
    )
    ok, bad, skip = out.values()
    assert ok["ok"] and skip["ok"] and not bad["ok"]
    assert bad["error"] == "cell 2: AssertionError: y is not 2"


def test_the_colab_cell_runs_as_plain_python_and_each_notebook_is_recorded(
    gpu_check, tmp_path
) -> None:
    """Every notebook's first cell guards `!git clone` and `%pip` under an `if`: dropping those
    lines left the `if` without a body (an IndentationError at cell 1 of every notebook)."""
    colab = (
        "import sys\nif 'google.colab' in sys.modules:\n    !git clone x\n    %pip install y\nz = 3"
    )
    cells = [
        {"cell_type": "code", "source": src, "metadata": {}} for src in (colab, "assert z == 3")
    ]
    for name in ("a.ipynb", "b.ipynb"):
        (tmp_path / name).write_text(json.dumps({"cells": cells}))
    recorded = []
    out = gpu_check.run_notebooks(
        [str(tmp_path / n) for n in ("a.ipynb", "b.ipynb")],
        lambda done: recorded.append(dict(done)),
    )
    assert all(r["ok"] for r in out.values()), out
    assert [len(r) for r in recorded] == [1, 2]  # written after each notebook, not at the end


def test_a_transformers_without_the_cache_api_is_refused_in_one_sentence(
    gpu_check, monkeypatch, capsys
) -> None:
    def old_forward(self, input_ids=None, past_key_values=None, **kwargs): ...

    assert gpu_check.sessions.cache_api_problem(gpu_check.LlamaForCausalLM.forward) is None
    monkeypatch.setattr(gpu_check.LlamaForCausalLM, "forward", old_forward)
    assert gpu_check.main(["--smoke"]) == 2
    err = capsys.readouterr().err.strip()
    assert "cache=" in err and "\n" not in err


@pytest.mark.accelerator
@needs_embedded
def test_gpu_check_end_to_end_on_the_simulated_accelerator() -> None:
    """`scripts/gpu_check.py` as one process on the simulated accelerator (tests/sim_main.py),
    its bench subprocess on it too: every part records, none fails, and each record names the
    stand-in device. (It writes git-ignored smoke-*-sim.json records under data/results/.)"""
    sim_main = Path(__file__).resolve().parents[1] / "sim_main.py"
    run = subprocess.run(
        [sys.executable, str(sim_main), str(SCRIPT), "--notebooks", "01_draft_and_verify.ipynb"],
        capture_output=True,
        text=True,
        timeout=1200,
        env=os.environ | {"OMP_NUM_THREADS": "1", env.FREE_MEMORY_GIB: "0.3"},
    )
    assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-3000:])
    for part in ("device", "profile", "bench", "notebooks"):
        record = json.loads((data.RESULTS_DIR / f"smoke-{part}-sim.json").read_text())
        assert record["device_info"]["device"] == "sim", part
    bench = json.loads((data.RESULTS_DIR / "smoke-bench-sim.json").read_text())["results"]
    _check_bench(bench)
    assert bench["summary"]["notebooks_passed"] == bench["summary"]["notebooks_total"] == 1
    device = json.loads((data.RESULTS_DIR / "smoke-device-sim.json").read_text())["results"]
    assert not [part for part, r in device.items() if "error" in r], device
    notebooks = json.loads((data.RESULTS_DIR / "smoke-notebooks-sim.json").read_text())["results"]
    assert all(r["ok"] for r in notebooks.values()), notebooks
