"""Device, seeding and machine-description helpers: the one place the course asks "where am I?".

Library code takes its device from its inputs; only notebooks and command-line entry points call
`default_device()`. Nothing here runs on import.

GPU dry run: with the environment variable `SPECDEC_LAB_FORCE_GPU_PATHS=1`, `gpu_paths()` is True
on a CPU-only machine too, so the branches a GPU user executes (heavier settings, hub pairs with
their fallback, the memory guard, `scripts/gpu_check.py`) run here, on tiny stand-in models
(`dry_run()` tells which sizes to shrink). Hub pairs load as tiny random stand-ins of their
family; `SPECDEC_LAB_STAND_INS=0` loads nothing instead, so offline the hub pair fails and the
fallback branch runs. `SPECDEC_LAB_FREE_MEMORY_GIB=<x>` pretends that only x GiB are free, to
walk the memory guard's fallback by hand. `SPECDEC_LAB_CPU_BF16=0` (or `=1`) overrides what
`cpu_native_bf16()` detects, to walk a laptop without native bfloat16 on one that has it.
"""

from __future__ import annotations

import gc
import os
import platform
import random
import subprocess
import time

import numpy as np
import torch


def set_seed(seed: int = 0) -> torch.Generator:
    """Seed python, numpy and torch once (call it in a notebook's first cell).

    Returns a fresh `torch.Generator` seeded with `seed`: pass it down to every sampling call so
    that results do not depend on what else touched the global RNG.
    """
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def generator(device: torch.device | str, seed: int) -> torch.Generator:
    """A `torch.Generator` on `device`, seeded with `seed`."""
    return torch.Generator(device=device).manual_seed(seed)


def default_device() -> torch.device:
    """The best available device: cuda, then mps, then cpu."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def default_dtype(device: torch.device | str) -> torch.dtype:
    """The dtype models load in on `device` unless told: float32 on the CPU (exact greedy
    comparisons need it); bfloat16 on a CUDA device that computes it natively (Ampere and
    later), float16 on one that would only emulate it (a T4) and on Apple's MPS."""
    device = torch.device(device)
    if device.type == "cpu":
        return torch.float32
    if device.type == "cuda" and torch.cuda.is_bf16_supported(including_emulation=False):
        return torch.bfloat16
    return torch.float16


CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")  # x86 (/proc/cpuinfo flags), Arm (Features)


