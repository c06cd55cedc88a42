"""Tiny random pairs, one per registry family, that keep their family's quirks.

GPT-2's tied embeddings and hard position limit, GPT-NeoX's partial rotary embeddings and padded
vocabulary, Qwen2's differently padded draft and target and missing BOS, Llama's grouped-query
attention: the tests load them, and a GPU dry run loads them in place of the hub pairs.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, pre_tokenizers
from tokenizers import models as token_models
from transformers import (
    AutoModelForCausalLM,
    GPT2Config,
    GPTNeoXConfig,
    LlamaConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
)

TINY_FAMILIES = ("gpt2", "gpt_neox", "qwen2", "llama")


def tiny_tokenizer(family: str):
    """A byte-level tokenizer (256 byte tokens, no merges) with `family`'s special tokens."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())  # one printable character per byte
    tok = Tokenizer(token_models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = {
        "gpt2": {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"},
        "gpt_neox": {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"},
        "qwen2": {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
        "llama": {"bos_token": "<s>", "eos_token": "</s>"},
    }[family]
    return PreTrainedTokenizerFast(tokenizer_object=tok, **specials)


def _tiny_configs(family: str, tokenizer) -> tuple[object, object]:
    """(target, draft) configs of a tiny random `family` pair: 2 layers and 1 layer."""
    n = len(tokenizer)
    common = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    common.update(initializer_range=0.3)  # random distributions neither flat nor one-hot
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
    """Write a tiny random `family` pair to root/target and root/draft (weights + tokenizer);
    load them with `load_pair(target=..., draft=...)`. The draft starts as a noisy copy of the
    target's embeddings and first layer, so that it agrees with the target often but not always."""
    root = Path(root)
    tokenizer = tiny_tokenizer(family)
    target_cfg, draft_cfg = _tiny_configs(family, tokenizer)
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


def stand_in_dirs(family: str) -> tuple[Path, Path]:
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
