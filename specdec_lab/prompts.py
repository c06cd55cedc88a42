"""The course's prompts: data/prompts/<domain>.jsonl, one {"id", "text", ...} object per line.

Held-out code and prose from the standard library (see data/models/README.md), read by the bench,
the demo, the draft head's training script and notebooks 03, 04 and 06.
"""

from __future__ import annotations

import json
from pathlib import Path

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "data" / "prompts"
DOMAINS = ("code", "prose")


def load_prompts(domain: str, n: int | None = None) -> list[dict]:
    """The first `n` prompts (all if None) of `domain`, as dicts with at least "id" and "text"."""
    if domain not in DOMAINS:
        raise ValueError(f"domain must be one of {DOMAINS}, got {domain!r}")
    path = PROMPTS_DIR / f"{domain}.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows[:n] if n else rows
