"""Training the EAGLE-style draft head of `specdec_lab.heads` on the target's own features.

The target is frozen; the head learns to predict the target's next final hidden state from the
current one and the next token's embedding, scored through the target's own LM head, and is
unrolled on its own predictions for a few steps (EAGLE-3's "training-time test").
"""

from __future__ import annotations

import math
import random
import time
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn
from tqdm.auto import tqdm

from specdec_lab import decoding
from specdec_lab.data import CORPUS_DIR, DOMAINS, MODELS_DIR
from specdec_lab.engine.logits import output_logits
from specdec_lab.heads import WEIGHTS, DraftHead, HeadConfig, head_drafter, load_head

HEAD_DIR = MODELS_DIR / "head"  # the shipped head of the embedded target


@torch.inference_mode()
def collect_features(
    target, sequences: torch.Tensor, seconds: float = math.inf, progress: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's final normalised hidden states on `sequences` (N, S): (N', S, d) and the
    ids (N', S) of the first N' rows that fit in about `seconds` (at least one)."""
    decoder, feats, start = target.get_decoder(), [], time.perf_counter()
    for row in tqdm(sequences, desc="target features", disable=not progress):
        h = decoder(input_ids=row[None].to(target.device)).last_hidden_state[0]  # (S, d)
        feats.append(h.float().cpu())
        if time.perf_counter() - start > seconds:
            break
    return torch.stack(feats), sequences[: len(feats)]


def head_loss(
    head: DraftHead, target, feats: torch.Tensor, ids: torch.Tensor, unroll: int = 3
) -> torch.Tensor:
    """Distillation loss over `unroll` drafting steps, each fed the head's own previous feature.

    feats (B, S, d) the target's features, ids (B, S). Step k predicts h_{t+1+k} from
    (f̂_{t+k}, e(x_{t+1+k})), with f̂_t = h_t: KL from the target's next-token distribution,
    plus a smooth-L1 pull towards the target's feature (EAGLE uses both).
    """
    embed = target.get_input_embeddings()
    span = feats.shape[1] - unroll  # positions t with t + unroll < S
    f, loss = feats[:, :span], 0.0
    for k in range(unroll):
        e = embed(ids[:, 1 + k : 1 + k + span]).detach().float()  # (B, span, d)
        h_true = feats[:, 1 + k : 1 + k + span]  # (B, span, d)
        f = head(f, e)
        with torch.no_grad():
            p = output_logits(target, h_true).float().log_softmax(-1)  # (B, span, V) target
        log_q = output_logits(target, f).float().log_softmax(-1)
        kl = nn.functional.kl_div(log_q, p, log_target=True, reduction="none").sum(-1).mean()
        loss = loss + kl + nn.functional.smooth_l1_loss(f, h_true)
    return loss / unroll


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
    bf16: bool = True,
) -> tuple[DraftHead, dict]:
    """Train a head on the target's own features of `sequences` (N, S) for about `seconds`.

    `feature_share` of the budget goes into the target forwards that collect features, the rest
    into AdamW steps on random batches (learning rate decaying linearly over the remaining
    time), under bfloat16 autocast when `bf16` (faster on CPUs with native bf16 matmuls).
    Returns the head (float32, eval mode) and a log dict. The target's parameters are left as
    they were.
    """
    start = time.perf_counter()
    cfg = cfg or HeadConfig(target.config.hidden_size)
    with _frozen(target):
        feats, ids = collect_features(target, sequences, seconds * feature_share, progress)
        with torch.random.fork_rng(devices=[]):  # seed the weights, not the global RNG
            torch.manual_seed(seed)
            head = DraftHead(cfg).to(target.device)
        opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=0.0)
        rng = random.Random(seed)
        losses, step = [], 0
        deadline = start + seconds
        train_start = time.perf_counter()
        bar = tqdm(desc="head steps", disable=not progress)
        while (now := time.perf_counter()) < deadline:
            for group in opt.param_groups:  # linear decay to 5% over the remaining time budget
                group["lr"] = lr * max(0.05, (deadline - now) / (deadline - train_start))
            batch = rng.sample(range(feats.shape[0]), min(batch_size, feats.shape[0]))
            with torch.autocast(target.device.type, dtype=torch.bfloat16, enabled=bf16):
                loss = head_loss(head, target, feats[batch].to(target.device), ids[batch], unroll)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            step += 1
            bar.update()
        bar.close()
        log = {
            "feature_sequences": feats.shape[0],
            "feature_tokens": feats.shape[0] * feats.shape[1],
            "steps": step,
            "first_loss": losses[0] if losses else math.nan,
            "last_loss": sum(losses[-20:]) / len(losses[-20:]) if losses else math.nan,
            "seconds": time.perf_counter() - start,
        }
        return head.eval(), log


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
    tokenizer, paths: list[Path], n: int, length: int, seed: int = 0
) -> torch.Tensor:
    """n token sequences of `length` from random places in the text files `paths`: (n, length)."""
    rng, rows = random.Random(seed), []
    sizes = [p.stat().st_size for p in paths]
    while len(rows) < n:
        i = rng.randrange(len(paths))
        with open(paths[i], encoding="utf-8", errors="ignore") as f:
            f.seek(rng.randrange(max(sizes[i] - 8 * length, 1)))
            ids = tokenizer(f.read(8 * length))["input_ids"]  # ~8 characters per token is ample
        if len(ids) >= length + 1:
            rows.append(ids[1 : length + 1])  # drop a token that may start mid-character
    return torch.tensor(rows, dtype=torch.long)


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
