"""A self-drafting head: the target drafts for itself from its own last hidden state (EAGLE-style).

EAGLE (Li et al. 2024, arXiv:2401.15077) drafts at the *feature* level: a small head reads the
target's top hidden state h_t and the embedding of the next token x_{t+1}, predicts the next
feature f_{t+1} ≈ h_{t+1}, scores it with the target's own (frozen) LM head, and runs on its own
features for γ tokens (unlike Medusa's heads, it sees each drafted token). h_t comes from the
target's previous verification forward (`open_session(..., keep_hidden=True)`): no extra target
call. Our departure from EAGLE, labelled: a residual MLP with no attention (EAGLE uses one
transformer layer), so no KV cache and no rollback, trained on its own unrolled predictions for
a few steps (as EAGLE-3's "training-time test").

A head may draft over a **truncated vocabulary** (`HeadConfig.draft_vocab`, as EAGLE-3's does):
only the LM-head rows of the most frequent tokens (`token_ids`), so its q is zero off the list
and only acceptance is lost there (on SmolLM2-135M the LM head is a fifth of the forward).

Training lives in `course.head_training`; on the CPU, for a few minutes:

    python -m specdec_lab train-head --target data/models/target --out data/models/head --minutes 4
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from specdec_lab import env
from specdec_lab.drafters import Drafter, stack_proposal
from specdec_lab.engine.logits import output_logits, scales_logits
from specdec_lab.engine.sessions import DEFAULT_RUNTIME, Session, open_session
from specdec_lab.sampling import SamplingConfig, draft_token

WEIGHTS, CONFIG = "head.safetensors", "head.json"
INT8, SCALE = ".int8", ".scale"  # the keys of a weight stored as int8 rows and their scales


@dataclass(frozen=True)
class HeadConfig:
    """Shape of a draft head over a target with `hidden_size`-wide features."""

    hidden_size: int
    mlp_size: int = 512
    n_blocks: int = 2
    draft_vocab: int | None = None  # score over this many token ids (`token_ids`); None: all


class DraftHead(nn.Module):
    """f_{t+1} = head(h_t, e(x_{t+1})): fuse, residual MLP blocks, RMSNorm. (..., d) -> (..., d),
    in the space of the target's final (normalised) hidden state, which its LM head scores."""

    def __init__(self, cfg: HeadConfig, token_ids: torch.Tensor | None = None) -> None:
        super().__init__()
        d, m = cfg.hidden_size, cfg.mlp_size
        self.cfg = cfg
        if (token_ids is None) != (cfg.draft_vocab is None):
            raise ValueError("token_ids are needed exactly when cfg.draft_vocab is set")
        if token_ids is not None and token_ids.shape != (cfg.draft_vocab,):
            raise ValueError(
                f"token_ids must be ({cfg.draft_vocab},), got {tuple(token_ids.shape)}"
            )
        # (S,) the ids it drafts from, most frequent first; saved with the weights
        self.register_buffer("token_ids", token_ids, persistent=token_ids is not None)
        self.fuse = nn.Linear(2 * d, d)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.RMSNorm(d), nn.Linear(d, m), nn.SiLU(), nn.Linear(m, d))
            for _ in range(cfg.n_blocks)
        )
        self.norm = nn.RMSNorm(d)
        self._scoring: tuple[tuple, torch.Tensor] | None = None  # (key, table): `scoring_table`

    def forward(self, h: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        x = self.fuse(torch.cat([h, e], dim=-1))  # (..., d)
        for block in self.blocks:
            x = x + block(x)
        return self.norm(x)

    def table(self, lm_head: torch.Tensor) -> torch.Tensor:
        """The LM-head rows it scores with: (S, d) of the target's (V', d), or all of them."""
        return lm_head if self.token_ids is None else lm_head[self.token_ids].contiguous()

    def scoring_table(self, lm_head: torch.Tensor) -> torch.Tensor:
        """`table` transposed to (d, S), the faster layout for one row on the CPU, in the head's
        dtype; kept while that LM-head weight is unchanged (a gather took 0.1 s on the CPU)."""
        dtype = self.fuse.weight.dtype
        key = (lm_head.data_ptr(), lm_head._version, lm_head.device, dtype)
        if self._scoring is None or self._scoring[0] != key:
            table_t = self.table(lm_head.detach()).to(dtype).t().contiguous()
            self._scoring = (key, table_t)
        return self._scoring[1]


# ------------------------------------------------------------------------------------ drafting
class HeadDrafter(Drafter):
    """A `Drafter` that drafts with a `DraftHead` from the hidden states of `target`, the very
    session the loop verifies with, opened with `keep_hidden=True`. The first step of a
    generation proposes nothing (the target has not read the prompt yet)."""

    @property
    def seconds(self) -> float:
        return self.clock.seconds

    def __init__(self, head: DraftHead, target: Session) -> None:
        if not getattr(target, "keep_hidden", False):
            raise ValueError(
                "HeadDrafter needs the target's session opened with keep_hidden=True "
                "(sessions.open_session(model, keep_hidden=True))"
            )
        self.head, self.target = head.eval(), target
        self.embed = target.model.get_input_embeddings()
        self.lm_head = target.model.get_output_embeddings()
        self.vocab_size = target.vocab_size
        if head.token_ids is not None:
            if int(head.token_ids.max()) >= self.vocab_size:
                raise ValueError("the head's token ids reach beyond the target's vocabulary")
            if scales_logits(target.model):
                raise ValueError(
                    f"a truncated-vocabulary head scores with the LM head's rows alone, and "
                    f"{target.model.config.model_type} scales or soft-caps its logits after it"
                )
            self.table_t = head.scoring_table(self.lm_head.weight)  # (d, S)
        self.calls = 0  # head forwards, one per drafted token
        self.clock = env.RegionTimer(target.device)

    @torch.inference_mode()
    def propose(
        self, ids: torch.Tensor, gamma: int, cfg: SamplingConfig, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        t0 = self.clock.start()
        tokens, q_probs = [], []
        if ids.shape[0] >= 2 and self.target.hidden.shape[0] >= ids.shape[0] - 1:
            device, dtype = self.target.device, next(self.head.parameters()).dtype
            f = self.target.hidden[ids.shape[0] - 2].to(device, dtype)  # (d,) it predicted ids[-1]
            x = ids[-1]
            for _ in range(gamma):
                f = self.head(f, self.embed(x.to(device)).to(dtype))  # (d,)
                logits = self._logits(f)  # (V,) on the device
                self.calls += 1
                x, q = draft_token(logits, cfg, generator, check=False)
                q_probs.append(q)  # None when greedy: stack_proposal never reads it
                tokens.append(x)
        self.clock.stop(t0)
        return stack_proposal(tokens, q_probs, self.vocab_size, ids.device, cfg.greedy)

    @torch.inference_mode()
    def first_draft_logits(self, ids: torch.Tensor) -> torch.Tensor:
        """The head's first draft after every prefix of `ids` (L,) that it can draft from,
        teacher-forced on the target's features: (L - 1, V) float32. Row t drafts ids[t + 2] from
        the target's feature at t and the embedding of ids[t + 1], as `propose` does after the
        prefix ids[: t + 2]. The target's session must hold exactly `ids` (`target.logits(ids)`
        first), so row t pairs with row t + 1 of those logits."""
        if self.target.hidden.shape[0] != ids.shape[0]:
            raise ValueError(
                f"the target's session holds {self.target.hidden.shape[0]} positions, ids has "
                f"{ids.shape[0]}: call target.logits(ids) on a fresh session first"
            )
        device, dtype = self.target.device, next(self.head.parameters()).dtype
        f = self.target.hidden[:-1].to(device, dtype)  # (L - 1, d)
        e = self.embed(ids[1:].to(device)).to(dtype)  # (L - 1, d)
        return self._logits(self.head(f, e))

    def _logits(self, f: torch.Tensor) -> torch.Tensor:
        """The head's logits for features f (..., d): (..., V) float32, -inf off a truncated
        vocabulary."""
        if self.head.token_ids is None:  # (..., V') as the target's forward computes them
            f = f.to(self.lm_head.weight.dtype)
            return output_logits(self.target.model, f)[..., : self.vocab_size].float()
        # the LM head's rows alone: __init__ refused families that scale logits after them
        logits = f.new_full((*f.shape[:-1], self.vocab_size), -math.inf, dtype=torch.float32)
        logits[..., self.head.token_ids] = (f @ self.table_t).float()  # (..., S)
        return logits


def head_drafter(
    target_model, head: DraftHead, vocab_size: int | None = None, runtime: str = DEFAULT_RUNTIME
):
    """(session, drafter) to pass as speculative_generate's target and draft."""
    session = open_session(target_model, vocab_size, runtime, keep_hidden=True)
    return session, HeadDrafter(head, session)


# ------------------------------------------------------------------------------------ checkpoint
def save_head(head: DraftHead, out: Path, info: dict, int8: bool = False) -> Path:
    """Write the head's weights in float16 (safetensors) and its config + `info` (JSON).
    `int8=True` stores each weight matrix as int8 rows with float32 scales (absmax / 127),
    halving the file: a storage format only (`load_head` multiplies back)."""
    out.mkdir(parents=True, exist_ok=True)
    state = {}
    for key, value in head.state_dict().items():
        value = value.detach().cpu()
        if key == "token_ids":
            state[key] = value.contiguous()
        elif int8 and value.ndim == 2:  # (out, in): one scale per output row
            scale = value.float().abs().amax(dim=1).clamp_min(1e-12) / 127  # (out,)
            state[key + INT8] = (value.float() / scale[:, None]).round().to(torch.int8)
            state[key + SCALE] = scale.contiguous()
        else:
            state[key] = value.half().contiguous()
    save_file(state, str(out / WEIGHTS))
    (out / CONFIG).write_text(json.dumps({"config": asdict(head.cfg), **info}, indent=2) + "\n")
    return out / WEIGHTS


def load_head(
    path: str | Path, device: torch.device | str = "cpu", target_dtype: torch.dtype | None = None
) -> DraftHead:
    """A head saved by `save_head`, on `device`, in the dtype it drafts fastest in there:
    float32 on the CPU whatever the target's (an AMD EPYC with avx512_bf16: 3.7 ms a drafting
    step against 6.1 ms in bfloat16), elsewhere `target_dtype` (None: float32)."""
    path = Path(path)
    if not (path / WEIGHTS).exists():
        raise FileNotFoundError(
            f"no draft head at {path}: train one with "
            f"`python -m specdec_lab train-head --target data/models/target --out {path}`"
        )
    cfg = HeadConfig(**head_info(path)["config"])
    stored = load_file(str(path / WEIGHTS))
    state = {}
    for key, value in stored.items():
        if key.endswith(SCALE):
            continue
        if key.endswith(INT8):  # int8 rows times their scales (save_head's int8=True)
            name = key.removesuffix(INT8)
            state[name] = value.float() * stored[name + SCALE][:, None]
        else:
            state[key] = value if key == "token_ids" else value.float()
    head = DraftHead(cfg, state.get("token_ids"))
    head.load_state_dict(state)
    on_cpu = torch.device(device).type == "cpu"
    dtype = torch.float32 if on_cpu or target_dtype is None else target_dtype
    return head.to(device, dtype).eval()


def head_info(path: str | Path) -> dict:
    """The JSON that `save_head` wrote beside a head's weights: its config and training log."""
    return json.loads((Path(path) / CONFIG).read_text())
