"""Draft/target pairs: the embedded pair shipped in data/models/, hub pairs, and any pair you name.

Every model goes through the same code path, `AutoModelForCausalLM.from_pretrained(path_or_id)`:
the embedded pair is simply a pair of local directories, and `load_pair(target=..., draft=...)`
takes any two hub ids or directories. Hub models need internet the first time; without it,
`load_pair` fails with one actionable sentence instead of a stack of retries.

On an accelerator (or in a GPU dry run, see `runtime.gpu_paths`) a memory guard runs first: it
estimates each model's bytes (parameters × bytes per element + the KV cache) and refuses a pair
that does not fit the free memory, and an out-of-memory error while loading becomes the same
`InsufficientMemoryError`, with the memory freed. `load_first_pair` walks a list of pairs, largest
first, and keeps the first that loads; `fit_ladder` trims a ladder of model shapes to what fits.

Tiny random stand-ins of each registry family (`save_tiny_pair`) keep their family's quirks
(GPT-2's tied embeddings and hard position limit, GPT-NeoX's partial rotary embeddings and padded
vocabulary, Qwen2's differently padded draft and target and missing BOS, Llama's grouped-query
attention): the tests load them, and a GPU dry run loads them in place of the hub pairs.
"""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from specdec_lab import runtime
from specdec_lab.runtime import default_device

MODELS_DIR = Path(__file__).resolve().parents[1] / "data" / "models"


@dataclass(frozen=True)
class PairSpec:
    """Where a pair's draft and target come from: hub ids or local directories."""

    draft: str
    target: str
    note: str = ""
    family: str | None = None  # the tiny stand-in a GPU dry run loads (see `save_tiny_pair`)


