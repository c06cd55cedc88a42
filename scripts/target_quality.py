"""Does the embedded target write Python or loops? Measure it, and record the answer.

For every shipped code prompt (`data/prompts/code.jsonl`, held-out files), the target continues
greedily for 96 tokens; we report the median fraction of 4-grams that repeat an earlier 4-gram
(`bench.repeated_ngram_fraction`). As a reference, the same measure on 96-token windows of
human-written held-out code. Writes both into `data/models/training.json` under "quality".

    python scripts/target_quality.py [--target DIR] [--log JSON]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from specdec_lab import data, decoding, env, models
from specdec_lab.course import corpus
from specdec_lab.measure import bench

N_NEW = 96


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", type=Path, default=data.MODELS_DIR / "target")
    ap.add_argument("--log", type=Path, default=data.MODELS_DIR / "training.json")
    args = ap.parse_args()
    env.set_cpu_threads(1)
    target = models.load_model(str(args.target), device="cpu", dtype=torch.float32)
    tokenizer = corpus.load_tokenizer(args.target)
    generated = []
    for prompt in data.load_prompts("code"):
        ids = models.encode_prompt(tokenizer, prompt["text"])
        out = decoding.autoregressive_generate(target, ids, N_NEW, 0.0, vocab_size=len(tokenizer))
        generated.append(bench.repeated_ngram_fraction(out.tokens.tolist()))
        print(f"{prompt['id']}: {generated[-1]:.2f}  {tokenizer.decode(out.tokens)[:60]!r}")

    heldout = corpus.encode_corpus_file(tokenizer, Path("data/corpus/code_heldout.txt"))
    gen = torch.Generator().manual_seed(0)
    starts = torch.randint(0, len(heldout) - N_NEW, (64,), generator=gen).tolist()
    human = [bench.repeated_ngram_fraction(heldout[s : s + N_NEW].tolist()) for s in starts]

    quality = {
        "new_tokens": N_NEW,
        "greedy_repeated_4gram_median": round(statistics.median(generated), 3),
        "greedy_repeated_4gram_per_prompt": [round(x, 3) for x in generated],
        "human_code_repeated_4gram_median": round(statistics.median(human), 3),
        "human_windows": len(human),
    }
    log = json.loads(args.log.read_text())
    log.setdefault("quality", {})[str(args.target)] = quality
    args.log.write_text(json.dumps(log, indent=1) + "\n")
    print(json.dumps(quality))


if __name__ == "__main__":
    main()
