"""Measure training throughput (tokens/s) of a model preset on this CPU, before a long run.

Compares, for the same preset and a fixed number of seconds each:

* float32 against bf16 autocast, on one thread;
* one process with two threads against two single-thread processes that average gradients
  (`torch.distributed`, gloo backend);
* a few (context, batch) shapes.

Writes the table into the training log (`data/models/training.json`, key "throughput") and prints
it. Run it on an otherwise idle machine: other work on the cores changes every number.

    python scripts/train_throughput.py --preset target --seconds 30
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from specdec_lab.course import corpus, train
from specdec_lab.measure import profiling


def _steps(model, opt, tokens, context, batch, seconds, bf16, gen) -> tuple[int, float]:
    """Run training steps for `seconds` (after 2 warm-up steps); return (tokens, seconds)."""
    done, t0 = 0, None
    for step in range(10**9):
        if step == 2:
            t0 = time.perf_counter()
        if t0 is not None and time.perf_counter() - t0 > seconds:
            break
        xy = train.sample_batch(tokens, batch, context, gen)  # (B, T+1)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(input_ids=xy[:, :-1]).logits.float()  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), xy[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if t0 is not None:
            done += batch * context
    return done, time.perf_counter() - t0


def single(preset, tokenizer, tokens, context, batch, seconds, bf16, threads) -> float:
    torch.set_num_threads(threads)
    model = profiling.build_model(train.model_config(train.PRESETS[preset], tokenizer)).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    n, s = _steps(model, opt, tokens, context, batch, seconds, bf16, torch.Generator())
    return n / s


def _ddp_worker(rank, world, preset, tok_dir, tokens, context, batch, seconds, out):
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29517")
    os.sched_setaffinity(0, {rank % os.cpu_count()})
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    tokenizer = corpus.load_tokenizer(tok_dir)
    model = profiling.build_model(train.model_config(train.PRESETS[preset], tokenizer)).train()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(rank)
    n, s = _steps(ddp, opt, tokens, context, batch, seconds, True, gen)
    out[rank] = n / s
    dist.destroy_process_group()


def ddp(preset, tok_dir, tokens, context, batch, seconds) -> float:
    import torch.multiprocessing as mp

    out = mp.Manager().dict()
    mp.spawn(_ddp_worker, args=(2, preset, tok_dir, tokens, context, batch, seconds, out), nprocs=2)
    return sum(out.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="target", choices=sorted(train.PRESETS))
    ap.add_argument("--tokenizer", type=Path, default=Path("data/models/target"))
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--log", type=Path, default=Path("data/models/training.json"))
    args = ap.parse_args()
    tokenizer = corpus.load_tokenizer(args.tokenizer)
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, len(tokenizer), (200_000,), generator=gen)  # speed only
    rows = []

    def record(setup: str, context: int, batch: int, tok_s: float) -> None:
        rows.append({"setup": setup, "context": context, "batch": batch, "tokens_per_s": tok_s})
        print(f"{setup:<34} ctx {context:>4} batch {batch:>3}  {tok_s:8.0f} tok/s", flush=True)

    sec = args.seconds
    record("fp32, 1 thread", 256, 8, single(args.preset, tokenizer, tokens, 256, 8, sec, False, 1))
    record("bf16, 1 thread", 256, 8, single(args.preset, tokenizer, tokens, 256, 8, sec, True, 1))
    record("bf16, 2 threads", 256, 8, single(args.preset, tokenizer, tokens, 256, 8, sec, True, 2))
    for context, batch in [(128, 16), (256, 16), (512, 4)]:
        tok_s = single(args.preset, tokenizer, tokens, context, batch, sec, True, 1)
        record("bf16, 1 thread", context, batch, tok_s)
    record(
        "bf16, 2 procs x 1 thread (gloo)",
        256,
        8,
        ddp(args.preset, args.tokenizer, tokens, 256, 8, sec),
    )

    log = json.loads(args.log.read_text()) if args.log.exists() else {}
    log["throughput"] = {
        "preset": args.preset,
        "seconds_each": sec,
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "rows": [r | {"tokens_per_s": round(r["tokens_per_s"])} for r in rows],
    }
    args.log.write_text(json.dumps(log, indent=1) + "\n")


if __name__ == "__main__":
    main()
