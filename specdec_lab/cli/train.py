"""`python -m specdec_lab train`: train one model preset (distilled from a teacher if told), save
it, and log its held-out numbers in the training log (see data/models/README.md)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, replace
from pathlib import Path

import torch

from specdec_lab import data
from specdec_lab.course import corpus, train
from specdec_lab.measure import profiling


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m specdec_lab train", description=__doc__)
    ap.add_argument("--model", choices=sorted(train.PRESETS), required=True, help="preset name")
    ap.add_argument("--out", type=Path, required=True, help="output model directory")
    ap.add_argument("--minutes", type=float, help="wall-clock budget (default: the recipe's)")
    ap.add_argument("--tokens", type=int, help="token budget (makes the run reproducible)")
    ap.add_argument("--domains", nargs="+", choices=data.DOMAINS, help="training domains")
    ap.add_argument("--distill-from", type=Path, help="teacher (target) model directory")
    ap.add_argument("--distill-weight", type=float, help="weight of the KL term (default 0.9)")
    ap.add_argument("--lr", type=float)
    ap.add_argument("--batch-size", type=int)
    ap.add_argument("--context", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-bf16", action="store_true", help="train in plain float32")
    ap.add_argument("--corpus-dir", type=Path, default=data.CORPUS_DIR)
    ap.add_argument(
        "--tokenizer",
        type=Path,
        help="tokenizer directory (default: the teacher's, else data/corpus/tokenizer, "
        "trained if missing)",
    )
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--log", type=Path, help="training log JSON (default: <out>/../training.json)")
    ap.add_argument("--log-name", help="key in the log (default: the output directory's name)")
    ap.add_argument(
        "--alpha-against", type=Path, help="target to measure alpha against (default: teacher)"
    )
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument(
        "--resume", action="store_true", help="continue from <out>.state.pt if a run left one"
    )
    ap.add_argument(
        "--init-from",
        type=Path,
        help="start from this checkpoint's weights instead of a fresh init (continue training)",
    )
    ap.add_argument(
        "--embed-init",
        choices=["random", "svd"],
        default="random",
        help="svd: start the embedding as the teacher's, projected to this width (same vocab)",
    )
    ap.add_argument(
        "--eval-only",
        action="store_true",
        help="do not train: re-measure the model already in --out (loss, latency, alpha)",
    )
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    torch.set_num_threads(args.threads)
    given = ("minutes", "tokens", "lr", "batch_size", "context", "distill_weight", "domains")
    overrides = {k: getattr(args, k) for k in given if getattr(args, k) is not None}
    if args.domains:
        overrides["domains"] = tuple(args.domains)
    overrides |= dict(seed=args.seed, threads=args.threads, bf16_autocast=not args.no_bf16)
    cfg = replace(train.RECIPES[args.model], **overrides)
    if args.tokens is not None and args.minutes is None:
        cfg = replace(cfg, minutes=0.0)
    preset = train.PRESETS[args.model]
    tok_dir = args.tokenizer or args.distill_from or train.DEFAULT_TOKENIZER_DIR
    if args.eval_only:
        tok_dir = args.out
    tokenizer = corpus.ensure_corpus_and_tokenizer(args.corpus_dir, tok_dir, args.vocab_size)
    heldout = {
        d: corpus.encode_corpus_file(tokenizer, args.corpus_dir / f"{d}_heldout.txt")
        for d in data.DOMAINS
    }
    if args.eval_only:
        model = train.load_checkpoint(args.out)
        entry: dict[str, object] = {"params": sum(p.numel() for p in model.parameters())}
    else:
        train_files = [args.corpus_dir / f"{d}_train.txt" for d in cfg.domains]
        train_tokens = torch.cat([corpus.encode_corpus_file(tokenizer, f) for f in train_files])
        teacher = train.load_checkpoint(args.distill_from) if args.distill_from else None
        if args.init_from:
            model = train.load_checkpoint(args.init_from).float().train()
        else:
            model = profiling.build_model(train.model_config(preset, tokenizer), seed=args.seed)
            if args.embed_init == "svd":
                if teacher is None:
                    raise SystemExit("--embed-init svd needs --distill-from (the teacher)")
                train.spectral_embedding_init(model, teacher)
        n_params = sum(p.numel() for p in model.parameters())
        print(f"{args.model}: {n_params / 1e6:.2f}M params, {len(train_tokens) / 1e6:.2f}M tokens")
        result = train.train_model(
            model,
            tokenizer,
            train_tokens,
            cfg,
            args.out,
            teacher,
            progress=not args.no_progress,
            resume=args.resume,
        )
        entry = {
            "preset": asdict(preset),
            "train_config": asdict(cfg),
            "params": n_params,
            "distilled_from": str(args.distill_from) if args.distill_from else None,
            "init_from": str(args.init_from) if args.init_from else None,
            "embed_init": args.embed_init,
            "train_tokens_available": len(train_tokens),
            **result,
            "command": "python -m specdec_lab train "
            + " ".join(argv if argv is not None else sys.argv[1:]),
        }
    ctx = min(cfg.context, 256)
    entry |= {
        "heldout_ce": {
            d: round(train.heldout_loss(model, t, ctx, cfg.eval_windows), 4)
            for d, t in heldout.items()
        },
        "latency_ms_k1": round(train.latency_ms(model, k=1), 3),
        "latency_ms_k8": round(train.latency_ms(model, k=8), 3),
        "disk_mb": round(sum(f.stat().st_size for f in args.out.iterdir()) / 1e6, 2),
    }
    p_dir = args.alpha_against or args.distill_from
    if p_dir is not None:
        target = train.load_checkpoint(p_dir)
        entry["alpha_vs"] = str(p_dir)
        entry["alpha"] = {
            d: {k: round(v, 4) for k, v in train.acceptance_alpha(target, model, t, ctx).items()}
            for d, t in heldout.items()
        }
        entry["c"] = round(entry["latency_ms_k1"] / train.latency_ms(target, k=1), 4)
    log_path = args.log or args.out.parent / "training.json"
    train.update_log(log_path, args.log_name or args.out.name, entry)
    print(json.dumps({k: v for k, v in entry.items() if k not in ("preset", "train_config")}))
    return 0
