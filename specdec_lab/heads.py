"""A self-drafting head: the target drafts for itself from its own last hidden state (EAGLE-style).

EAGLE (Li et al. 2024, arXiv:2401.15077) drafts at the *feature* level: a small head reads the
target's top hidden state h_t together with the embedding of the next token x_{t+1}, predicts
the next feature f_{t+1} ≈ h_{t+1}, and scores it with the target's own (frozen) LM head. It
then runs autoregressively on its own predicted features for γ tokens. The hidden states it starts
from come from the target's verification forward of the previous step, so drafting costs no
extra target call (`lm.open_session(..., keep_hidden=True)` keeps them).

Why EAGLE-style and not Medusa: Medusa's k heads each guess token t+k from h_t alone, without
knowing the tokens in between, so their acceptance falls fast with k; an autoregressive head sees
each drafted token. Our departure from EAGLE, labelled: the head is a residual MLP with no
attention over past positions (EAGLE uses one transformer layer). It then needs no KV cache of
its own and no rollback; the context reaches it only through h_t. We also train it on its own
unrolled predictions for a few steps (as EAGLE-3's "training-time test"), so that drafting
beyond the first token does not meet features it never saw.

Train on the CPU for a few minutes:

    python -m specdec_lab.heads --target data/models/target --out data/models/head --minutes 4
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn
from tqdm.auto import tqdm

from specdec_lab.drafters import one_hot
from specdec_lab.lm import Session, open_session
from specdec_lab.models import output_logits
from specdec_lab.sampling import SamplingConfig, draft_token

WEIGHTS, CONFIG = "head.safetensors", "head.json"


@dataclass(frozen=True)
class HeadConfig:
    """Shape of a draft head over a target with `hidden_size`-wide features."""

    hidden_size: int
    mlp_size: int = 512
    n_blocks: int = 2


class DraftHead(nn.Module):
    """f_{t+1} = head(h_t, e(x_{t+1})): fuse, residual MLP blocks, RMSNorm. (..., d) -> (..., d).

    The output lives where the target's final (normalised) hidden state lives, so the target's
    LM head scores it directly.
    """

    def __init__(self, cfg: HeadConfig) -> None:
        super().__init__()
        d, m = cfg.hidden_size, cfg.mlp_size
        self.cfg = cfg
        self.fuse = nn.Linear(2 * d, d)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.RMSNorm(d), nn.Linear(d, m), nn.SiLU(), nn.Linear(m, d))
            for _ in range(cfg.n_blocks)
        )
        self.norm = nn.RMSNorm(d)

    def forward(self, h: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        x = self.fuse(torch.cat([h, e], dim=-1))  # (..., d)
        for block in self.blocks:
            x = x + block(x)
        return self.norm(x)


# ------------------------------------------------------------------------------------ drafting
class HeadDrafter:
    """A `Drafter` that drafts with a `DraftHead` from the target session's hidden states.

    `target` must be the very session the decoding loop verifies with, opened with
    `keep_hidden=True`: pass it as the loop's target. The first step of a generation proposes
    nothing (the target has not read the prompt yet); every later step starts from the feature
    that predicted the last accepted token.
    """

    def __init__(self, head: DraftHead, target: Session) -> None:
        if not getattr(target, "keep_hidden", False):
            raise ValueError(
                "HeadDrafter needs the target's session opened with keep_hidden=True "
                "(lm.open_session(model, keep_hidden=True))"
            )
        self.head, self.target = head.eval(), target
        self.embed = target.model.get_input_embeddings()
        self.lm_head = target.model.get_output_embeddings()
        self.vocab_size = target.vocab_size
        self.calls = 0  # head forwards, one per drafted token
        self.seconds = 0.0

    @torch.inference_mode()
    def propose(
        self, ids: torch.Tensor, gamma: int, cfg: SamplingConfig, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        t0 = time.perf_counter()
        tokens, q_probs = [], []
        if ids.shape[0] >= 2 and self.target.hidden.shape[0] >= ids.shape[0] - 1:
            device, dtype = self.target.device, next(self.head.parameters()).dtype
            f = self.target.hidden[ids.shape[0] - 2].to(device, dtype)  # (d,) it predicted ids[-1]
            x = ids[-1]
            for _ in range(gamma):
                f = self.head(f, self.embed(x.to(device)).to(dtype))  # (d,)
                # (V',) in the target's dtype, as its forward computes them (scales, soft caps)
                out = output_logits(self.target.model, f.to(self.lm_head.weight.dtype))
                logits = out[: self.vocab_size].float()  # (V,) on the device
                self.calls += 1
                x, q = draft_token(logits, cfg, generator, check=False)  # q None when greedy
                if q is not None:
                    q_probs.append(q)
                tokens.append(x)
        self.seconds += time.perf_counter() - t0
        if not tokens:
            empty = torch.empty(0, dtype=torch.long, device=ids.device)
            return empty, torch.empty(0, self.vocab_size, device=ids.device)
        tokens = torch.stack(tokens)  # (γ,)
        if cfg.greedy:  # one-hot q, which greedy verification never reads
            return tokens, one_hot(tokens, self.vocab_size)
        return tokens, torch.stack(q_probs)  # (γ,), (γ, V)

    def crop(self, length: int) -> None:
        """Nothing to roll back: the head keeps no cache, the target session keeps the features."""


def head_drafter(
    target_model, head: DraftHead, vocab_size: int | None = None, runtime: str = "auto"
):
    """(session, drafter) to pass as speculative_generate's target and draft."""
    session = open_session(target_model, vocab_size, runtime, keep_hidden=True)
    return session, HeadDrafter(head, session)


