"""The check of notebooks/00_why_decoding_is_memory_bound.ipynb: Exercise 0.1 (the size of a KV
cache)."""

from __future__ import annotations

import math
from collections.abc import Callable

from specdec_lab.course.checks.harness import call_answer, refuse_delegation, require_prediction
from specdec_lab.measure import profiling

# The library function Exercise 0.1 re-implements, captured before any check can patch it.
_KV_CACHE_BYTES = profiling.kv_cache_bytes
KV_CHOICES = ("a thousand", "ten thousand", "a hundred thousand")


def exercise_0_1(kv_bytes_per_token: Callable[..., int], shapes: dict, prediction: str) -> float:
    """Exercise 0.1 against `profiling.kv_cache_bytes` on `shapes` ({name: ModelShape}); then the
    context length at which Llama-2 7B's fp16 KV cache weighs as much as its weights."""
    forbidden = {"kv_cache_bytes": (profiling, "kv_cache_bytes")}
    guard = refuse_delegation("0.1", kv_bytes_per_token, forbidden, "the count")
    for name, shape in shapes.items():
        config = shape.config()
        for width in (2, 4):
            with guard:
                got = call_answer("0.1", kv_bytes_per_token, config, width)
            want = _KV_CACHE_BYTES(config, 1, 1, width)
            assert got == want, (
                f"Exercise 0.1: {name} with {width}-byte values stores {want:,} bytes per "
                f"token, you say {got:,}"
            )
    require_prediction("0.1", prediction, KV_CHOICES)
    config = shapes["Llama-2 7B"].config()
    per_token = _KV_CACHE_BYTES(config, 1, 1, 2)
    tokens = 2 * profiling.param_count(config) / per_token  # the fp16 weights, in tokens of cache
    nearest = min(KV_CHOICES, key=lambda c: abs(math.log10(tokens) - (3 + KV_CHOICES.index(c))))
    print(
        f"Llama-2 7B: {per_token / 2**20:.2f} MiB of KV cache per token; it outweighs the fp16 "
        f"weights beyond {tokens:,.0f} tokens: about {nearest}. You predicted {prediction}."
    )
    print("Exercise 0.1: correct!")
    return tokens
