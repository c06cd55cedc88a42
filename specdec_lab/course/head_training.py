"""Training the EAGLE-style draft head of `specdec_lab.heads` on the target's own features.

The target is frozen; the head learns to predict the target's next final hidden state from the
current one and the next token's embedding, scored through the target's own LM head, and is
unrolled on its own predictions for a few steps (EAGLE-3's "training-time test").
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import torch
from torch import nn
from tqdm.auto import tqdm

from specdec_lab import decoding
from specdec_lab.data import CORPUS_DIR, DOMAINS, MODELS_DIR
from specdec_lab.engine.logits import output_logits
from specdec_lab.heads import WEIGHTS, DraftHead, HeadConfig, head_drafter, load_head

HEAD_DIR = MODELS_DIR / "head"  # the shipped head of the embedded target


def _head_loss(
    head: DraftHead, target, feats: torch.Tensor, ids: torch.Tensor, unroll: int = 3, table=None
) -> tuple[torch.Tensor, list[float]]:
    """Distillation loss over `unroll` drafting steps, each fed the head's own previous feature,
    and each step's expected acceptance at T = 1, Σ min(p, q), averaged over positions.

    feats (B, S, d) the target's features, ids (B, S). Step k predicts h_{t+1+k} from
    (f̂_{t+k}, e(x_{t+1+k})), with f̂_t = h_t: KL from the target's next-token distribution plus
    a smooth-L1 pull towards the target's feature (EAGLE uses both). With `table` (S', d), the
    rows of a truncated vocabulary, p and q are scored over those rows alone (same optimum).
    """
    embed = target.get_input_embeddings()

    def logits(x: torch.Tensor) -> torch.Tensor:  # (..., V) or (..., S') float32
        return output_logits(target, x).float() if table is None else x @ table.t()

    span = feats.shape[1] - unroll  # positions t with t + unroll < S
    f, loss, alphas = feats[:, :span], 0.0, []
    for k in range(unroll):
        e = embed(ids[:, 1 + k : 1 + k + span]).detach().float()  # (B, span, d)
        h_true = feats[:, 1 + k : 1 + k + span]  # (B, span, d)
        f = head(f, e)
        with torch.no_grad():
            log_p = logits(h_true).log_softmax(-1)  # (B, span, V) the target's
        log_q = logits(f).log_softmax(-1)
        kl = nn.functional.kl_div(log_q, log_p, log_target=True, reduction="none").sum(-1)
        loss = loss + kl.mean() + nn.functional.smooth_l1_loss(f, h_true)
        with torch.no_grad():
            alphas.append(torch.minimum(log_p, log_q).exp().sum(-1).mean().item())
    return loss / unroll, alphas


def train_head(
    target,
    sequences: torch.Tensor,
    seconds: float,
    cfg: HeadConfig | None = None,
    batch_size: int = 4,
    lr: float = 4e-3,
    unroll: int = 3,
    seed: int = 0,
    progress: bool = True,
    feature_share: float = 0.35,
    token_ids: torch.Tensor | None = None,
    checkpoint: Callable[[DraftHead, dict], None] | None = None,
    checkpoint_seconds: float = 600.0,
    init: DraftHead | None = None,
) -> tuple[DraftHead, dict]:
    """Train a head on the target's own features of `sequences` (N, S) for about `seconds`, the
    features collected a sequence at a time (about `feature_share` of the time) between AdamW
    steps on random batches of them. `token_ids` (S',): a truncated vocabulary; `checkpoint(head,
    log)`: called every `checkpoint_seconds` and at the end; `init`: a trained head to continue,
    unmodified (its config and vocabulary win). Returns the head (float32, eval) and a log."""
    start = time.perf_counter()
    deadline = start + seconds
    cfg = cfg or HeadConfig(target.config.hidden_size)
    with _frozen(target):
        head, table, opt = _new_head(target, cfg, token_ids, init, seed, lr)
        rng, rows = random.Random(seed), iter(sequences)
        feats, ids, curve, collect_s = [], [], [], 0.0
        log = {"steps": 0, "curve": curve}
        last_checkpoint, window = start, []
        bar = tqdm(desc="head steps", disable=not progress)
        while (now := time.perf_counter()) < deadline:
            if len(ids) < len(sequences) and (not ids or collect_s < feature_share * (now - start)):
                row = next(rows)
                feats.append(_features(target, row))
                ids.append(row)
                collect_s += time.perf_counter() - now
                continue
            for group in opt.param_groups:  # warm up over 100 steps, then decay to 5%
                warm = min(1.0, (log["steps"] + 1) / 100)
                group["lr"] = lr * warm * max(0.05, (deadline - now) / seconds)
            batch = rng.sample(range(len(ids)), min(batch_size, len(ids)))
            x = torch.stack([feats[i] for i in batch]).to(target.device)  # (B, S, d)
            x_ids = torch.stack([ids[i] for i in batch]).to(target.device)  # (B, S)
            loss, alphas = _head_loss(head, target, x, x_ids, unroll, table)
            opt.zero_grad()
            loss.backward()
            opt.step()
            log["steps"] += 1
            log.setdefault("first_loss", loss.item())
            window.append((loss.item(), alphas))
            bar.update()
            if checkpoint and time.perf_counter() - last_checkpoint > checkpoint_seconds:
                _log_point(log, window, feats, start, collect_s)
                checkpoint(head.eval(), log)
                head.train()
                last_checkpoint, window = time.perf_counter(), []
        bar.close()
        _log_point(log, window, feats, start, collect_s)
        if checkpoint:
            checkpoint(head.eval(), log)
        return head.eval(), log


def train_head_online(
    target,
    windows: Callable[[int], torch.Tensor],
    seconds: float,
    cfg: HeadConfig,
    token_ids: torch.Tensor | None = None,
    batch_size: int = 32,
    lr: float = 3e-3,
    unroll: int = 3,
    seed: int = 0,
    progress: bool = True,
    checkpoint: Callable[[DraftHead, dict], None] | None = None,
    checkpoint_seconds: float = 60.0,
    init: DraftHead | None = None,
) -> tuple[DraftHead, dict]:
    """`train_head` for an accelerator, where the target's forward is cheap: every step runs the
    frozen target on fresh `windows(batch_size)` (B, S) token ids, keeping no features. Same loss,
    schedule, checkpoints and log as `train_head`, plus the tokens seen."""
    start = time.perf_counter()
    deadline = start + seconds
    with _frozen(target):
        head, table, opt = _new_head(target, cfg, token_ids, init, seed, lr)
        log: dict = {"steps": 0, "curve": [], "tokens_seen": 0}
        last_checkpoint, window = start, []
        bar = tqdm(desc="head steps", disable=not progress)
        while (now := time.perf_counter()) < deadline:
            for group in opt.param_groups:  # warm up over 100 steps, then decay to 5%
                warm = min(1.0, (log["steps"] + 1) / 100)
                group["lr"] = lr * warm * max(0.05, (deadline - now) / seconds)
            ids = windows(batch_size).to(target.device)  # (B, S)
            with torch.no_grad():
                feats = target.get_decoder()(input_ids=ids).last_hidden_state.float()  # (B, S, d)
            loss, alphas = _head_loss(head, target, feats, ids, unroll, table)
            opt.zero_grad()
            loss.backward()
            opt.step()
            log["steps"] += 1
            log["tokens_seen"] += ids.numel()
            window.append((loss.item(), alphas))
            bar.update()
            if checkpoint and time.perf_counter() - last_checkpoint > checkpoint_seconds:
                _log_point(log, window, [], start, 0.0)
                checkpoint(head.eval(), log)
                head.train()
                last_checkpoint, window = time.perf_counter(), []
        bar.close()
        _log_point(log, window, [], start, 0.0)
        if checkpoint:
            checkpoint(head.eval(), log)
        return head.eval(), log


def token_stream(tokenizer, paths: list[Path], weights: list[float] | None = None, seed: int = 0):
    """Each file of `paths` tokenized whole, once; returns `windows(n, length=128)`, which draws
    n windows (n, length) of consecutive tokens at random places (a file chosen by `weights`)."""
    streams = []
    for path in paths:
        lines = path.read_text(encoding="utf-8", errors="ignore").splitlines(keepends=True)
        chunks = ["".join(lines[i : i + 64]) for i in range(0, len(lines), 64)]  # batched: parallel
        ids = tokenizer(chunks, add_special_tokens=False)["input_ids"]
        streams.append(torch.tensor([t for doc in ids for t in doc], dtype=torch.long))
    gen = torch.Generator().manual_seed(seed)
    probs = torch.tensor(weights or [1.0] * len(paths), dtype=torch.float)

    def windows(n: int, length: int = 128) -> torch.Tensor:
        which = torch.multinomial(probs, n, replacement=True, generator=gen)
        rows = []
        for i in which.tolist():
            at = torch.randint(len(streams[i]) - length, (1,), generator=gen).item()
            rows.append(streams[i][at : at + length])
        return torch.stack(rows)  # (n, length)

    windows.tokens = [len(s) for s in streams]
    return windows


def _new_head(target, cfg: HeadConfig, token_ids, init: DraftHead | None, seed: int, lr: float):
    """(head on the target's device, its LM-head table or None, its AdamW): a fresh head seeded
    with `seed`, or a copy of `init`."""
    if init is not None:
        cfg, token_ids = init.cfg, init.token_ids
    if token_ids is not None:
        cfg = replace(cfg, draft_vocab=len(token_ids))
    with torch.random.fork_rng(devices=[]):  # seed the weights, not the global RNG
        torch.manual_seed(seed)
        head = DraftHead(cfg, token_ids).to(target.device)
    if init is not None:
        head.load_state_dict(init.state_dict())
    lm_head = target.get_output_embeddings().weight.detach().float()
    table = None if token_ids is None else head.table(lm_head)  # (S', d)
    return head, table, torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=0.0)


@torch.inference_mode()
def _features(target, row: torch.Tensor) -> torch.Tensor:
    """The target's final normalised hidden states on one sequence (S,): (S, d) float32."""
    hidden = target.get_decoder()(input_ids=row[None].to(target.device)).last_hidden_state
    return hidden[0].float().cpu()


def _log_point(log: dict, window: list, feats: list, start: float, collect_s: float) -> None:
    """Add the mean loss and per-step α of the steps in `window` to `log` and its curve."""
    if window:
        loss = sum(w[0] for w in window) / len(window)
        alphas = [sum(w[1][k] for w in window) / len(window) for k in range(len(window[0][1]))]
        minutes = round((time.perf_counter() - start) / 60, 2)
        point = {"minutes": minutes, "steps": log["steps"], "loss": round(loss, 4)}
        log["curve"].append(point | {"train_alpha_t1": [round(a, 4) for a in alphas]})
    log.update(
        feature_sequences=len(feats),
        feature_tokens=sum(f.shape[0] for f in feats),
        feature_seconds=round(collect_s, 1),
        seconds=round(time.perf_counter() - start, 1),
        last_loss=log["curve"][-1]["loss"] if log["curve"] else math.nan,
    )


@torch.inference_mode()
def heldout_alpha(head: DraftHead, target, sequences: torch.Tensor, unroll: int = 3) -> list[float]:
    """Expected acceptance at T = 1, Σ min(p, q), of each of `unroll` chained drafting steps on
    held-out `sequences` (N, S), teacher-forced on the target's own features."""
    feats = torch.stack([_features(target, row) for row in sequences]).to(target.device)
    lm_head = target.get_output_embeddings().weight.detach().float()
    table = None if head.token_ids is None else head.table(lm_head)
    return _head_loss(head, target, feats, sequences.to(target.device), unroll, table)[1]


@contextmanager
def _frozen(model):
    """Freeze `model`'s parameters inside the block, then restore their flags."""
    flags = [p.requires_grad for p in model.parameters()]
    model.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in zip(model.parameters(), flags, strict=True):
            p.requires_grad_(flag)


def text_sequences(
    tokenizer,
    paths: list[Path],
    n: int,
    length: int,
    seed: int = 0,
    weights: list[float] | None = None,
) -> torch.Tensor:
    """n token sequences of `length` from random places in the text files `paths` (drawn with
    `weights`, equal by default): (n, length)."""
    rng, rows = random.Random(seed), []
    sizes = [p.stat().st_size for p in paths]
    while len(rows) < n:
        i = rng.choices(range(len(paths)), weights)[0]
        with open(paths[i], encoding="utf-8", errors="ignore") as f:
            f.seek(rng.randrange(max(sizes[i] - 8 * length, 1)))
            ids = tokenizer(f.read(8 * length))["input_ids"]  # ~8 characters per token is ample
        if len(ids) >= length + 1:
            rows.append(ids[1 : length + 1])  # drop a token that may start mid-character
    return torch.tensor(rows, dtype=torch.long)


def frequent_tokens(tokenizer, sequences: torch.Tensor, n: int) -> torch.Tensor:
    """The `n` token ids most frequent in `sequences`, most frequent first, after the
    tokenizer's special tokens (which chat prompts need however rare in text): (n,) long."""
    counts = torch.bincount(sequences.flatten(), minlength=len(tokenizer)).float()
    special = torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long)
    counts[special] = math.inf
    return counts.argsort(descending=True, stable=True)[:n]


def measure_head(target, head: DraftHead, prompts: list[torch.Tensor], n_new: int, gamma: int):
    """Greedy speculative decoding with the head: (GenerationStats pooled, outputs exact?)."""
    runs, exact = [], True
    for ids in prompts:
        session, drafter = head_drafter(target, head)
        out = decoding.speculative_generate(session, drafter, ids, n_new, gamma, temperature=0)
        ref = decoding.autoregressive_generate(target, ids, n_new, temperature=0)
        exact &= torch.equal(out.tokens, ref.tokens)
        runs.append(out.stats)
    return decoding.GenerationStats.merge(runs), exact


def course_head(pair, seconds: float = 20.0) -> tuple[DraftHead, str]:
    """The draft head notebook 06 runs for `pair`'s target: the one shipped in data/models/head
    where it exists, else one trained here for `seconds` on the corpus (weak, but it runs).
    Returns (head on the pair's device, one sentence on where it came from)."""
    if (HEAD_DIR / WEIGHTS).exists():
        return load_head(HEAD_DIR, pair.device), f"loaded {HEAD_DIR}"
    corpus = [CORPUS_DIR / f"{d}_train.txt" for d in DOMAINS]
    seqs = text_sequences(pair.tokenizer, corpus, 200, 128, seed=0)
    head, log = train_head(pair.target, seqs, seconds=seconds, progress=False)
    return head, f"no shipped head: trained one for {seconds:g} s ({log['steps']} steps)"
