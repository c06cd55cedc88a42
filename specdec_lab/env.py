"""Device, seeding and machine-description helpers: the one place the course asks "where am I?".

Library code takes its device from its inputs; only notebooks and command-line entry points call
`default_device()`. Nothing here runs on import.

GPU dry run (docs/maintainers.md lists the variables): `SPECDEC_LAB_FORCE_GPU_PATHS=1` makes
`gpu_paths()` True on a CPU-only machine, so a GPU user's branches run here on tiny stand-ins
(`dry_run()`, `stand_ins()`); `SPECDEC_LAB_CPU_BF16=0` (or `=1`) overrides `cpu_native_bf16()`.
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
    """Seed python, numpy and torch once (call it in a notebook's first cell). Returns a fresh
    `torch.Generator` seeded with `seed`: pass it to every sampling call, so that results do not
    depend on what else touched the global RNG."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def generator(device: torch.device | str, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def default_device() -> torch.device:
    """The best available device: cuda, then mps, then cpu."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
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
    """Whether this CPU computes bfloat16 matmuls natively: a `CPU_BF16_FLAGS` flag in Linux's
    /proc/cpuinfo, or macOS's `hw.optional.arm.FEAT_BF16`. Elsewhere, and where nothing can be
    read, False: emulated bfloat16 is slower than float32."""
    forced = os.environ.get("SPECDEC_LAB_CPU_BF16")
    if forced in ("0", "1"):
        return forced == "1"
    if platform.system() == "Darwin":
        cmd = ["sysctl", "-n", "hw.optional.arm.FEAT_BF16"]
        try:
            return subprocess.run(cmd, capture_output=True, text=True).stdout.strip() == "1"
        except OSError:
            return False
    line = _first_line(cpuinfo, ("flags", "Features"))
    return line is not None and any(flag in line.split() for flag in CPU_BF16_FLAGS)


def _first_line(path: str, prefixes: tuple[str, ...]) -> str | None:
    """The first line of `path` (e.g. /proc/cpuinfo) that starts with one of `prefixes`."""
    try:
        with open(path) as f:
            return next((line for line in f if line.startswith(prefixes)), None)
    except OSError:
        return None


def has_gpu() -> bool:
    """True when a CUDA or MPS device is present (heavier notebook settings switch on)."""
    return default_device().type != "cpu"


FORCE_GPU_PATHS = "SPECDEC_LAB_FORCE_GPU_PATHS"
FREE_MEMORY_GIB = "SPECDEC_LAB_FREE_MEMORY_GIB"
STAND_INS = "SPECDEC_LAB_STAND_INS"


def gpu_paths(device: torch.device | str | None = None) -> bool:
    """Take the accelerator branches: `device` (default: the best one) is a GPU, or a dry run
    forces them on the CPU (`SPECDEC_LAB_FORCE_GPU_PATHS=1`)."""
    device = torch.device(device) if device is not None else default_device()
    return device.type != "cpu" or os.environ.get(FORCE_GPU_PATHS, "") not in ("", "0")


def dry_run(device: torch.device | str | None = None) -> bool:
    """Accelerator branches forced onto a CPU: callers shrink sizes and load tiny stand-ins."""
    device = torch.device(device) if device is not None else default_device()
    return device.type == "cpu" and gpu_paths(device)


def stand_ins(device: torch.device | str | None = None) -> bool:
    """In a dry run, load hub pairs as tiny stand-ins (unless `SPECDEC_LAB_STAND_INS=0`)."""
    return dry_run(device) and os.environ.get(STAND_INS, "1") != "0"


def free_memory(device: torch.device | str) -> int | None:
    """Bytes that can still be allocated on `device` (None when unknown), unless
    `SPECDEC_LAB_FREE_MEMORY_GIB` says. CUDA counts the blocks PyTorch's caching allocator holds
    but no tensor uses as free (the driver counts them as taken); the CPU reads MemAvailable."""
    if os.environ.get(FREE_MEMORY_GIB):
        return int(float(os.environ[FREE_MEMORY_GIB]) * 2**30)
    device = torch.device(device)
    if device.type == "cuda":
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return torch.cuda.mem_get_info(device)[0] + cached
    if device.type == "mps":
        return torch.mps.recommended_max_memory() - torch.mps.driver_allocated_memory()
    line = _first_line("/proc/meminfo", ("MemAvailable:",))
    return int(line.split()[1]) * 1024 if line else None  # the file counts kB


def release_memory(device: torch.device | str) -> None:
    """Give memory held by dropped tensors back (after an out-of-memory error, or between models)."""
    gc.collect()
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    elif device.type == "mps":
        torch.mps.empty_cache()


def set_cpu_threads(threads: int | None) -> int:
    """Set torch's CPU thread count (None keeps the default); returns the count in use. The CLI
    commands default to one: batch-1 decoding of small models gains little from a second thread,
    and on a shared machine threads spin-waiting on each other slow a forward several times."""
    if threads is not None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        torch.set_num_threads(threads)
    return torch.get_num_threads()


class RegionTimer:
    """Seconds spent inside timed regions on `device`, without waiting for it while timing: wall
    time on the CPU; on CUDA a pair of events per region, read after one synchronize by `seconds`,
    so a decoding loop's clock adds no host sync per step and measures the device's time."""

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


def device_info(device: torch.device | str | None = None) -> dict[str, object]:
    """Everything a benchmark must print next to its numbers to be honest about where it ran."""
    import transformers

    device = torch.device(device) if device is not None else default_device()
    cpu = _first_line("/proc/cpuinfo", ("model name",))
    info: dict[str, object] = {
        "device": str(device),
        "cpu": cpu.split(":", 1)[1].strip() if cpu else platform.processor() or platform.machine(),
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


def cache_sizes(sysfs: str = "/sys/devices/system/cpu/cpu0/cache") -> dict[str, int | None]:
    """This CPU's data caches in bytes, where the OS says: {"L2": ..., "L3": ...} (None where
    it does not). Linux lists them under `sysfs` (per core: L2 is one core's, L3 is shared);
    macOS answers `sysctl hw.l2cachesize hw.l3cachesize`; elsewhere both are None."""
    out: dict[str, int | None] = {"L2": None, "L3": None}
    if os.path.isdir(sysfs):
        for index in sorted(os.listdir(sysfs)):
            try:
                with open(os.path.join(sysfs, index, "level")) as f:
                    level = int(f.read())
                with open(os.path.join(sysfs, index, "type")) as f:
                    kind = f.read().strip()
                with open(os.path.join(sysfs, index, "size")) as f:
                    size = _cache_bytes(f.read())
            except (OSError, ValueError):
                continue
            if kind in ("Data", "Unified") and f"L{level}" in out:
                out[f"L{level}"] = size
    elif platform.system() == "Darwin":
        for name in out:
            try:
                got = subprocess.run(
                    ["sysctl", "-n", f"hw.{name.lower()}cachesize"],
                    capture_output=True,
                    text=True,
                    timeout=2,
                ).stdout.strip()
                out[name] = int(got) or None
            except (OSError, ValueError, subprocess.SubprocessError):
                pass
    return out


def _cache_bytes(text: str) -> int:
    """'1280K', '48M' or '512' (sysfs' sizes) in bytes."""
    text = text.strip().upper()
    scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


FAR_LARGER = 4  # weights this many times the last-level cache stream from memory every forward


def regime(weight_bytes: int, caches: dict[str, int | None] | None = None) -> dict[str, object]:
    """The regime a forward over `weight_bytes` of weights runs in on this CPU, from its caches
    (`cache_sizes`, unless given): "memory-bound" when the weights are far larger (at least
    `FAR_LARGER` times) than the last-level cache, "in-cache compute-bound" when they fit in it,
    "in between" otherwise, and "unknown" where the OS does not say. Returns the regime, the
    last-level cache's name and bytes, and the weights over it."""
    caches = cache_sizes() if caches is None else caches
    level = next((name for name in ("L3", "L2") if caches.get(name)), None)
    if level is None:
        return {"regime": "unknown", "cache": None, "cache_bytes": None, "ratio": None}
    size = caches[level]
    ratio = weight_bytes / size
    if ratio >= FAR_LARGER:
        name = "memory-bound"
    elif ratio <= 1:
        name = "in-cache compute-bound"
    else:
        name = "in between"
    return {"regime": name, "cache": level, "cache_bytes": size, "ratio": ratio}


def pair_regime(pair, caches: dict[str, int | None] | None = None) -> dict[str, object]:
    """`regime` of a loaded pair's weights, target and draft together (what the loop streams)."""
    weights = sum(
        p.numel() * p.element_size() for m in (pair.target, pair.draft) for p in m.parameters()
    )
    return regime(weights, caches) | {"weight_bytes": weights}