PAIRS: dict[str, PairSpec] = {
    "embedded": PairSpec(
        str(MODELS_DIR / "draft"),
        str(MODELS_DIR / "target"),
        "trained by this repository on Python source (see data/models/README.md)",
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

CONTEXT_TOKENS = 2048
"""Positions of KV cache the memory guard budgets for (prompt + new tokens of one sequence)."""

HEADROOM = 1.15
"""The guard asks for 15% more than its estimate: allocator slack, activations, CUDA workspaces."""


def encode_prompt(tokenizer, text: str) -> torch.Tensor:
    """Prompt text -> (L,) ids, starting with BOS when the tokenizer defines one (and did not
    add it already): the prompt encoding of every pair, the bench and the scripts."""
    ids = tokenizer(text)["input_ids"]
    bos = tokenizer.bos_token_id
    if bos is not None and (not ids or ids[0] != bos):
        ids = [bos, *ids]
    return torch.tensor(ids, dtype=torch.long)


class PairUnavailableError(RuntimeError):
    """A pair cannot be used on this machine; the message says why in one sentence."""


class HubUnavailableError(PairUnavailableError):
    """A hub model was requested but the Hugging Face hub cannot be reached."""


class InsufficientMemoryError(PairUnavailableError, MemoryError):
    """A model does not fit in the device's free memory (estimated, or out of memory on load)."""


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

    def encode(self, text: str) -> torch.Tensor:
        """Prompt text -> (L,) ids, starting with BOS when the tokenizer defines one."""
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
        from specdec_lab.lm import runtime_of  # sessions: imported on first use

        runtimes = {runtime_of(self.target), runtime_of(self.draft)}
        return (
            f"pair {self.name!r}{note}: target {n_t:.3g}M params, draft {n_d:.3g}M params, "
            f"vocab {self.vocab_size}, {self.dtype} on {self.device}, runtime "
            f"{' + '.join(sorted(runtimes))}"
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
    device: default cuda, then mps, then cpu. dtype (a torch dtype or "float32", "float16",
    "bfloat16"): default float32 on the CPU (exact greedy comparisons need it) and bfloat16 on
    accelerators. The pair is restricted to the vocabulary both models and the tokenizer share.
    Raises HubUnavailableError (offline), InsufficientMemoryError (does not fit), ValueError.
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
    device, dtype = _device_and_dtype(device, dtype)
    if runtime.stand_ins(device) and name in PAIRS and PAIRS[name].family:
        # A GPU dry run never downloads: the hub sides become a tiny model of the same family.
        stand_in = _stand_in_dirs(PAIRS[name].family)
        target_src = str(stand_in[0]) if not Path(target_src).is_dir() else target_src
        draft_src = str(stand_in[1]) if not Path(draft_src).is_dir() else draft_src
        note = f"tiny random {PAIRS[name].family} stand-in, {runtime.FORCE_GPU_PATHS} dry run"
    if runtime.gpu_paths(device):
        needed = sum(model_bytes(_load("config", s), dtype) for s in (target_src, draft_src))
        check_fits(needed, device, f"pair {name!r} in {str(dtype).removeprefix('torch.')}")

    tokenizer = _load("tokenizer", target_src)
    target_model = draft_model = None
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
        runtime.release_memory(device)
        raise InsufficientMemoryError(
            f"pair {name!r} ran out of memory while loading on {device} ({oom}); the memory is "
            "freed: try a smaller pair or dtype"
        )
    vocab_size = min(len(tokenizer), vocab_size_of(target_model), vocab_size_of(draft_model))
    _check_shared_tokenizer(tokenizer, draft_src, vocab_size)
    return Pair(name, target_model, draft_model, tokenizer, vocab_size, device, note)


def load_first_pair(
    names: Sequence[str],
    device: torch.device | str | None = None,
    dtype: torch.dtype | str | None = None,
) -> Pair:
    """The first of the registry pairs `names` (largest first) that loads here.

    A pair that is offline, does not fit the free memory, or runs out of memory while loading
    is skipped with one printed sentence; the last one's error propagates.
    """
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


def vocab_size_of(model) -> int:
    """Rows of a transformers model's output embedding: its logits' width."""
    return int(model.get_output_embeddings().weight.shape[0])


# --------------------------------------------------------------------------------------------
# Position limit
# --------------------------------------------------------------------------------------------


def max_positions(model) -> int | None:
    """The most positions (prompt + generated tokens) `model` takes; None if it sets no limit.

    GPT-2's learned position table has `n_positions` rows: one more position is an IndexError
    (on CUDA, a device-side assert that kills the process). Rotary models (Llama, Qwen2,
    GPT-NeoX) compute past `max_position_embeddings` but were never trained there. `model` may
    also be a session or a drafter wrapping a model (see `underlying_model`).
    """
    config = getattr(underlying_model(model), "config", None)
    limit = getattr(config, "max_position_embeddings", None)  # GPT-2 maps it to n_positions
    return int(limit) if limit else None


def underlying_model(obj):
    """The model inside a session (`.model`), a model drafter (`.session.model`) or a wrapper of
    a drafter (`.drafter`, e.g. `HeuristicGamma`); a model, or anything else, as it is."""
    while not isinstance(obj, torch.nn.Module):
        inner = next(
            (getattr(obj, a) for a in ("drafter", "session", "model") if hasattr(obj, a)), None
        )
        if inner is None:
            return obj
        obj = inner
    return obj


def check_positions(models: Sequence, prompt_len: int, max_new_tokens: int) -> None:
    """Raise ValueError, before any forward, if a model cannot take the positions a generation
    feeds it: the prompt and all new tokens but the last (which is sampled, never fed back), so
    prompt_len + max_new_tokens − 1 of them. `models` may hold sessions and drafters too."""
    for model in models:
        limit = max_positions(model)
        if limit is not None and prompt_len + max_new_tokens - 1 > limit:
            name = type(underlying_model(model)).__name__
            raise ValueError(
                f"a prompt of {prompt_len} tokens + max_new_tokens={max_new_tokens} needs "
                f"{prompt_len + max_new_tokens - 1} positions (the last new token is never fed "
                f"back), but {name} takes at most {limit} (config.max_position_embeddings): "
                f"shorten the prompt or generate at most {max(limit - prompt_len + 1, 0)} tokens"
            )


# --------------------------------------------------------------------------------------------
# Logits from hidden states
# --------------------------------------------------------------------------------------------

LOGIT_SCALES: dict[str, tuple[str, bool]] = {
    # model_type: (config field, divide?), as each family's ForCausalLM.forward applies it after
    # the LM head (read in transformers 5.x, models/<family>/modeling_<family>.py).
    "cohere": ("logit_scale", False),  # logits * self.logit_scale
    "cohere2": ("logit_scale", False),
    "cohere2_moe": ("logit_scale", False),
    "granite": ("logits_scaling", True),  # logits / self.config.logits_scaling
    "granitemoe": ("logits_scaling", True),
    "granitemoeshared": ("logits_scaling", True),
    "granitemoehybrid": ("logits_scaling", True),
    "granite_swa": ("logits_scaling", True),
    "hyperclovax": ("logits_scaling", False),  # multiplies by the field Granite divides by
    "falcon_h1": ("lm_head_multiplier", False),
}
"""Families whose forward scales the logits after the LM head; see `output_logits`."""


def output_logits(model, hidden: torch.Tensor) -> torch.Tensor:
    """The logits `model`'s forward computes from its final (normalised) hidden states.

    hidden: (..., d) -> (..., V'), V' the width of the output embedding. The LM head alone,
    `model.get_output_embeddings()(hidden)`, is Llama's rule, but some families change the
    logits after it inside `forward`, and a path that applies the head by hand (a draft head, a
    hidden-state session) must do the same or it scores a different distribution:

    - a scale (`LOGIT_SCALES`): Cohere multiplies by `config.logit_scale`, Granite divides by
      `config.logits_scaling`;
    - then soft-capping, `tanh(x / cap) · cap` with `config.final_logit_softcapping`
      (Gemma-2, Gemma-3), in the logits' own dtype as their forward does.

    A family outside `LOGIT_SCALES` whose config sets one of those scale fields raises
    ValueError: what its forward does with it is unknown here (MPT, e.g., ignores its
    `logit_scale`), and a silently different distribution is worse than an error.
    """
    config = model.config
    logits = model.get_output_embeddings()(hidden)
    kind = getattr(config, "model_type", None)
    if kind in LOGIT_SCALES:
        field, divide = LOGIT_SCALES[kind]
        scale = getattr(config, field)
        logits = logits / scale if divide else logits * scale
    else:
        fields = {f for f, _ in LOGIT_SCALES.values()}
        unknown = sorted(f for f in fields if getattr(config, f, None) not in (None, 1, 1.0))
        if unknown and kind != "mpt":  # MPT's forward ignores its logit_scale
            raise ValueError(
                f"{type(model).__name__} ({kind}) sets config.{unknown[0]}, and specdec_lab does "
                "not know how its forward applies it; add the family to models.LOGIT_SCALES"
            )
    cap = getattr(config.get_text_config(), "final_logit_softcapping", None)
    if cap is not None:
        logits = torch.tanh(logits / cap) * cap
    return logits


# --------------------------------------------------------------------------------------------
# Memory guard
# --------------------------------------------------------------------------------------------


def count_params(config) -> int:
    """Parameters of `AutoModelForCausalLM.from_config(config)`, built on the meta device (no
    memory); tied embeddings count once."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def model_bytes(
    config, dtype: torch.dtype, context_tokens: int = CONTEXT_TOKENS, params: int | None = None
) -> int:
    """Estimated bytes of a model on a device: parameters × bytes per element + the KV cache of
    `context_tokens` positions (2 × layers × kv heads × head dim × positions × bytes).
    `params` skips counting them (`count_params`) when the caller knows the number."""
    nbytes = torch.finfo(dtype).bits // 8
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    kv = 2 * config.num_hidden_layers * kv_heads * head_dim * context_tokens * nbytes
    return (count_params(config) if params is None else params) * nbytes + kv


def check_fits(needed: int, device: torch.device | str, what: str, free: int | None = None) -> None:
    """Raise InsufficientMemoryError when `needed` bytes (× HEADROOM) exceed the free memory of
    `device` (`free`, or `runtime.free_memory`). Unknown free memory passes."""
    free = runtime.free_memory(device) if free is None else free
    if free is not None and needed * HEADROOM > free:
        raise InsufficientMemoryError(
            f"{what} needs about {needed / 2**30:.2f} GiB (+{HEADROOM - 1:.0%} headroom) but "
            f"{free / 2**30:.2f} GiB are free on {device}"
        )


def fit_ladder(
    names: Sequence[str],
    shapes: dict,
    device: torch.device | str,
    dtype: torch.dtype,
    *,
    context_tokens: int = 512,
    free: int | None = None,
) -> list[str]:
    """The models of a ladder (`names`, smallest first, looked up in `shapes`, e.g.
    `profiling.LADDER`) that fit on `device` next to the smallest one, which stays loaded as the
    draft. Prints one sentence when it drops any; raises if not even the smallest fits."""
    free = runtime.free_memory(device) if free is None else free
    size = {
        n: model_bytes(shapes[n].config(), dtype, context_tokens, shapes[n].params) for n in names
    }
    first = names[0]
    check_fits(size[first], device, f"the smallest ladder model {first}", free)
    kept = [n for n in names if n == first or size[first] + size[n] <= free / HEADROOM]
    dropped = [n for n in names if n not in kept]
    if dropped:
        print(
            f"memory guard: {', '.join(dropped)} would not fit in {free / 2**30:.1f} GiB free on "
            f"{device} in {str(dtype).removeprefix('torch.')}; the ladder stops at {kept[-1]}."
        )
    return kept


def is_out_of_memory(err: BaseException) -> bool:
    """True for CUDA's `torch.OutOfMemoryError` and the RuntimeError other backends raise."""
    return isinstance(err, torch.OutOfMemoryError) or "out of memory" in str(err).lower()


# --------------------------------------------------------------------------------------------
# Tiny random pairs, one per registry family
# --------------------------------------------------------------------------------------------

TINY_FAMILIES = ("gpt2", "gpt_neox", "qwen2", "llama")


def tiny_tokenizer(family: str):
    """A byte-level tokenizer (256 byte tokens, no merges) with `family`'s special tokens:
    "<|endoftext|>" as BOS and EOS (GPT-2, GPT-NeoX), as EOS only with no BOS (Qwen2), or
    "<s>" and "</s>" (Llama)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())  # one printable character per byte
    tok = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = {
        "gpt2": {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"},
        "gpt_neox": {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"},
        "qwen2": {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
        "llama": {"bos_token": "<s>", "eos_token": "</s>"},
    }[family]
    return PreTrainedTokenizerFast(tokenizer_object=tok, **specials)


def tiny_configs(family: str, tokenizer) -> tuple[object, object]:
    """(target, draft) configs of a tiny random `family` pair: 2 layers and 1 layer."""
    from transformers import GPT2Config, GPTNeoXConfig, LlamaConfig, Qwen2Config

    n = len(tokenizer)
    common = dict(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        initializer_range=0.3,  # random distributions neither flat nor one-hot
    )
    small = dict(hidden_size=32, num_attention_heads=4, intermediate_size=64)
    small.update(max_position_embeddings=512)
    draft_kw: dict = {}
    if family == "gpt2":  # tied embeddings; learned positions: a hard limit of n_positions
        cls, kw = GPT2Config, dict(vocab_size=n, n_positions=320, n_embd=32, n_head=2)
    elif family == "gpt_neox":  # a quarter of each head rotary; vocabulary padded (Pythia: 128)
        cls, kw = GPTNeoXConfig, dict(vocab_size=_pad(n, 64), rotary_pct=0.25, **small)
        kw.update(tie_word_embeddings=False)
    elif family == "qwen2":  # draft and target padded apart (Qwen2.5: 151936 vs 152064), no BOS
        cls, kw = Qwen2Config, dict(vocab_size=_pad(n, 128), num_key_value_heads=2, **small)
        kw.update(tie_word_embeddings=False)  # like Qwen2.5-7B; the draft is tied, like 0.5B
        draft_kw = dict(vocab_size=_pad(n, 64), tie_word_embeddings=True)
    elif family == "llama":  # grouped-query attention (4 query heads share 1 KV head), tied
        cls, kw = LlamaConfig, dict(vocab_size=n, num_key_value_heads=1, **small)
        kw.update(tie_word_embeddings=True)
    else:
        raise ValueError(f"unknown family {family!r}; choose one of {TINY_FAMILIES}")
    layers = "n_layer" if family == "gpt2" else "num_hidden_layers"
    return cls(**common, **kw, **{layers: 2}), cls(**common, **{**kw, **draft_kw, layers: 1})


def save_tiny_pair(family: str, root: str | Path, seed: int = 0) -> tuple[Path, Path]:
    """Write a tiny random `family` pair to root/target and root/draft (weights + tokenizer).

    The draft starts as a copy of the target's embeddings and first layer (shared vocabulary
    rows only), plus a little noise, so that it agrees with the target often but not always.
    Returns (target_dir, draft_dir); load them with `load_pair(target=..., draft=...)`.
    """
    from transformers import AutoModelForCausalLM

    root = Path(root)
    tokenizer = tiny_tokenizer(family)
    target_cfg, draft_cfg = tiny_configs(family, tokenizer)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        target = AutoModelForCausalLM.from_config(target_cfg)
        draft = AutoModelForCausalLM.from_config(draft_cfg)
        head, emb = target.get_output_embeddings(), target.get_input_embeddings()
        if head.weight is not emb.weight:  # untied: start the head near the embedding table
            head.weight.data.copy_(emb.weight.data)
        source = dict(target.named_parameters())
        with torch.no_grad():
            for name, w in draft.named_parameters():
                if name in source:  # embeddings, layer 0, final norm (and an untied head)
                    rows = min(w.shape[0], source[name].shape[0])  # vocabularies padded apart
                    w[:rows].copy_(source[name][:rows])
                w.add_(0.05 * w.std() * torch.randn_like(w))
    for model, sub in ((target, "target"), (draft, "draft")):
        model.save_pretrained(root / sub)
        tokenizer.save_pretrained(root / sub)
    return root / "target", root / "draft"


def _pad(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _stand_in_dirs(family: str) -> tuple[Path, Path]:
    """A tiny `family` pair in the temporary directory, written once per machine."""
    root = Path(tempfile.gettempdir()) / "specdec-lab-stand-ins" / family
    if not (root / "draft" / "config.json").exists():
        root.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f"{family}-", dir=root.parent))
        save_tiny_pair(family, tmp)
        try:
            tmp.rename(root)
        except OSError:  # another process wrote it first: theirs is identical
            pass
    return root / "target", root / "draft"


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


def _device_and_dtype(device, dtype) -> tuple[torch.device, torch.dtype]:
    """Defaults: the best device; float32 on the CPU (exact greedy checks), bfloat16 elsewhere."""
    device = torch.device(device) if device is not None else default_device()
    dtype = parse_dtype(dtype)
    if dtype is None:
        dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    return device, dtype


def _resolve_local(source: str) -> str:
    local = MODELS_DIR / source
    return str(local) if local.is_dir() else source


def _load_model(source: str, device: torch.device, dtype: torch.dtype):
    # (device_map= would skip the copy in CPU RAM, but it needs the `accelerate` package)
    return _load("model", source, dtype=dtype).to(device).eval()


def _check_shared_tokenizer(tokenizer, draft_src: str, vocab_size: int) -> None:
    """When the draft ships its own tokenizer, its first `vocab_size` tokens must be the same.

    A hub draft is checked like a local one: its tokenizer is loaded through `_load` (offline,
    that raises HubUnavailableError, as loading the draft itself would). Skipped only for a
    draft that ships no tokenizer: a directory without tokenizer_config.json (transformers 5
    would build an empty stand-in tokenizer there), or a hub repository without one (OSError).
    """
    if Path(draft_src).is_dir() and not (Path(draft_src) / "tokenizer_config.json").exists():
        return
    try:
        theirs = _load("tokenizer", draft_src).get_vocab()
    except OSError:  # no tokenizer files in the repository (HubUnavailableError propagates)
        return
    mine = tokenizer.get_vocab()
    id_to_mine = {i: t for t, i in mine.items() if i < vocab_size}
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
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    loader = {"tokenizer": AutoTokenizer, "config": AutoConfig}.get(kind, AutoModelForCausalLM)
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
