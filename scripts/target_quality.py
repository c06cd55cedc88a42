"""Does the embedded target write Python or loops? Measure it, and record the answer.

For every shipped code prompt (`data/prompts/code.jsonl`, held-out files), the target continues
greedily for 96 tokens; we report the median fraction of 4-grams that repeat an earlier 4-gram
(`bench.repeated_ngram_fraction`). As a reference, the same measure on 96-token windows of
human-written held-out code. Writes both into `data/models/training.json` under "quality".

    python scripts/target_quality.py
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import torch

from specdec_lab import bench, corpus, decoding, models, runtime

N_NEW = 96
LOG = Path("data/models/training.json")


def main() -> None:
    runtime.set_cpu_threads(1)
    pair = models.load_pair("embedded", device="cpu")
    generated = []
    for prompt in bench.load_prompts("code"):
        ids = pair.encode(prompt["text"])
        out = decoding.autoregressive_generate(
            pair.target, ids, N_NEW, 0.0, vocab_size=pair.vocab_size
        )
        generated.append(bench.repeated_ngram_fraction(out.tokens.tolist()))
        print(f"{prompt['id']}: {generated[-1]:.2f}  {pair.decode(out.tokens)[:60]!r}")

    heldout = corpus.encode_corpus_file(pair.tokenizer, Path("data/corpus/code_heldout.txt"))
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
    log = json.loads(LOG.read_text())
    log["quality"] = quality
    LOG.write_text(json.dumps(log, indent=1) + "\n")
    print(json.dumps(quality))


if __name__ == "__main__":
    main()
