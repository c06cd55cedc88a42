"""Turning logits into the distributions that tokens are actually drawn from.

The one rule of this module: the probabilities a caller hands to the verifier must be the
*processed* distribution the token was sampled from (temperature, top-k and top-p applied).
Reporting the raw distribution while sampling from the processed one inflates acceptance and
breaks exactness (this was HF transformers issue #47932).

All functions take an optional `torch.Generator` and never draw from the global RNG. They run on
the device of their inputs.

Large vocabularies (151,936 tokens for Qwen2.5) make `torch.multinomial` and a full sort slow per
row on a CPU, hence the inverse-CDF `sample`, `greedy` by `max(-1).indices` and the partial sort
of `top_p_drop`; `python -m specdec_lab vocab-cost` measures what they cost on your machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from specdec_lab import env

GREEDY_BELOW = 1e-5
"""Temperatures below this are greedy: vLLM's rule. `logits / 1e-38` overflows to inf and the
softmax of inf - inf is NaN, so a tiny temperature must never reach the division."""

TOP_P_FIRST_K = 256
"""Top-p first looks at this many of the largest probabilities (4x more while their mass falls
short of top_p) before it sorts the whole vocabulary."""


@dataclass(frozen=True)
class SamplingConfig:
    """How logits become a distribution. `temperature=0` (or below 1e-5) means greedy."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        t, top_k, top_p = self.temperature, self.top_k, self.top_p
        if not _is_number(t) or not 0 <= t < math.inf:
            raise ValueError(
                f"temperature must be a finite number >= 0 (0 means greedy), got {t!r}"
            )
        if top_k is not None and not (_is_number(top_k, int) and top_k >= 1):
            raise ValueError(f"top_k must be a positive integer or None, got {top_k!r}")
        if top_p is not None and not (_is_number(top_p) and 0.0 < top_p <= 1.0):
            raise ValueError(f"top_p must be a number in (0, 1] or None, got {top_p!r}")

    @property
    def greedy(self) -> bool:
        """True for temperature 0 and for temperatures below `GREEDY_BELOW` (vLLM's rule)."""
        return self.temperature < GREEDY_BELOW


def _is_number(x, kind: type | tuple[type, ...] = (int, float)) -> bool:
    """An int or float (or `kind`), not a bool (True is an int in Python), not a str ("0.9")."""
    return isinstance(x, kind) and not isinstance(x, bool)


def _check_logits(logits: torch.Tensor) -> None:
    """Type and shape only: no pass over the data (values are checked on the output)."""
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"logits must be a torch.Tensor, got {type(logits).__name__}")
    if logits.dim() < 1 or logits.shape[-1] == 0:
        raise ValueError(
            f"logits must have a non-empty last (vocabulary) axis, got {tuple(logits.shape)}"
        )


def logits_to_probs(
    logits: torch.Tensor,
    cfg: SamplingConfig | float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    *,
    temperature: float | None = None,
    check: bool = True,
) -> torch.Tensor:
    """Processed next-token distribution(s) under `cfg`, or a temperature (`cfg` or the keyword
    `temperature`; default 1) with `top_k`, `top_p`.

    logits: (..., V) raw scores. Returns float32 probabilities of the same shape, each row summing
    to 1. Order of processing: temperature, then top-k, then top-p (as in HF `generate`).
    `temperature=0` returns the one-hot argmax, which makes greedy decoding a special case of
    sampling (and makes the acceptance rule reduce to "accept iff the draft token is the argmax").

    `check` raises ValueError on NaN logits (and, when sampling, on +inf logits, whose softmax is
    NaN). It costs one small reduction and, on an accelerator, one host sync: a caller that
    validates the probabilities later (the fused checks of `specdec_lab.verify`) may skip it.
    """
    if temperature is not None:  # the keyword this parameter had before it became `cfg`
        if cfg is not None:
            raise TypeError("give the temperature once: as `cfg` or as `temperature=`")
        cfg = temperature
    if not isinstance(cfg, SamplingConfig):  # a temperature: the notebooks' short form
        cfg = SamplingConfig(1.0 if cfg is None else cfg, top_k, top_p)
    elif top_k is not None or top_p is not None:
        raise TypeError("with a SamplingConfig, top_k and top_p belong inside it")
    _check_logits(logits)
    logits = logits.float()
    if cfg.greedy:
        best, index = logits.max(-1)  # (...,) a NaN anywhere in a row makes its maximum NaN
        if check and torch.isnan(best).any():
            raise ValueError("logits contain NaN; the model produced invalid scores")
        return torch.zeros_like(logits).scatter_(-1, index[..., None], 1.0)  # one-hot (..., V)
    if cfg.temperature != 1:
        logits = logits / cfg.temperature
    if cfg.top_k is not None and cfg.top_k < logits.shape[-1]:
        kth = torch.topk(logits, cfg.top_k, dim=-1).values[..., -1:]  # (..., 1)
        logits = logits.masked_fill(logits < kth, -math.inf)
    if cfg.top_p is not None and cfg.top_p < 1.0:
        logits = logits.masked_fill(top_p_drop(logits.softmax(-1), cfg.top_p), -math.inf)
    probs = logits.softmax(-1)  # (..., V)
    # Probabilities are finite and at most 1, so their sum is finite unless one of them is NaN.
    if check and not torch.isfinite(probs.sum()):
        raise ValueError("logits contain NaN or +inf; the model produced invalid scores")
    return probs


