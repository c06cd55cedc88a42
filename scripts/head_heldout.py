"""Held-out acceptance of draft heads: the model card's "held-out α at T = 1".

For each head: Σ min(p, q) at T = 1 of its first, second and third chained drafting step,
teacher-forced on the target's own features (`head_training.heldout_alpha`), averaged over
`--sequences` windows of 128 tokens from each domain's held-out corpus file (seed 1, the same
windows for every head). Float32, on the CPU; writes a record with the machine.

    python scripts/head_heldout.py data/models/smollm2-head [other heads...] --sequences 32
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from transformers import AutoTokenizer

from specdec_lab import data, env, heads, models
from specdec_lab.course import head_training
from specdec_lab.measure import records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("heads", nargs="+", type=Path)
    ap.add_argument("--target", default="data/cache/smollm2-135m")
    ap.add_argument("--sequences", type=int, default=32)
    ap.add_argument("--out", default=data.RESULTS_DIR / "head-heldout-cpu-smollm2-local.json")
    args = ap.parse_args()
    env.set_cpu_threads(1)
    target = models.load_model(args.target, device="cpu", dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(args.target)
    windows = {
        d: head_training.text_sequences(
            tokenizer, [data.CORPUS_DIR / f"{d}_heldout.txt"], args.sequences, 128, seed=1
        )
        for d in data.DOMAINS
    }
    out: dict = {"target": args.target, "sequences": args.sequences, "length": 128, "heads": {}}
    for path in args.heads:
        head = heads.load_head(path)
        alphas = {}
        for domain, seqs in windows.items():
            batches = [head_training.heldout_alpha(head, target, b) for b in seqs.split(8)]
            alphas[domain] = [round(sum(b[k] for b in batches) / len(batches), 4) for k in range(3)]
        out["heads"][str(path)] = {"config": heads.head_info(path)["config"], "alpha_t1": alphas}
        print(path, alphas, flush=True)
    print(f"wrote {records.save_results(args.out, out, 'cpu')}")


if __name__ == "__main__":
    main()
