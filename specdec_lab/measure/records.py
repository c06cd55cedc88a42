"""Benchmark records: JSON files under `data/results/`, each with the machine it ran on.

Schema: {"device_info": `env.device_info(device)`, "created": an ISO timestamp, "results": {...}}.
`python -m specdec_lab bench`, `scripts/gpu_check.py` and the notebooks write and read them.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import torch

from specdec_lab import env
from specdec_lab.data import RESULTS_DIR


def save_results(
    path: str | Path, results: dict[str, Any], device: torch.device | str | None = None
) -> Path:
    """Write `results` (JSON-serialisable) with `env.device_info(device)` and a timestamp."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "device_info": env.device_info(device),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "results": results,
    }
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


def load_results(path: str | Path) -> dict[str, Any]:
    """Read one record written by `save_results` (adds its `path`)."""
    path = Path(path)
    record = json.loads(path.read_text())
    if "results" not in record or "device_info" not in record:
        raise ValueError(f"{path} is not a results record (needs 'results' and 'device_info')")
    record["path"] = str(path)
    return record


def load_recorded(
    pattern: str = "gpu-*.json", directory: str | Path | None = None
) -> list[dict[str, Any]]:
    """All records matching `pattern` in `directory` (default `RESULTS_DIR`), sorted by name."""
    directory = Path(directory) if directory is not None else RESULTS_DIR
    return [load_results(p) for p in sorted(directory.glob(pattern))]
