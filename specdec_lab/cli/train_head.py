"""`python -m specdec_lab train-head`: train the EAGLE-style draft head on a target's features."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from transformers import AutoTokenizer

from specdec_lab import data, env, heads, models
from specdec_lab.course import head_training


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specdec_lab train-head", description=__doc__)
    ap.add_argument("--target", default="data/models/target", help="target model directory")
    ap.add_argument("--out", required=True, type=Path, help="directory for the checkpoint")
    ap.add_argument("--minutes", type=float, default=4.0, help="training budget")
    ap.add_argument(
        "--text",
        nargs="+",
        type=Path,
        default=[data.CORPUS_DIR / f"{d}_train.txt" for d in data.DOMAINS],
        help="training text files (the target's own training split)",
    )
    ap.add_argument("--text-weights", nargs="+", type=float, help="sampling weight per file")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument(
        "--sequences", type=int, default=4000, help="training sequences drawn from --text"
    )
    ap.add_argument(
        "--init-from", type=Path, help="continue a saved head (its shape and vocabulary win)"
    )
    ap.add_argument("--vocab", type=int, help="draft over the N most frequent tokens only")
    ap.add_argument("--mlp-size", type=int, default=512)
    ap.add_argument("--blocks", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--lr", type=float, default=4e-3)
    ap.add_argument("--feature-share", type=float, default=0.35)
    ap.add_argument(
        "--checkpoint-minutes", type=float, default=10.0, help="save and evaluate this often"
    )
    ap.add_argument("--gamma", type=int, default=4, help="draft length for the α report")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="where the target and head run (cuda: a GPU)")
    ap.add_argument(
        "--online",
        action="store_true",
        help="fresh target features for every batch, drawn from the whole tokenized --text "
        "(for an accelerator; --sequences windows then only count the --vocab tokens)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    missing = [str(p) for p in args.text if not p.exists()]
    if missing:
        raise FileNotFoundError(f"training text not found: {', '.join(missing)} (see --text)")
    threads = env.set_cpu_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {args.device}: this machine has no CUDA device")
    if device.type == "cuda":  # TF32 matmuls: float32 features at tensor-core speed
        torch.backends.cuda.matmul.allow_tf32 = True
    target = models.load_model(args.target, device=device, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(args.target)
    print(
        f"target {args.target}: {sum(p.numel() for p in target.parameters()) / 1e6:.3g}M "
        f"params, {threads} thread(s), {args.minutes} min budget"
    )
    if args.online:
        stream = head_training.token_stream(tokenizer, args.text, args.text_weights, args.seed)
        print(f"tokenized --text: {sum(stream.tokens) / 1e6:.1f}M tokens")
        sequences = stream(min(args.sequences, 20000), args.seq_len)  # for the vocabulary count
    else:
        sequences = head_training.text_sequences(
            tokenizer, args.text, args.sequences, args.seq_len, args.seed, args.text_weights
        )
    heldout_files = {d: data.CORPUS_DIR / f"{d}_heldout.txt" for d in data.DOMAINS}
    heldout = {  # held-out text of each domain, for the curve's α
        d: head_training.text_sequences(tokenizer, [f], 8, args.seq_len, seed=1)
        for d, f in heldout_files.items()
        if f.exists()
    }
    token_ids, init, earlier = None, None, {}
    if args.init_from:
        init = heads.load_head(args.init_from)
        earlier = {"init_from": str(args.init_from), "init_info": heads.head_info(args.init_from)}
        print(f"continuing {args.init_from}: {init.cfg}")
    elif args.vocab:
        token_ids = head_training.frequent_tokens(tokenizer, sequences, args.vocab)
        share = torch.isin(sequences, token_ids).float().mean().item()
        print(f"draft vocabulary: {args.vocab} tokens, {share:.1%} of the training tokens")
    cfg = heads.HeadConfig(target.config.hidden_size, args.mlp_size, args.blocks)

    def checkpoint(head: heads.DraftHead, log: dict) -> None:
        point = log["curve"][-1] if log["curve"] else {}
        for domain, seqs in heldout.items():
            point[f"heldout_alpha_t1_{domain}"] = [
                round(a, 4) for a in head_training.heldout_alpha(head, target, seqs)
            ]
        heads.save_head(head, args.out, {"target": str(args.target), "train": log, **earlier})
        print(json.dumps(point), flush=True)

    common = dict(batch_size=args.batch_size, lr=args.lr, seed=args.seed, init=init)
    common |= dict(progress=not args.no_progress, token_ids=token_ids, checkpoint=checkpoint)
    common |= dict(checkpoint_seconds=60 * args.checkpoint_minutes, cfg=cfg)
    if args.online:
        head, log = head_training.train_head_online(
            target, lambda n: stream(n, args.seq_len), 60 * args.minutes, **common
        )
    else:
        head, log = head_training.train_head(
            target, sequences, 60 * args.minutes, feature_share=args.feature_share, **common
        )
    prompts = [  # the bench's held-out prompts
        models.encode_prompt(tokenizer, p["text"])
        for domain in data.DOMAINS
        for p in data.load_prompts(domain, 3)
    ]
    stats, exact = head_training.measure_head(target, head, prompts, 48, args.gamma)
    info = {
        "target": str(args.target),
        "train": log,
        "alpha_greedy": stats.acceptance_rate,
        "tokens_per_target_call": stats.tokens_per_target_call,
        "gamma": args.gamma,
        "greedy_exact": exact,
        **earlier,
    }
    path = heads.save_head(head, args.out, info)
    print(json.dumps(info, indent=2))
    print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")
    return 0
