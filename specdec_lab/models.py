"""Draft/target pairs: the embedded pair shipped in data/models/, and well-known hub pairs.

Every pair goes through the same code path, `AutoModelForCausalLM.from_pretrained(path_or_id)`:
the embedded pair is simply a pair of local directories. Hub pairs need internet the first time;
without it, `load_pair` fails with one actionable sentence instead of a stack of retries.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

import torch

from specdec_lab.runtime import default_device

MODELS_DIR = Path(__file__).resolve().parents[1] / "data" / "models"


@dataclass(frozen=True)
class PairSpec:
    """Where a pair's draft and target come from: hub ids or local directories."""

    draft: str
    target: str
    note: str = ""


PAIRS: dict[str, PairSpec] = {
    "embedded": PairSpec(
        str(MODELS_DIR / "draft"),
        str(MODELS_DIR / "target"),
        "trained by this repository on the Python standard library (see data/models/README.md)",
    ),
    "gpt2": PairSpec("gpt2", "gpt2-xl", "124M -> 1.5B, the pair of jaymody's CPU demo"),
    "pythia": PairSpec("EleutherAI/pythia-70m-deduped", "EleutherAI/pythia-1.4b-deduped"),
    "qwen2.5": PairSpec(
        "Qwen/Qwen2.5-0.5B-Instruct",
        "Qwen/Qwen2.5-7B-Instruct",
        "embedding matrices are padded to different sizes; the pair is restricted to the "
        "tokenizer's shared vocabulary",
    ),
    "smollm2": PairSpec("HuggingFaceTB/SmolLM2-135M", "HuggingFaceTB/SmolLM2-1.7B"),
}


class HubUnavailableError(RuntimeError):
    """A hub model was requested but the Hugging Face hub cannot be reached."""


@dataclass
class Pair:
    """A loaded draft/target pair sharing `tokenizer`, restricted to `vocab_size` tokens."""

    name: str
    target: torch.nn.Module
    draft: torch.nn.Module
    tokenizer: object
    vocab_size: int
    device: torch.device

    def encode(self, text: str) -> torch.Tensor:
        """Prompt text -> (L,) ids, starting with BOS when the tokenizer defines one."""
        ids = self.tokenizer(text)["input_ids"]
        bos = self.tokenizer.bos_token_id
        if bos is not None and (not ids or ids[0] != bos):
            ids = [bos, *ids]
        return torch.tensor(ids, dtype=torch.long)

    def decode(self, ids) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def describe(self) -> str:
        n_t = sum(p.numel() for p in self.target.parameters()) / 1e6
        n_d = sum(p.numel() for p in self.draft.parameters()) / 1e6
        dtype = next(self.target.parameters()).dtype
        return (
            f"pair {self.name!r}: target {n_t:.1f}M params, draft {n_d:.2f}M params, "
            f"vocab {self.vocab_size}, {dtype} on {self.device}"
        )


def load_pair(
    name: str = "embedded",
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    *,
    draft: str | None = None,
) -> Pair:
    """Load a draft/target pair by registry name (see `PAIRS`) onto `device`.

    device: default cuda, then mps, then cpu. dtype: default float32 on the CPU (exact greedy
    comparisons need it) and bfloat16 on accelerators. draft: replace the registry's draft by a
    hub id, a directory, or the name of a directory in data/models/ (e.g. "draft-prose").
    """
    if name not in PAIRS:
        raise ValueError(f"unknown pair {name!r}; choose one of {sorted(PAIRS)}")
    spec = PAIRS[name]
    device, dtype = _device_and_dtype(device, dtype)
    draft_src = spec.draft if draft is None else _resolve_local(draft)
    tokenizer = _load("tokenizer", spec.target)
    target = _load("model", spec.target, dtype=dtype).to(device).eval()
    draft_model = _load("model", draft_src, dtype=dtype).to(device).eval()
    vocab_size = min(
        len(tokenizer),
        target.get_output_embeddings().weight.shape[0],
        draft_model.get_output_embeddings().weight.shape[0],
    )
    return Pair(name, target, draft_model, tokenizer, vocab_size, device)


def load_model(source: str, device: torch.device | str | None = None, dtype=None):
    """One causal LM from a hub id, a directory, or a directory name in data/models/."""
    device, dtype = _device_and_dtype(device, dtype)
    return _load("model", _resolve_local(source), dtype=dtype).to(device).eval()


def _device_and_dtype(device, dtype) -> tuple[torch.device, torch.dtype]:
    """Defaults: the best device; float32 on the CPU (exact greedy checks), bfloat16 elsewhere."""
    device = torch.device(device) if device is not None else default_device()
    if dtype is None:
        dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    return device, dtype


def _resolve_local(source: str) -> str:
    local = MODELS_DIR / source
    return str(local) if local.is_dir() else source


def _load(kind: str, source: str, **kwargs):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    loader = AutoTokenizer if kind == "tokenizer" else AutoModelForCausalLM
    if Path(source).is_dir():
        return loader.from_pretrained(source, **kwargs)
    if Path(source).is_absolute() or source.startswith("."):
        raise FileNotFoundError(
            f"model directory {source} does not exist; run `python -m specdec_lab train` "
            "(see data/models/README.md) or restore it with `git checkout data/models`"
        )
    try:  # already in the local hub cache? Then no network is needed.
        return loader.from_pretrained(source, local_files_only=True, **kwargs)
    except OSError:
        pass
    if os.environ.get("HF_HUB_OFFLINE") == "1" or not _hub_reachable():
        local_hint = "" if "/" in source else f" (nor is there a directory data/models/{source})"
        raise HubUnavailableError(
            f"cannot download {source!r}{local_hint}: the Hugging Face hub is unreachable from this machine "
            "(and HF_HUB_OFFLINE may be set), so connect to the internet once to cache it, or use "
            "load_pair('embedded'), which ships in data/models/."
        ) from None
    return loader.from_pretrained(source, **kwargs)


def _hub_reachable(host: str = "huggingface.co", timeout: float = 3.0) -> bool:
    """A quick TCP probe, so an offline machine fails in seconds rather than after retries."""
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False
