"""The engine: how a real model runs under the decoding loop.

- `sessions`: `Session` (what the loops need from a model), `open_session`, and the four kinds:
  `MockSession`, `HFSession` (transformers' forward and `DynamicCache`), `LeanSession` and
  `CapturedSession` (the lean forward replayed as graphs: the default on CUDA);
- `llama`: the whole Llama-family forward in one screen, with a preallocated KV cache, and its
  static-shape form for capture;
- `capture`: capture a static-shape forward once, replay it each step (a CUDA graph, or its CPU
  twin the tests replay);
- `fused`: the on-device twin of `verify.rejection_sample` and the step's verifier, which owns
  its one host sync;
- `logits`: the logits a family's forward computes from its hidden states.

May import: the foundation (`env`, `data`, `sampling`); nothing above it (outside the package:
torch and transformers).
"""