def top_p_drop(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """The tokens nucleus (top-p) sampling drops: probs (..., V) -> bool (..., V).

    Sort the probabilities in descending order and keep the smallest prefix whose mass reaches
    top_p: a token is dropped when the mass strictly before it already reaches top_p, so the most
    likely token always survives. (Ties at the boundary are broken by the sort's order.)

    Only the head of the sorted order matters, so on the CPU this first takes the
    `TOP_P_FIRST_K` largest probabilities with `torch.topk` (far cheaper than a full sort of a
    large vocabulary) and takes 4x more while their mass falls short of top_p. The result is
    the full sort's: the mass before every later token is at least the mass of the first k. On an
    accelerator a sort is cheap and "is k enough?" would be a host sync, so it sorts at once.
    """
    vocab = probs.shape[-1]
    k = min(TOP_P_FIRST_K, vocab) if probs.device.type == "cpu" else vocab
    while True:
        if k == vocab:
            top, order = torch.sort(probs, dim=-1, descending=True)  # (..., V)
        else:
            top, order = torch.topk(probs, k, dim=-1)  # (..., k) the k largest, descending
        mass = top.cumsum(-1)  # (..., k)
        # `not (mass < top_p)` also stops on NaN: the caller's check reports it.
        if k == vocab or not (mass[..., -1] < top_p).any():
            break
        k = min(4 * k, vocab)
    # Mass strictly before each sorted token: an exclusive cumulative sum.
    mass_before = torch.nn.functional.pad(mass[..., :-1], (1, 0))  # (..., k)
    drop_sorted = mass_before >= top_p  # (..., k)
    drop = torch.ones_like(probs, dtype=torch.bool)  # tokens beyond the first k: dropped
    return drop.scatter(-1, order, drop_sorted)  # (..., V)


def sample(
    probs: torch.Tensor, generator: torch.Generator | None = None, *, check: bool = True
) -> torch.Tensor:
    """Draw one token per row. probs: (V,) or (N, V). Returns a LongTensor of shape () or (N,).

    Inverse-CDF sampling: with u ~ U[0, 1) per row, the token is the first x whose cumulative
    probability exceeds u · total. Token x owns the interval [cdf(x − 1), cdf(x)) of length p(x),
    so it is drawn with probability exactly p(x) / total, and a token of probability 0 (an empty
    interval) never. The rows need not be normalised. `check` raises ValueError on NaN, inf,
    negative or all-zero rows (one host sync on an accelerator).
    """
    if not isinstance(probs, torch.Tensor):
        raise TypeError(f"probs must be a torch.Tensor, got {type(probs).__name__}")
    if probs.dim() not in (1, 2) or probs.shape[-1] == 0:
        raise ValueError(f"probs must have shape (V,) or (N, V), got {tuple(probs.shape)}")
    rows = probs[None] if probs.dim() == 1 else probs  # (N, V)
    cdf = rows.cumsum(-1, dtype=cdf_dtype(probs.device))  # (N, V)
    if check:
        check_generator(generator)
        _check_weights(rows, cdf[:, -1])
    tokens = inverse_cdf(cdf, uniforms(rows.shape[0], generator, probs.device))  # (N,)
    return tokens[0] if probs.dim() == 1 else tokens


def cdf_dtype(device: torch.device) -> torch.dtype:
    """float64, which keeps the rounding of a cumulative sum ~1e-16 per token, where the device
    has it (`float64_on`); float32 on MPS."""
    return torch.float64 if float64_on(device) else torch.float32


def float64_on(device: torch.device | str) -> bool:
    """Whether `device` computes in float64: every device but Apple's MPS ("MPS framework
    doesn't support float64"). The package's one question about it: ask here, not `.type`."""
    return torch.device(device).type != "mps"


def uniforms(
    rows: int, generator: torch.Generator | None, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """The (rows, 1) uniforms in [0, 1) that `sample` draws, one per row, in `cdf_dtype`,
    on `device`. They are drawn where the generator lives (a CPU generator also seeds a GPU
    run, with the same numbers) and copied over: a host-to-device copy, not a sync."""
    return rand(rows, 1, generator=generator, device=device, dtype=cdf_dtype(torch.device(device)))


def generator_on(
    generator: torch.Generator | None, device: torch.device | str
) -> torch.Generator | None:
    """The generator to draw `device` tensors from: `generator` itself where it lives on
    `device` (or is None), else a new generator on `device` seeded by one draw from it.

    A host generator then seeds an accelerator run reproducibly, and every draw of the run
    happens on the device: no host-to-device copy of uniforms, which on CUDA waits for the
    device's queue at every draft token.
    """
    check_generator(generator)
    device = torch.device(device)
    if generator is None or generator.device.type == device.type:
        return generator
    seed = int(torch.randint(2**62, (1,), generator=generator))  # host -> host: no device sync
    return env.generator(device, seed)


def check_generator(generator) -> None:
    """Refuse anything but a `torch.Generator` or None (a seed, say), naming the fix."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator or None, got {type(generator).__name__} "
            f"{generator!r:.20}: pass a seeded one, e.g. torch.Generator().manual_seed(0)"
        )


def rand(*shape: int, generator: torch.Generator | None, device, dtype=torch.float32):
    """`torch.rand(*shape)` from `generator` (its own device), delivered on `device`."""
    source = generator.device if generator is not None else torch.device(device)
    return torch.rand(*shape, generator=generator, device=source, dtype=dtype).to(device)


def exponentials(*shape: int, generator: torch.Generator | None, device) -> torch.Tensor:
    """Exp(1) draws of `shape` (float32) from `generator` (its own device), delivered on
    `device`: the race `torch.multinomial` runs to sample without replacement (see
    `tree.draw_sibling_slots`)."""
    source = generator.device if generator is not None else torch.device(device)
    out = torch.empty(*shape, device=source).exponential_(generator=generator)
    return out.to(device)


def inverse_cdf(cdf: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The first x with cdf(x) > u · cdf(V − 1), per row: cdf (N, V) cumulative weights, u (N, 1)
    uniforms in [0, 1). Returns (N,) tokens, never one of weight 0."""
    total = cdf[:, -1:].contiguous()  # (N, 1)
    tokens = torch.searchsorted(cdf, u * total, right=True)  # (N, 1)
    # Rounding can make u · total == total, which no cdf value exceeds: take the last token of
    # positive weight instead, the first x whose cdf reaches the total.
    last = torch.searchsorted(cdf, total)  # (N, 1)
    return torch.minimum(tokens, last).clamp_max(cdf.shape[-1] - 1)[:, 0]


def _check_weights(rows: torch.Tensor, totals: torch.Tensor) -> None:
    """One fused check (one host sync): every row finite, non-negative, with positive mass."""
    if (~torch.isfinite(totals) | (totals <= 0)).any() | (rows.amin() < 0):
        raise ValueError("probs must be finite and non-negative, with positive mass in every row")


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """The argmax token(s), the first one on ties. logits: (..., V) -> (...)."""
    return logits.max(-1).indices


def draft_token(
    logits: torch.Tensor,
    cfg: SamplingConfig,
    generator: torch.Generator | None = None,
    *,
    check: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One drafted token from (V,) logits: `(x, q)`, with q the processed (V,) distribution it
    was drawn from, or None when greedy (q is then one-hot at x: no processing on the hot path).
    `check=False` skips the NaN check of `logits_to_probs` (for callers that verify q later)."""
    if cfg.greedy:
        return greedy(logits), None
    q = logits_to_probs(logits, cfg, check=check)  # (V,)
    return sample(q, generator, check=False), q
