"""Does a target write Python or loops? Measure it the same way for every target, and record it.

For every shipped code prompt (`data/prompts/code.jsonl`, held-out files), the target continues
for 96 tokens, greedily and at T = 1 (one seeded generator for the run); we report the median
fraction of 4-grams that repeat an earlier 4-gram (`bench.repeated_ngram_fraction`). As a
reference, the same measure on 96-token windows of human-written held-out code. Also the held-out
cross-entropy per domain, per token and per character: targets with different tokenizers compare
only per character. Writes it all into `data/models/training.json` under "quality".

    python scripts/target_quality.py [--target DIR] [--log JSON]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from specdec_lab import data, decoding, env, models
from specdec_lab.course import corpus, train
from specdec_lab.measure import bench

N_NEW = 96
CE_WINDOWS, CE_CONTEXT = 32, 256


def repetition(target, tokenizer, temperature: float, generator) -> list[float]:
    """Repeated-4-gram fraction of each code prompt's continuation at `temperature`."""
    out = []
    for prompt in data.load_prompts("code"):
        ids = models.encode_prompt(tokenizer, prompt["text"])
        run = decoding.autoregressive_generate(
            target,
            ids,
            N_NEW,
            temperature=temperature,
            generator=generator,
            vocab_size=len(tokenizer),
        )
        out.append(bench.repeated_ngram_fraction(run.tokens.tolist()))
        print(
            f"T={temperature} {prompt['id']}: {out[-1]:.2f}  {tokenizer.decode(run.tokens)[:60]!r}"
        )
    return out


def heldout_ce(target, tokenizer, domain: str) -> dict[str, float]:
    """Cross-entropy on fixed held-out windows: nats per token and per character."""
    tokens = corpus.encode_corpus_file(tokenizer, data.CORPUS_DIR / f"{domain}_heldout.txt")
    per_token = train.heldout_loss(target, tokens, CE_CONTEXT, CE_WINDOWS)
    windows = train.eval_windows(tokens, CE_WINDOWS, CE_CONTEXT + 1)[:, 1:]  # the scored tokens
    chars = sum(len(tokenizer.decode(w)) for w in windows)
    return {
        "nats_per_token": round(per_token, 4),
        "nats_per_char": round(per_token * windows.numel() / chars, 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", type=Path, default=data.MODELS_DIR / "target")
    ap.add_argument("--log", type=Path, default=data.MODELS_DIR / "training.json")
    args = ap.parse_args()
    env.set_cpu_threads(1)
    target = models.load_model(str(args.target), device="cpu", dtype=torch.float32)
    tokenizer = corpus.load_tokenizer(args.target)
    generator = torch.Generator().manual_seed(0)
    greedy = repetition(target, tokenizer, 0.0, generator)
    sampled = repetition(target, tokenizer, 1.0, generator)

    heldout = corpus.encode_corpus_file(tokenizer, data.CORPUS_DIR / "code_heldout.txt")
    gen = torch.Generator().manual_seed(0)
    starts = torch.randint(0, len(heldout) - N_NEW, (64,), generator=gen).tolist()
    human = [bench.repeated_ngram_fraction(heldout[s : s + N_NEW].tolist()) for s in starts]

    quality = {
        "new_tokens": N_NEW,
        "greedy_repeated_4gram_median": round(statistics.median(greedy), 3),
        "greedy_repeated_4gram_per_prompt": [round(x, 3) for x in greedy],
        "sampled_repeated_4gram_median": round(statistics.median(sampled), 3),
        "sampled_repeated_4gram_per_prompt": [round(x, 3) for x in sampled],
        "sampled_temperature": 1.0,
        "human_code_repeated_4gram_median": round(statistics.median(human), 3),
        "human_windows": len(human),
        "heldout_ce": {d: heldout_ce(target, tokenizer, d) for d in data.DOMAINS},
        "heldout_ce_windows": f"{CE_WINDOWS} x {CE_CONTEXT} tokens per domain",
    }
    log = json.loads(args.log.read_text())
    key = str(args.target.resolve().relative_to(data.ROOT))
    log.setdefault("quality", {})[key] = quality
    args.log.write_text(json.dumps(log, indent=1) + "\n")
    print(json.dumps(quality))


if __name__ == "__main__":
    main()
