"""The argument checks the decoding loops share (`decoding`, `tree`): each raises a ValueError or
TypeError that names the argument and how to fix it, before any forward runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from specdec_lab.engine.sessions import max_positions, vocab_size_of


def _underlying_model(obj):
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
    """Raise ValueError, before any forward, if a model cannot take the prompt_len +
    max_new_tokens − 1 positions a generation feeds it. `models` may hold sessions and drafters."""
    for model in models:
        inner = _underlying_model(model)
        limit = max_positions(inner)
        if limit is not None and prompt_len + max_new_tokens - 1 > limit:
            name = type(inner).__name__
            raise ValueError(
                f"a prompt of {prompt_len} tokens + max_new_tokens={max_new_tokens} needs "
                f"{prompt_len + max_new_tokens - 1} positions (the last new token is never fed "
                f"back), but {name} takes at most {limit} (config.max_position_embeddings): "
                f"shorten the prompt or generate at most {max(limit - prompt_len + 1, 0)} tokens"
            )


def check_prompt(input_ids) -> torch.Tensor:
    """Accept (L,) or (1, L) ids (tensor or list); return a 1-D LongTensor on the CPU."""
    if isinstance(input_ids, Mapping):  # a tokenizer's output: input_ids, attention_mask, ...
        raise TypeError(
            f"input_ids is a dict (keys {', '.join(map(str, input_ids))}), such as a tokenizer "
            "returns: pass its ids, tokenizer(text, return_tensors='pt')['input_ids']"
        )
    try:  # text, or anything else that is not a list of ints, raises here
        ids = input_ids if isinstance(input_ids, torch.Tensor) else torch.as_tensor(input_ids)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(
            f"input_ids must be token ids (a tensor or list of ints), got "
            f"{type(input_ids).__name__} {input_ids!r:.40}: encode text first, with "
            "pair.encode(text) or tokenizer(text, return_tensors='pt')['input_ids']"
        ) from None
    if ids.dim() == 2:
        if ids.shape[0] != 1:
            raise ValueError(
                f"batch size {ids.shape[0]} is not supported: speculative decoding here runs one "
                "sequence at a time, pass input_ids of shape (L,) or (1, L)"
            )
        ids = ids[0]
    if ids.dim() != 1:
        raise ValueError(f"input_ids must have shape (L,) or (1, L), got {tuple(ids.shape)}")
    if ids.numel() == 0:
        raise ValueError("the prompt is empty: give at least one token (e.g. a BOS token)")
    if ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise TypeError(f"input_ids must be integer token ids, got dtype {ids.dtype}")
    return ids.long().cpu()


def check_token_ids(ids: torch.Tensor, vocab_size: int) -> None:
    """Refuse ids outside [0, vocab_size) before any kernel sees them: an embedding lookup raises
    a bare IndexError on the CPU, and on CUDA a device-side assert that ends the process. `ids`
    are `check_prompt`'s, on the host: checking them costs no sync, once per call."""
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(
            f"input_ids holds token id {bad}, outside this model's vocabulary [0, {vocab_size}): "
            "encode the prompt with the model's own tokenizer (pair.encode(text))"
        )


def check_eos(eos_token_id: int | Sequence[int] | None) -> frozenset[int]:
    """The end-of-text ids as a set: None -> empty, one id -> {id}, a list or tuple -> its ids.

    `generation_config.eos_token_id` is often a list (Llama-3, Qwen2.5-Instruct): comparing a
    token with the list itself would silently never stop.
    """
    if eos_token_id is None:
        return frozenset()
    ids = (eos_token_id,) if isinstance(eos_token_id, int) else eos_token_id
    if not isinstance(ids, (list, tuple, set, frozenset)) or not all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids
    ):
        raise ValueError(
            "eos_token_id must be a non-negative int, a list or tuple of them, or "
            f"None; got {eos_token_id!r}"
        )
    return frozenset(ids)


def is_count(x, least: int = 1) -> bool:
    """Whether `x` is an int of at least `least`, and not a bool (True is an int in Python)."""
    return isinstance(x, int) and not isinstance(x, bool) and x >= least


def check_gamma(gamma: int) -> None:
    if not is_count(gamma):
        raise ValueError(f"gamma (draft length) must be a positive integer, got {gamma!r}")


def check_max_new_tokens(max_new_tokens: int) -> None:
    if not is_count(max_new_tokens):
        raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")


def check_callable(name: str, f) -> None:
    """Refuse a hook that is neither None nor callable before the first step calls it."""
    if f is not None and not callable(f):
        raise TypeError(f"{name} must be a function or None, got {type(f).__name__} {f!r:.40}")


def check_vocab_size(who: str, model, vocab_size: int | None) -> None:
    """`vocab_size` may narrow a model's logits to a shared prefix, never widen them; an open
    session or a drafter carries its own, and a different one is refused, not ignored."""
    if vocab_size is None:
        return
    if not is_count(vocab_size):
        raise ValueError(
            f"vocab_size must be a positive integer (the shared vocabulary) or None (the "
            f"model's own), got {vocab_size!r}"
        )
    if hasattr(model, "propose") or hasattr(model, "crop"):  # a drafter or an open session
        own = getattr(model, "vocab_size", None)
        if own is not None and own != vocab_size:
            raise ValueError(
                f"vocab_size={vocab_size}, but the {who} ({type(model).__name__}) is already open "
                f"with vocab_size={own}: open it with vocab_size={vocab_size}, or drop the argument"
            )
        return
    if vocab_size > (width := vocab_size_of(model)):
        raise ValueError(f"vocab_size={vocab_size} exceeds the {who}'s {width} output logits")


def check_same_vocab(target_vocab: int, drafter) -> None:
    draft_vocab = getattr(drafter, "vocab_size", None)
    if draft_vocab is not None and draft_vocab != target_vocab:
        raise ValueError(
            f"vocabulary sizes differ: target has {target_vocab} tokens, draft has {draft_vocab}. "
            "Draft and target must share a tokenizer; if one only pads its embedding matrix, "
            "pass vocab_size=<shared size> to restrict both to the shared vocabulary."
        )
