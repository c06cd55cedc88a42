"""One linear layer of the lean forward: the model's own weight, or a copy prepacked for oneDNN.

Why. In float32 on a CPU, `F.linear` (MKL's sgemm) streams the weight at close to the memory's
bandwidth for one row (k = 1, plain decoding), but not for the few rows of a verify forward
(k = 2..8): on the 2-core AMD EPYC of our records a 3-token forward of SmolLM2-135M took 2.1x a
1-token one, for the same 540 MB of weights and under a tenth of a core's arithmetic
(data/results/smollm2-costs-cpu-emulated-bf16.json, from `scripts/smollm2_costs.py`). oneDNN can
reorder a weight *once* into the blocked layout its small-batch kernel reads, at the price of a
second copy of it in memory.

So a `Linear` sends two rows or more to the packed copy, and one row to `F.linear` unless its
model measured the packed copy faster for one row too (`one_row_rows`). On that machine a
one-token forward through the packed copy once took 6-9% longer (two sweeps, a training job on the
other core); quiet, a three-token one took 73 ms against 118 ms: r(3) = 1.30 against 2.09.
It packs a float32 weight on the CPU, in a torch built with oneDNN, in a model of at most 2 GiB
of weights (`model_packing`), unless `SPECDEC_LAB_PACK=0` is set (=1 lifts the size limit). The
two paths agree to rounding, not bit for bit (tests/engine/test_lean.py, notebook 05 §4c).

That rule was calibrated on one AMD machine; on an Intel Xeon packed k >= 2 forwards ran slower
than unpacked ones (5.3 against 3.3-4.3 ms on the embedded pair; 58/57 against 47/50 ms on
SmolLM2 at k = 2, 3). So by default a weight is packed only where `packing_wins` measures the
packed product faster on the learner's machine: once per weight shape, per process, a few ms.
That probe times one weight again and again, from the cache; a model's own forward streams its
weights from memory. So one row's path is chosen on the model's own forward
(`llama.LeanLlama.one_row_path`): MKL's one-row product, oneDNN's, or oneDNN's over the row and
zero rows. On a 2-core AMD EPYC, SmolLM2-135M's one-token forward (float32, 540 MB) took 49 ms
through MKL, 46 ms through the packed copies' 1-row kernel and 41 ms through their 4-row one
(three rows of zeros), where a 3-token verify took 44 ms.
"""

from __future__ import annotations

import functools
import os
import time

import torch
import torch.nn.functional as F

PACK_ROWS = 8  # the batch oneDNN chooses the packed layout for: a verify forward's k is about this
PACK_MAX_BYTES = 2 * 2**30  # the copy doubles the weights' memory: larger models pack only if told


class Linear:
    """y = x W^T + b for x (..., d_in): through `F.linear` or through a packed copy of W. Several
    rows take the packed copy where there is one; one row takes `F.linear` unless `one_row_rows`
    is m >= 1: then the packed copy, the row padded with zeros to m rows (its model chooses m by
    timing, `LeanLlama.one_row_path`; the module's docstring says why)."""

    def __init__(
        self,
        weight: torch.Tensor,
        bias: torch.Tensor | None = None,
        packed: bool | None = None,
        one_row_rows: int = 0,
    ) -> None:
        self.weight, self.bias = weight, bias  # the model's own tensors
        if packed is None:  # packed only where this machine runs it faster (`packing_wins`)
            packed = can_pack(weight) and packing_wins(tuple(weight.shape))
        self.packed = _reorder(weight.detach()) if packed else None  # (oneDNN layout) or None
        self.one_row_rows = one_row_rows

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        one_row = x.numel() == x.shape[-1]
        if self.packed is None or (one_row and not self.one_row_rows):
            return F.linear(x, self.weight, self.bias)
        rows = x.reshape(-1, x.shape[-1])  # (k, d_in): the packed kernel takes a matrix
        if one_row and self.one_row_rows > 1:  # the row, then zero rows, as the kernel runs best
            rows = torch.cat([rows, rows.new_zeros(self.one_row_rows - 1, rows.shape[1])])
        y = torch.ops.mkldnn._linear_pointwise(rows, self.packed, self.bias, "none", [], "")
        return (y[:1] if one_row else y).view(*x.shape[:-1], -1)


def model_packing(weight_bytes: int) -> bool | None:
    """The default `packed` of a model with `weight_bytes` of weights: None (each weight as
    `can_pack` says) up to PACK_MAX_BYTES, False above it, since a laptop may not hold a second
    copy of a large model. SPECDEC_LAB_PACK=1 lifts the size limit; =0 packs nothing."""
    flag = os.environ.get("SPECDEC_LAB_PACK")
    if flag == "0":
        return False
    return None if flag == "1" or weight_bytes <= PACK_MAX_BYTES else False


def can_pack(weight: torch.Tensor) -> bool:
    """Whether `Linear` packs `weight` by default: float32, on the CPU, oneDNN present and
    working, and not switched off with SPECDEC_LAB_PACK=0."""
    return (
        weight.device.type == "cpu"
        and weight.dtype == torch.float32
        and os.environ.get("SPECDEC_LAB_PACK", "1") != "0"
        and _onednn_works()
    )


def _reorder(weight: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return torch.ops.mkldnn._reorder_linear_weight(weight, PACK_ROWS)


@functools.cache
def _onednn_works() -> bool:
    """One packed 2 x 8 product against its known answer: false on a torch without oneDNN or
    without these (private) ops, so such a build falls back to `F.linear`."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        y = Linear(torch.ones(4, 8), torch.arange(4.0), packed=True)(torch.ones(2, 8))
    except (AttributeError, NotImplementedError, RuntimeError):
        return False
    return torch.equal(y, torch.tensor([[8.0, 9.0, 10.0, 11.0]] * 2))


PROBE_ROWS = (2, 3, 4, 6)  # the verify forwards' row counts the probe times
PROBE_REPEATS = 5
PROBE_MARGIN = 0.95  # packed must take at most this share of F.linear's time to be chosen


@functools.cache
def packing_wins(shape: tuple[int, int]) -> bool:
    """Whether a packed (oneDNN) product with a float32 weight of `shape` (d_out, d_in) beats
    `F.linear` on this machine for the few rows of a verify forward: the sums over PROBE_ROWS of
    each path's fastest of PROBE_REPEATS interleaved calls, packed at most PROBE_MARGIN of
    F.linear's. Measured once per shape per process (cached); SPECDEC_LAB_PACK=1 says yes."""
    if os.environ.get("SPECDEC_LAB_PACK") == "1":
        return True
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(shape, generator=gen)
    packed = _reorder(weight)
    best = {"plain": [float("inf")] * len(PROBE_ROWS), "packed": [float("inf")] * len(PROBE_ROWS)}
    with torch.inference_mode():
        xs = [torch.randn(k, shape[1], generator=gen) for k in PROBE_ROWS]
        for _ in range(1 + PROBE_REPEATS):  # the first round warms both paths up, and counts too
            for i, x in enumerate(xs):
                for name in best:
                    t0 = time.perf_counter()
                    if name == "plain":
                        F.linear(x, weight)
                    else:
                        torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
                    best[name][i] = min(best[name][i], time.perf_counter() - t0)
    return sum(best["packed"]) <= PROBE_MARGIN * sum(best["plain"])
