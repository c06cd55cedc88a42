"""Train the course's own target and draft models on the stdlib corpus (`specdec_lab.course.corpus`).

Everything the course runs on is produced here, on a laptop CPU, without a model hub:

1. a byte-level BPE tokenizer (`tokenizers`), wrapped as a `PreTrainedTokenizerFast`;
2. Llama-architecture models (`transformers.LlamaForCausalLM`) of named sizes (`PRESETS`);
3. optional distillation of a draft q from a target p (KL(p || q) on the target's soft labels);
4. the numbers that decide whether speculative decoding pays: held-out loss per domain, the
   acceptance rate alpha = E[sum_x min(p(x), q(x))] = 1 - E[TV(p, q)] (Leviathan et al. 2023,
   arXiv:2211.17192; p = target, q = draft) and the forward latency of each model.

Command line (`python -m specdec_lab train ...`, `specdec_lab.cli.train`)::

    train --model target --minutes 30 --out data/models/target
    train --model draft --minutes 8 --distill-from data/models/target --out data/models/draft

Training runs against a wall-clock (`--minutes`) or a token budget (`--tokens`), the learning-rate
schedule (linear warmup, cosine decay) laid out over whichever is given: a slower machine trains
on fewer tokens but finishes its schedule. Only a token budget makes a run bit-for-bit
reproducible (for a given `--seed`). Nothing here runs on import or draws from the global RNG.
"""

from __future__ import annotations

import copy
import json
import math
import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from specdec_lab import models
from specdec_lab.course.corpus import MAX_POSITIONS
from specdec_lab.data import CORPUS_DIR, DOMAINS
from specdec_lab.measure import timing
from specdec_lab.measure.profiling import ModelShape
from specdec_lab.verify import acceptance_rate

DEFAULT_TOKENIZER_DIR = CORPUS_DIR / "tokenizer"


