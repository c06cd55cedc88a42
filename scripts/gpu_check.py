"""Record the course's device measurements on a GPU machine (or a small smoke run on the CPU).

    bash scripts/gpu_check.sh            # on a GPU box: realistic shapes, < 8 minutes
    python scripts/gpu_check.py --smoke  # anywhere: tiny shapes, a minute on a CPU
    SPECDEC_LAB_FORCE_GPU_PATHS=1 python scripts/gpu_check.py   # GPU dry run on a CPU

Writes, each as soon as it is measured, in this order (the principal figures first, so a short
GPU slot gets them):

1. data/results/gpu-bench-<type>.json: `gpu_bench.PARTS`, eager against captured forwards at
   real shapes, c, speculative decoding at known α, the embedded pair; `results.summary` holds
   the figures the course tracks (`gpu_bench.summary`);
2. data/results/gpu-notebooks-<type>.json: every notebook top to bottom on the device, as plain
   Python: pass or the first error, and seconds;
3. while `BUDGET_SECONDS` last: data/results/gpu-device-<type>.json (what only an accelerator
   can tell: lean against transformers' verify costs and logits, host syncs per step, a profiler
   table of one step, greedy mismatches per dtype; `gpu_device_checks`) and
   data/results/gpu-profile-<type>.json (notebook 05's ladder, in the schema documented in
   `specdec_lab.measure.profiling`).

Each record names the device it ran on. Needs no internet: random-init shapes and the embedded
pair only. The memory guard (`models.fit_ladder`) drops the shapes that would not fit in free
memory, and an out-of-memory error stops a ladder where it happened instead of ending the run.
The dry run takes every GPU branch at smoke sizes.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import LlamaForCausalLM

from specdec_lab import data, env, models, theory
from specdec_lab.engine import sessions
from specdec_lab.measure import profiling, records

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling, run from anywhere
import gpu_bench  # noqa: E402
import gpu_device_checks  # noqa: E402

RESULTS = data.RESULTS_DIR
BUDGET_SECONDS = 400  # past it, the optional parts are skipped: the whole run fits 8 minutes


def forward_seconds(model, ks: list[int], batch: int = 1, repeats: int = 7) -> list[float]:
    """Seconds of one forward of k new tokens per sequence for `batch` sequences on a 32-token
    KV cache, for every k in `ks`: `profiling.latency_sweep` (every k in each round, the cache
    cropped back off the clock), the fastest of its `repeats` rounds."""
    return [t.min for t in profiling.latency_sweep(model, ks, batch, repeats=repeats)]


def profile(device: torch.device, smoke: bool) -> dict:
    gpu = env.gpu_paths(device)
    dtype = torch.bfloat16 if gpu else torch.float32
    ladder = ("tiny-1M", "small-29M") if smoke else profiling.GPU_LADDER
    if gpu:
        ladder = models.fit_ladder(ladder, profiling.LADDER, device, dtype)
    ks = [1, 2, 4, 8] if smoke else [1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256]
    repeats = 3 if smoke else 7
    nbytes = 2**26 if smoke else 2**30
    out: dict = {
        "dtype": str(dtype).removeprefix("torch."),
        "prefix": 32,
        "statistic": f"fastest of {repeats} interleaved rounds",
        "bandwidth_gbs": profiling.measure_bandwidth(device, nbytes=nbytes),
        "matmul_flops": profiling.measure_matmul_flops(
            device, n=512 if smoke else 8192, dtype=dtype
        ),
        "models": {},
    }
    for name in tqdm(ladder, desc="ladder"):
        try:
            model = profiling.build_model(profiling.LADDER[name], device=device, dtype=dtype)
            lat = forward_seconds(model, ks, repeats=repeats)
        except (torch.OutOfMemoryError, RuntimeError) as err:
            if not models.is_out_of_memory(err):
                raise
            print(f"out of memory at {name}: the ladder stops at the previous model")
            break
        finally:
            model = None
            env.release_memory(device)
        out["models"][name] = {
            "params": profiling.param_count(profiling.LADDER[name]),
            "ks": ks,
            "latency_s": lat,
            "knee": profiling.find_knee(ks, lat),
        }
    ladder = list(out["models"])
    if not ladder:
        raise models.InsufficientMemoryError(f"not even {name} fits on {device}")

    # How batch size erodes the free verification: target k=1 vs k=γ+1 as the batch grows.
    target = ladder[-1]
    gamma = 4
    batches = [1, 2, 4] if smoke else [1, 2, 4, 8, 16, 32, 64]
    model = profiling.build_model(profiling.LADDER[target], device=device, dtype=dtype)
    timed = [forward_seconds(model, [1, gamma + 1], b, repeats) for b in batches]
    t1, tv = [t[0] for t in timed], [t[1] for t in timed]  # k = 1 and k = γ + 1, per batch
    out["batch"] = {
        "target": target,
        "gamma": gamma,
        "batches": batches,
        "t_k1_s": t1,
        "t_verify_s": tv,
    }
    # c at realistic shapes: a small draft shape against the biggest target shape.
    draft_name = ladder[0]
    draft = profiling.build_model(profiling.LADDER[draft_name], device=device, dtype=dtype)
    t_draft = forward_seconds(draft, [1], repeats=repeats)[0]
    out["pair"] = {
        "draft": draft_name,
        "target": target,
        "c": t_draft / t1[0],
        "verify_cost": tv[0] / t1[0],
        "predicted_speedup": {
            str(a): theory.speedup(a, gamma, t_draft / t1[0], tv[0] / t1[0])
            for a in (0.6, 0.7, 0.8)
        },
    }
    return out


def plain_python(source: str) -> str:
    """A cell as plain Python: IPython's `!shell` and `%magic` lines become `pass` at their own
    indentation, so a block whose body they were (the Colab cell's `if`) stays valid."""
    lines = []
    for line in source.splitlines():
        code = line.lstrip()
        if code.startswith(("%", "!")):
            line = f"{line[: len(line) - len(code)]}pass  # {code}"
        lines.append(line)
    return "\n".join(lines)


def run_notebooks(
    names: list[str] | None = None, on_each: Callable[[dict], object] | None = None
) -> dict[str, dict]:
    """Run each notebook's code cells in order, in one namespace per notebook, as plain Python
    (a GPU machine need not have Jupyter): {name: {"ok", "seconds", "error"}}. Cells nbval skips
    (the live widgets) are skipped here too; IPython magics and shell lines do nothing
    (`plain_python`). `on_each(results so far)` runs after every notebook, so a run cut short
    keeps what it finished."""
    import json
    import os

    os.environ.setdefault("MPLBACKEND", "Agg")
    folder = Path(__file__).resolve().parents[1] / "notebooks"
    names = names or sorted(p.name for p in folder.glob("[0-9][0-9]_*.ipynb"))
    out: dict[str, dict] = {}
    cwd = os.getcwd()
    for name in tqdm(names, desc="notebooks"):
        cells = json.loads((folder / name).read_text())["cells"]  # a name, or a path
        start, error = time.perf_counter(), None
        namespace: dict = {"__name__": "__main__"}
        os.chdir(folder)
        try:
            for i, cell in enumerate(cells):
                tags = cell.get("metadata", {}).get("tags", [])
                if cell["cell_type"] != "code" or "nbval-skip" in tags:
                    continue
                source = "".join(cell["source"])
                try:
                    exec(compile(plain_python(source), f"{name}[{i}]", "exec"), namespace)
                except Exception as err:  # recorded, not raised: the other notebooks still run
                    error = f"cell {i}: {type(err).__name__}: {str(err).splitlines()[0][:300]}"
                    break
        finally:
            os.chdir(cwd)
            try:
                import matplotlib.pyplot as plt

                plt.close("all")
            except ImportError:
                pass
        out[name] = {
            "ok": error is None,
            "seconds": round(time.perf_counter() - start, 1),
            "error": error,
        }
        print(f"{name}: {'ok' if error is None else error} ({out[name]['seconds']} s)")
        if on_each is not None:
            on_each(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny shapes (CPU dry run)")
    parser.add_argument(
        "--notebooks", nargs="*", default=None, help="notebooks to run (default: all; none: skip)"
    )
    args = parser.parse_args(argv)
    if (problem := sessions.cache_api_problem(LlamaForCausalLM.forward)) is not None:
        print(problem, file=sys.stderr)
        return 2
    device = env.default_device()
    if device.type == "cpu" and not (args.smoke or env.dry_run(device)):
        print(
            f"no GPU found: run with --smoke, or set {env.FORCE_GPU_PATHS}=1 for a GPU dry run",
            file=sys.stderr,
        )
        return 2
    smoke = args.smoke or env.dry_run(device)
    tag = device.type
    prefix = "smoke" if smoke else "gpu"  # smoke records are git-ignored, never GPU results
    start = time.perf_counter()
    deadline = start + (900 if smoke else BUDGET_SECONDS)  # then the optional parts are skipped

    # 1. The principal figures: eager against captured, c, known-α runs, the embedded pair.
    ctx = gpu_bench.context(device, smoke, deadline)
    bench_path = RESULTS / f"{prefix}-bench-{tag}.json"
    failed = []
    for part, measure in gpu_bench.PARTS.items():
        failed += _run_part(part, measure, ctx, ctx["record"])
        record = ctx["record"] | {"summary": gpu_bench.summary(ctx["record"])}
        records.save_results(bench_path, record, device)
    print(f"wrote {bench_path} ({time.perf_counter() - start:.0f} s)")

    # 2. Every notebook, on the device; the bench record's summary counts them.
    status = int(bool(failed))
    if args.notebooks is None or args.notebooks:
        path = RESULTS / f"{prefix}-notebooks-{tag}.json"
        results = run_notebooks(
            args.notebooks or None, lambda done: records.save_results(path, done, device)
        )
        record = ctx["record"] | {"summary": gpu_bench.summary(ctx["record"], results)}
        records.save_results(bench_path, record, device)
        print(f"wrote {path}")
        status = status or int(not all(r["ok"] for r in results.values()))

    # 3. If time is left: what only an accelerator can tell, and notebook 05's ladder.
    device_record: dict = {}
    for part, check in gpu_device_checks.CHECKS.items():
        if time.perf_counter() > deadline:
            print(f"{part}: skipped, the time budget is spent")
            continue
        failed += _run_part(part, lambda ctx, check=check: check(device, smoke), {}, device_record)
        records.save_results(RESULTS / f"{prefix}-device-{tag}.json", device_record, device)
    if time.perf_counter() < deadline:
        path = records.save_results(
            RESULTS / f"{prefix}-profile-{tag}.json", profile(device, smoke), device
        )
        print(f"wrote {path} ({time.perf_counter() - start:.0f} s)")
    return status or int(bool(failed))


def _run_part(part: str, measure, ctx: dict, into: dict) -> list[str]:
    """Run one part into `into[part]`, its error recorded rather than raised (the other parts
    still run); [part] if it failed."""
    t0 = time.perf_counter()
    try:
        into[part] = measure(ctx)
    except Exception as err:
        into[part] = {"error": f"{type(err).__name__}: {str(err)[:300]}"}
    into[part]["seconds"] = round(time.perf_counter() - t0, 1)
    print(f"{part}: {into[part].get('error', 'ok')} ({into[part]['seconds']} s)")
    return [part] if "error" in into[part] else []


if __name__ == "__main__":
    raise SystemExit(main())
