"""Where the course's files live: the one module that knows the layout of `data/`.

- `data/prompts/<domain>.jsonl`: held-out code and prose prompts, one {"id", "text", ...} object
  per line (read by the bench, the demo, the head's training and notebooks 03, 04 and 06);
- `data/models/`: the shipped draft/target pair, the other drafts and the head, with their
  training log `training.json` (the model card is `data/models/README.md`);
- `data/results/`: benchmark records written by `python -m specdec_lab bench` and the GPU check;
- `data/corpus/`: the corpus and tokenizer, rebuilt by `python -m specdec_lab train` (git-ignored);
- `data/cache/`: models converted here, e.g. SmolLM2-135M (`models.smollm2`; git-ignored).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = ROOT / "data"
PROMPTS_DIR = DATA_DIR / "prompts"
MODELS_DIR = DATA_DIR / "models"
RESULTS_DIR = DATA_DIR / "results"
CORPUS_DIR = DATA_DIR / "corpus"
CACHE_DIR = DATA_DIR / "cache"
TRAINING_LOG = MODELS_DIR / "training.json"

DOMAINS = ("code", "prose")


def load_prompts(domain: str, n: int | None = None) -> list[dict]:
    """The first `n` prompts (all if None) of `domain`, as dicts with at least "id" and "text"."""
    if domain not in DOMAINS:
        raise ValueError(f"domain must be one of {DOMAINS}, got {domain!r}")
    path = PROMPTS_DIR / f"{domain}.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows[:n] if n else rows


def load_training_log(path: str | Path | None = None) -> dict[str, Any]:
    """The training log of the shipped models (`data/models/training.json`, or `path`): "models"
    (each one's recipe, budget and held-out figures) and "quality" (the target's repetition)."""
    return json.loads(Path(path or TRAINING_LOG).read_text(encoding="utf-8"))