# --- Configuration: frozen dataclasses and named presets ----------------------------------------


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings; `minutes` and/or `tokens` bound the run (whichever ends first)."""

    minutes: float = 10.0
    tokens: int | None = None
    context: int = 256
    batch_size: int = 8
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_fraction: float = 0.03
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    domains: tuple[str, ...] = DOMAINS
    distill_weight: float = 0.9  # share of KL(p || q) in the loss when a teacher is given
    checkpoint_minutes: float = 3.0
    eval_windows: int = 32
    seed: int = 0
    threads: int = 2
    bf16_autocast: bool = True  # bf16 matmuls on CPUs that have them; fp32 master weights


PRESETS: dict[str, ModelShape] = {
    shape.name: shape
    for shape in [
        # ~10.7M parameters, deep and narrow: on a CPU batch-1 latency is dominated by
        # per-layer overhead, so depth sets the cost ratio c (measured in the model card,
        # data/models/README.md). The vocabulary comes from the tokenizer (`model_config`).
        ModelShape("target", 256, 12, 4, 704, tie_embeddings=True),
        # ~1M parameters, 2 layers to the target's 12: a small c.
        ModelShape("draft", 128, 2, 4, 384, tie_embeddings=True),
        # Same shape as "draft"; the training recipe (prose only) is what differs.
        ModelShape("draft-prose", 128, 2, 4, 384, tie_embeddings=True),
        # Smaller and larger drafts, for "alpha and speedup by draft size".
        ModelShape("draft-small", 64, 2, 2, 192, tie_embeddings=True),
        ModelShape("draft-large", 256, 3, 4, 704, tie_embeddings=True),
        # SmolLM2-135M's draft (`specdec_lab.models.smollm2`): its 49,152-token vocabulary, tied,
        # at a fifth of its width; ~15M parameters, most of them the embedding table.
        ModelShape("smollm2-draft", 256, 4, 4, 768, tie_embeddings=True),
        # For tests only: trains in a second.
        ModelShape("micro", 32, 1, 2, 64, tie_embeddings=True),
    ]
}

#: Default training recipe per preset (overridable on the command line).
RECIPES: dict[str, TrainConfig] = {
    "target": TrainConfig(minutes=22.0, lr=2e-3, batch_size=8),
    "draft": TrainConfig(minutes=6.0, lr=4e-3, batch_size=8),
    "draft-prose": TrainConfig(minutes=4.0, lr=4e-3, batch_size=8, domains=("prose",)),
    "draft-small": TrainConfig(minutes=4.0, lr=5e-3, batch_size=8),
    "draft-large": TrainConfig(minutes=6.0, lr=3e-3, batch_size=8),
    # One core, in the background, resumable: the teacher's forward is most of each step.
    "smollm2-draft": TrainConfig(
        minutes=170.0, lr=2e-3, batch_size=4, threads=1, checkpoint_minutes=5.0
    ),
    "micro": TrainConfig(minutes=0.2, tokens=4096, context=32, batch_size=4, lr=1e-2),
}


# --- Models, batches, metrics -------------------------------------------------------------------


def model_config(shape: ModelShape, tokenizer):
    """The `LlamaConfig` of `shape` for `tokenizer`: its vocabulary and its one special token."""
    special = tokenizer.eos_token_id
    return replace(shape, vocab_size=len(tokenizer)).config(
        bos_token_id=special,
        eos_token_id=special,
        pad_token_id=special,
        max_position_embeddings=MAX_POSITIONS,
        rope_theta=10000.0,
    )


@torch.no_grad()
def spectral_embedding_init(model, teacher) -> None:
    """Start `model`'s (tied) embedding table as the best rank-d approximation of `teacher`'s
    (d = the model's width): rows `U[:, :d] · S[:d]` of the SVD `E = U S Vᵀ`, rescaled to the
    fresh init's std. The draft then starts knowing which tokens are alike."""
    table = teacher.get_input_embeddings().weight.float()  # (V, D)
    own = model.get_input_embeddings().weight  # (V, d)
    if table.shape[0] != own.shape[0] or own.shape[1] > table.shape[1]:
        raise ValueError(
            f"cannot project a {tuple(table.shape)} embedding onto {tuple(own.shape)}: the "
            "vocabularies must match and the model must be no wider than its teacher"
        )
    u, s, _ = torch.linalg.svd(table, full_matrices=False)
    d = own.shape[1]
    projected = u[:, :d] * s[:d]  # (V, d)
    # The geometry is the teacher's, the scale the fresh init's: at the teacher's own scale the
    # untrained draft's logits are so sharp that its first cross-entropy exceeds log V.
    own.copy_(projected * (own.std() / projected.std()))


def sample_batch(
    tokens: torch.Tensor, batch_size: int, context: int, generator: torch.Generator
) -> torch.Tensor:
    """Random windows of `context + 1` tokens from `tokens` (n,). Returns `(batch_size, context+1)`."""
    starts = torch.randint(0, len(tokens) - context - 1, (batch_size,), generator=generator)
    return torch.stack([tokens[s : s + context + 1] for s in starts.tolist()]).long()  # (B, T+1)


def eval_windows(tokens: torch.Tensor, n: int, context: int) -> torch.Tensor:
    """`n` evenly spaced, deterministic windows of `context` tokens. Shape `(n, context)`."""
    n = max(1, min(n, (len(tokens) - 1) // context))
    stride = (len(tokens) - context - 1) // n
    return torch.stack([tokens[i * stride : i * stride + context] for i in range(n)]).long()


@torch.no_grad()
def heldout_loss(
    model, tokens: torch.Tensor, context: int = 256, n: int = 48, bs: int = 8
) -> float:
    """Mean next-token cross entropy (nats) of `model` on `n` fixed windows of `tokens`."""
    model.eval()
    windows = eval_windows(tokens, n, context + 1)  # (n, T+1)
    total, count = 0.0, 0
    for i in range(0, len(windows), bs):
        w = windows[i : i + bs]
        logits = model(input_ids=w[:, :-1]).logits.float()  # (b, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), w[:, 1:].flatten(), reduction="sum")
        total, count = total + loss.item(), count + w[:, 1:].numel()
    return total / count


@torch.no_grad()
def acceptance_alpha(
    target, draft, tokens: torch.Tensor, context: int = 256, n: int = 32, bs: int = 8
) -> dict[str, float]:
    """Acceptance rate of draft q against target p on fixed windows of held-out `tokens`: alpha =
    mean of sum_x min(p(x), q(x)) = 1 - mean TV(p, q) at T = 1 (Leviathan et al. 2023, eq. 1), and
    `greedy_match`, how often argmax q == argmax p (greedy decoding's per-token acceptance)."""
    target.eval()
    draft.eval()
    windows = eval_windows(tokens, n, context)  # (n, T)
    alphas, matches = [], []
    for i in range(0, len(windows), bs):
        w = windows[i : i + bs]
        p = target(input_ids=w).logits.float().softmax(-1)  # (b, T, V)
        q = draft(input_ids=w).logits.float().softmax(-1)  # (b, T, V)
        alphas.append(acceptance_rate(p, q).flatten())  # (b*T,)
        matches.append((p.argmax(-1) == q.argmax(-1)).float().flatten())  # (b*T,)
    return {
        "alpha": torch.cat(alphas).mean().item(),
        "greedy_match": torch.cat(matches).mean().item(),
    }


def latency_ms(model, k: int = 1) -> float:
    """Ms of one cached forward over `k` new tokens after 128 tokens, batch 1, through
    transformers' forward (the "hf" session): the fastest of 40 (`timing.session_latency`)."""
    return 1e3 * timing.session_latency(model, k, runtime="hf", repeats=40, prefix=128)


def _save_model(model, tokenizer, out_dir: Path, dtype: torch.dtype = torch.float16) -> None:
    """Save model (cast to `dtype`), tokenizer and generation config in Hugging Face format."""
    from transformers import GenerationConfig

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    to_save = copy.deepcopy(model).to(dtype)
    to_save.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=False,
    )
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    to_save.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    for f in tmp.iterdir():  # replace file by file so a killed save never leaves a half model
        f.replace(out_dir / f.name)
    tmp.rmdir()


def load_checkpoint(path: Path):
    """A saved model from a local directory, in float32 on the CPU, in eval mode."""
    return models.load_model(str(path), device="cpu", dtype=torch.float32)


# --- Training loop ------------------------------------------------------------------------------


def lr_at(progress: float, cfg: TrainConfig) -> float:
    """Linear warmup over `warmup_fraction`, then cosine decay to `min_lr_ratio * lr`."""
    if progress < cfg.warmup_fraction:
        return cfg.lr * max(progress / cfg.warmup_fraction, 0.01)
    x = min(1.0, (progress - cfg.warmup_fraction) / (1 - cfg.warmup_fraction))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * x)))


