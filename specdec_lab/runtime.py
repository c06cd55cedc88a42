"""Device, seeding and machine-description helpers: the one place the course asks "where am I?".

Library code takes its device from its inputs; only notebooks and command-line entry points call
`default_device()`. Nothing here runs on import.
"""

from __future__ import annotations

import os
import platform
import random

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


def default_device() -> torch.device:
    """The best available device: cuda, then mps, then cpu."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def has_gpu() -> bool:
    """True when a CUDA or MPS device is present (heavier notebook settings switch on)."""
    return default_device().type != "cpu"


def set_cpu_threads(threads: int | None) -> int:
    """Set torch's CPU thread count (None keeps the default); returns the count in use.

    Batch-1 decoding of small models gains little from a second thread, and on a shared machine
    threads that spin-wait for each other inside every kernel make a forward 5-10x slower
    (measured here: 9 ms with one thread, 50-140 ms with two while another job ran). The CLI
    commands therefore default to one thread on the CPU and print the count they used.
    """
    if threads is not None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        torch.set_num_threads(threads)
    return torch.get_num_threads()


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
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info["gpu"] = props.name
        info["gpu_memory_gb"] = round(props.total_memory / 2**30, 1)
    return info