# ------------------------------------------------------------------------------------ training
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
    time), under bfloat16 autocast when `bf16` (about 2x faster on the CPU). Returns the head
    (float32, eval mode) and a log dict. The target's parameters are left as they were.
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


# ------------------------------------------------------------------------------------ checkpoint
def save_head(head: DraftHead, out: Path, info: dict) -> Path:
    """Write the head's weights in float16 (safetensors) and its config + `info` (JSON)."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().half().contiguous().cpu() for k, v in head.state_dict().items()}
    save_file(state, str(out / WEIGHTS))
    (out / CONFIG).write_text(json.dumps({"config": asdict(head.cfg), **info}, indent=2) + "\n")
    return out / WEIGHTS


def load_head(path: str | Path, device: torch.device | str = "cpu") -> DraftHead:
    """A head saved by `save_head`, in float32 on `device`."""
    from safetensors.torch import load_file

    path = Path(path)
    if not (path / WEIGHTS).exists():
        raise FileNotFoundError(
            f"no draft head at {path}: train one with "
            f"`python -m specdec_lab.heads --target data/models/target --out {path}`"
        )
    cfg = HeadConfig(**json.loads((path / CONFIG).read_text())["config"])
    head = DraftHead(cfg)
    head.load_state_dict({k: v.float() for k, v in load_file(str(path / WEIGHTS)).items()})
    return head.to(device).eval()


# ------------------------------------------------------------------------------------ evaluation
def measure_head(target, head: DraftHead, prompts: list[torch.Tensor], n_new: int, gamma: int):
    """Greedy speculative decoding with the head: (GenerationStats pooled, outputs exact?)."""
    from specdec_lab import decoding

    runs, exact = [], True
    for ids in prompts:
        session, drafter = head_drafter(target, head)
        out = decoding.speculative_generate(session, drafter, ids, n_new, gamma, temperature=0)
        ref = decoding.autoregressive_generate(target, ids, n_new, temperature=0)
        exact &= torch.equal(out.tokens, ref.tokens)
        runs.append(out.stats)
    return decoding.GenerationStats.merge(runs), exact


def main(argv: list[str] | None = None) -> int:
    from transformers import AutoTokenizer

    from specdec_lab import models, runtime
    from specdec_lab.prompts import load_prompts

    parser = argparse.ArgumentParser(
        prog="python -m specdec_lab.heads", description="Train an EAGLE-style draft head."
    )
    parser.add_argument("--target", default="data/models/target", help="target model directory")
    parser.add_argument("--out", required=True, type=Path, help="directory for the checkpoint")
    parser.add_argument("--minutes", type=float, default=4.0, help="training budget")
    parser.add_argument(
        "--text",
        nargs="+",
        type=Path,
        default=[models.MODELS_DIR.parent / "corpus" / f"{d}_train.txt" for d in ("code", "prose")],
        help="training text files (the target's own training split)",
    )
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument(
        "--sequences", type=int, default=4000, help="training sequences drawn from --text"
    )
    parser.add_argument("--gamma", type=int, default=4, help="draft length for the α report")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.text if not p.exists()]
    if missing:
        raise FileNotFoundError(f"training text not found: {', '.join(missing)} (see --text)")
    threads = runtime.set_cpu_threads(args.threads)
    target = models.load_model(args.target, device="cpu", dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(args.target)
    print(
        f"target {args.target}: {sum(p.numel() for p in target.parameters()) / 1e6:.3g}M "
        f"params, {threads} thread(s), {args.minutes} min budget"
    )
    sequences = text_sequences(tokenizer, args.text, args.sequences, args.seq_len, args.seed)
    head, log = train_head(target, sequences, 60 * args.minutes, seed=args.seed)
    prompts = [  # the bench's held-out prompts
        models.encode_prompt(tokenizer, p["text"])
        for domain in ("code", "prose")
        for p in load_prompts(domain, 3)
    ]
    stats, exact = measure_head(target, head, prompts, 48, args.gamma)
    info = {
        "target": str(args.target),
        "train": log,
        "alpha_greedy": stats.acceptance_rate,
        "tokens_per_target_call": stats.tokens_per_target_call,
        "gamma": args.gamma,
        "greedy_exact": exact,
    }
    path = save_head(head, args.out, info)
    print(json.dumps(info, indent=2))
    print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