def _make_optimizer(model, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on the matrices only (not on norms and biases)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0},
    ]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95))


def _distill_loss(
    model, teacher, batch: torch.Tensor, cfg: TrainConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, cross-entropy) on `batch` (B, T+1): with a `teacher`, the loss is
    `w · KL(p_teacher || q_model) + (1 − w) · CE` with w = `cfg.distill_weight`: the draft learns
    the target's whole next-token distribution, which α rewards."""
    x, y = batch[:, :-1], batch[:, 1:]  # (B, T) each
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16_autocast):
        logits = model(input_ids=x).logits.float()  # (B, T, V)
    ce = F.cross_entropy(logits.flatten(0, 1), y.flatten())
    if teacher is None:
        return ce, ce
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16_autocast):
        p_logits = teacher(input_ids=x).logits.float()  # (B, T, V)
    log_q = F.log_softmax(logits, -1).flatten(0, 1)  # (B·T, V) the model's
    log_p = F.log_softmax(p_logits, -1).flatten(0, 1)  # (B·T, V) the teacher's
    kl = F.kl_div(log_q, log_p, log_target=True, reduction="batchmean")
    return cfg.distill_weight * kl + (1 - cfg.distill_weight) * ce, ce


@dataclass
class _TrainState:
    """Where a run is: steps, tokens, each step's training CE (the last 200 survive a checkpoint),
    the curve logged at each checkpoint, and the seconds trained before this process started."""

    step: int = 0
    seen: int = 0
    losses: list[float] = field(default_factory=list)
    curve: list[dict[str, float]] = field(default_factory=list)
    elapsed: float = 0.0


