"""The engine: how a real model runs under the decoding loop.

- `sessions`: `Session` (what the loops need from a model), `open_session`, and the three kinds:
  `MockSession`, `HFSession` (transformers' forward and `DynamicCache`) and `LeanSession`;
- `llama`: the whole Llama-family forward in one screen, with a preallocated KV cache;
- `fused`: the on-device twin of `verify.rejection_sample` and the step's verifier, which owns
  its one host sync;
- `logits`: the logits a family's forward computes from its hidden states.

May import: the foundation (`env`, `data`, `sampling`); nothing above it (outside the package:
torch and transformers).
"""