def cpu_native_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU computes bfloat16 matmuls natively, by what it reports: an x86 flag
    avx512_bf16 or amx_bf16, or Arm's bf16 extension (Linux's /proc/cpuinfo; macOS's
    `hw.optional.arm.FEAT_BF16`). Elsewhere, and where nothing can be read, False: float32 is
    the safe default, since emulated bfloat16 is slower than float32."""
    forced = os.environ.get("SPECDEC_LAB_CPU_BF16")
    if forced in ("0", "1"):
        return forced == "1"
    if platform.system() == "Darwin":
        try:
            out = subprocess.run(
                ["sysctl", "-n", "hw.optional.arm.FEAT_BF16"], capture_output=True, text=True
            )
            return out.stdout.strip() == "1"
        except OSError:
            return False
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return any(flag in line.split() for flag in CPU_BF16_FLAGS)
    except OSError:
        pass
    return False


def has_gpu() -> bool:
    """True when a CUDA or MPS device is present (heavier notebook settings switch on)."""
    return default_device().type != "cpu"


FORCE_GPU_PATHS = "SPECDEC_LAB_FORCE_GPU_PATHS"
FREE_MEMORY_GIB = "SPECDEC_LAB_FREE_MEMORY_GIB"
STAND_INS = "SPECDEC_LAB_STAND_INS"


def _force_gpu_paths() -> bool:
    """True when `SPECDEC_LAB_FORCE_GPU_PATHS` is set to anything but "" or "0"."""
    return os.environ.get(FORCE_GPU_PATHS, "") not in ("", "0")


def gpu_paths(device: torch.device | str | None = None) -> bool:
    """Take the accelerator branches: `device` (default: the best one) is a GPU, or a dry run
    forces them on the CPU (`SPECDEC_LAB_FORCE_GPU_PATHS=1`)."""
    device = torch.device(device) if device is not None else default_device()
    return device.type != "cpu" or _force_gpu_paths()


def dry_run(device: torch.device | str | None = None) -> bool:
    """Accelerator branches forced onto a CPU: callers shrink sizes and load tiny stand-ins."""
    device = torch.device(device) if device is not None else default_device()
    return device.type == "cpu" and _force_gpu_paths()


def stand_ins(device: torch.device | str | None = None) -> bool:
    """In a dry run, load hub pairs as tiny stand-ins (unless `SPECDEC_LAB_STAND_INS=0`)."""
    return dry_run(device) and os.environ.get(STAND_INS, "1") != "0"


def free_memory(device: torch.device | str) -> int | None:
    """Bytes that can still be allocated on `device`; None when unknown.

    CUDA: `torch.cuda.mem_get_info`, plus the blocks PyTorch's caching allocator holds but no
    tensor uses (free for the next model, though the driver counts them as taken); MPS: the
    recommended maximum minus what the driver holds; CPU: MemAvailable from /proc/meminfo.
    `SPECDEC_LAB_FREE_MEMORY_GIB` overrides all three.
    """
    if os.environ.get(FREE_MEMORY_GIB):
        return int(float(os.environ[FREE_MEMORY_GIB]) * 2**30)
    device = torch.device(device)
    if device.type == "cuda":
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return torch.cuda.mem_get_info(device)[0] + cached
    if device.type == "mps":
        return torch.mps.recommended_max_memory() - torch.mps.driver_allocated_memory()
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # the file counts kB
    except OSError:
        pass
    return None


def release_memory(device: torch.device | str) -> None:
    """Give memory held by dropped tensors back (after an out-of-memory error, or between models)."""
    gc.collect()
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    elif device.type == "mps":
        torch.mps.empty_cache()


def set_cpu_threads(threads: int | None) -> int:
    """Set torch's CPU thread count (None keeps the default); returns the count in use.

    Batch-1 decoding of small models gains little from a second thread, and on a shared machine
    threads that spin-wait for each other inside every kernel make a forward several times
    slower. The CLI commands therefore default to one thread on the CPU and print the count they
    used.
    """
    if threads is not None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        torch.set_num_threads(threads)
    return torch.get_num_threads()


class RegionTimer:
    """Seconds spent inside timed regions on `device`, without waiting for it while timing.

    On the CPU a region is wall time. On CUDA a region is a pair of events, and `seconds` reads
    them after one synchronize: the clock a decoding loop keeps adds no host sync per step,
    and its figures are the device's time, not the time it took to enqueue the kernels.
    """

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self.total = 0.0
        self.pending: list = []  # (start, end) CUDA events not read yet

    def start(self):
        if self.device.type != "cuda":
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def stop(self, started) -> None:
        if self.device.type != "cuda":
            self.total += time.perf_counter() - started
            return
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        self.pending.append((started, end))

    @property
    def seconds(self) -> float:
        if self.pending:
            self.pending[-1][1].synchronize()
            self.total += sum(s.elapsed_time(e) for s, e in self.pending) / 1e3  # ms -> s
            self.pending.clear()
        return self.total


def synchronize(device: torch.device | str) -> None:
    """Wait for queued kernels on `device` so a wall clock reading means something."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_info(device: torch.device | str | None = None) -> dict[str, object]:
    """Everything a benchmark must print next to its numbers to be honest about where it ran."""
    import transformers

    device = torch.device(device) if device is not None else default_device()
    info: dict[str, object] = {
        "device": str(device),
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "platform": platform.platform(),
        "cpu_native_bf16": cpu_native_bf16(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info["gpu"] = props.name
        info["gpu_memory_gb"] = round(props.total_memory / 2**30, 1)
    return info