def train_model(
    model,
    tokenizer,
    train_tokens: torch.Tensor,
    cfg: TrainConfig,
    out_dir: Path | None = None,
    teacher=None,
    progress: bool = True,
    resume: bool = False,
) -> dict[str, object]:
    """Train `model` in place on random windows of `train_tokens` (n,), distilled from `teacher`
    if given (`_distill_loss`); return a log dict. Every `checkpoint_minutes` it saves the model
    to `out_dir` and the full training state (weights, optimizer, RNG, clock) to
    `<out_dir>.state.pt`; with `resume=True` a killed run continues from it, on the same schedule.
    """
    torch.set_num_threads(cfg.threads)
    gen = torch.Generator().manual_seed(cfg.seed)
    opt = _make_optimizer(model, cfg)
    if teacher is not None:
        teacher.eval()
    budget_s = cfg.minutes * 60 if cfg.minutes else math.inf
    state_path = Path(f"{out_dir}.state.pt") if out_dir is not None else None
    run = _TrainState()
    if resume and state_path is not None and state_path.exists():
        run = _load_train_state(state_path, model, opt, gen)
    t_start = time.perf_counter() - run.elapsed
    last_ckpt = time.perf_counter()
    bar = tqdm(total=1000, desc="train", unit="‰", disable=not progress)
    while True:
        prog = (time.perf_counter() - t_start) / budget_s
        if cfg.tokens:
            prog = max(prog, run.seen / cfg.tokens)
        if prog >= 1.0:
            break
        lr = lr_at(prog, cfg)
        _train_step(model, teacher, train_tokens, opt, gen, cfg, lr, run)
        bar.n = min(1000, int(prog * 1000))
        bar.set_postfix(
            step=run.step, ce=f"{statistics.fmean(run.losses[-20:]):.3f}", lr=f"{lr:.1e}"
        )
        bar.refresh()
        if out_dir is not None and time.perf_counter() - last_ckpt > cfg.checkpoint_minutes * 60:
            _save_train_state(model, tokenizer, out_dir, opt, gen, run, t_start)
            last_ckpt = time.perf_counter()
    bar.n = 1000
    bar.close()
    wall = time.perf_counter() - t_start
    model.eval()
    if out_dir is not None:
        _save_train_state(model, tokenizer, out_dir, opt, gen, run, t_start)
    losses = run.losses
    return {
        "curve": run.curve,
        "steps": run.step,
        "tokens_seen": run.seen,
        "wall_s": round(wall, 1),
        "tokens_per_s": round(run.seen / max(wall, 1e-9), 1),
        "first_train_ce": round(statistics.fmean(losses[:10]), 4) if losses else None,
        "final_train_ce": round(statistics.fmean(losses[-50:]), 4) if losses else None,
    }


def _train_step(
    model, teacher, tokens: torch.Tensor, opt, gen, cfg: TrainConfig, lr: float, run: _TrainState
) -> None:
    """One optimizer step at learning rate `lr` on a random batch of `tokens`; `run` counts it."""
    for group in opt.param_groups:
        group["lr"] = lr
    model.train()
    batch = sample_batch(tokens, cfg.batch_size, cfg.context, gen)  # (B, T+1)
    loss, ce = _distill_loss(model, teacher, batch, cfg)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    opt.step()
    run.step += 1
    run.seen += cfg.batch_size * cfg.context
    run.losses.append(ce.item())


def _save_train_state(
    model, tokenizer, out_dir: Path, opt, gen: torch.Generator, run: _TrainState, t_start: float
) -> None:
    """Save the model to `out_dir`, log a point of the curve, and write the full training state
    to `<out_dir>.state.pt` atomically; the run's clock counts from `t_start` (`perf_counter`)."""
    _save_model(model, tokenizer, out_dir)
    elapsed = time.perf_counter() - t_start
    run.curve.append(
        {"s": round(elapsed), "tokens": run.seen, "ce": statistics.fmean(run.losses[-50:])}
    )
    state = {"model": model.state_dict(), "opt": opt.state_dict(), "gen": gen.get_state()}
    state |= {"step": run.step, "seen": run.seen, "losses": run.losses[-200:], "curve": run.curve}
    state_path = Path(f"{out_dir}.state.pt")
    torch.save(state | {"elapsed": elapsed}, f"{state_path}.tmp")
    Path(f"{state_path}.tmp").replace(state_path)


def _load_train_state(state_path: Path, model, opt, gen: torch.Generator) -> _TrainState:
    """Restore the model, optimizer and generator `_save_train_state` saved; where the run was."""
    state = torch.load(state_path, weights_only=False)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    gen.set_state(state["gen"])
    run = _TrainState(*(state[k] for k in ("step", "seen", "losses", "curve", "elapsed")))
    print(
        f"resumed from {state_path}: step {run.step}, {run.seen:,} tokens, {run.elapsed / 60:.1f} min"
    )
    return run


def update_log(log_path: Path, name: str, entry: dict[str, object]) -> None:
    """Merge `entry` into `models[name]` of the JSON training log (new keys win)."""
    log_path = Path(log_path)
    log = json.loads(log_path.read_text()) if log_path.exists() else {}
    models = log.setdefault("models", {})
    models[name] = {**models.get(name, {}), **entry}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text(json.dumps(log, indent=1) + "\n")
