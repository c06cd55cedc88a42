"""Capture a forward once, replay it every step: the cure for a launch-bound GPU.

Why. At batch 1 a GPU runs a small model's forward faster than the host can issue it: each of
its few hundred kernels costs the CPU a few microseconds to launch. On the H200 of our records
the eager lean forward of a 7B shape took 3.7x the time its weights take to stream, and a 1B
shape 11x (data/results/gpu-device-cuda.json). A CUDA graph records the kernels of one call
and replays them all with one launch, so the GPU is left waiting only on memory again.

What a capture demands. The replay runs the *recorded* kernels on the *recorded* addresses, so
the function captured must fix every shape and read nothing back to the host: a Python integer
inside it (a cache length, a slice bound) is frozen at its capture-time value, and every replay
would silently write the same slot. `llama.LeanLlama.forward_static` is the lean forward in that
form. Inputs go in through static buffers, which each call copies its tensors into, and outputs
come back as clones, since the next replay overwrites them.

Backends, all with one interface (`Replay`):

- "cuda": `torch.cuda.CUDAGraph`, after a warm-up on a side stream (lazy library set-up must not
  happen mid-capture). Chosen over `torch.compile(mode="reduce-overhead")` because capturing
  takes a fraction of a second where compiling a model takes minutes, on every torch the course
  meets (the GPU machine's 2.11 included), and the graph replays the same kernels the eager
  forward runs, so its logits match the eager path's.
- "trace": `torch.fx.experimental.proxy_tensor.make_fx`, the CPU twin of a CUDA graph. It runs
  the function once and records its aten ops with every Python integer frozen, and it refuses a
  host read, as a capture does. The tests replay it against the eager forward, so a forward that
  a CUDA graph would get wrong fails on the CPU too.
- "eager": no capture, the static function itself (the simulated accelerator, whose wrapped
  tensors neither backend records).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch.fx.experimental.proxy_tensor import make_fx

BACKENDS = ("cuda", "trace", "eager")


def default_backend(device: torch.device) -> str:
    """The capture a session on `device` uses: a CUDA graph on CUDA, the traced twin on the CPU,
    and none elsewhere (MPS has no graph capture; the simulated accelerator wraps its tensors)."""
    return {"cuda": "cuda", "cpu": "trace"}.get(device.type, "eager")


class Replay:
    """`fn(*inputs)`, captured once for inputs shaped like `example`, replayed by each call.
    A call copies its tensors into the static input buffers, replays, and returns clones of the
    outputs (a tuple of tensors). The first capture runs `fn` on `example`, so whatever `fn`
    writes in place (a KV cache) must be the same for the same inputs."""

    def __init__(
        self,
        fn: Callable[..., tuple[torch.Tensor, ...]],
        example: Sequence[torch.Tensor],
        backend: str,
        pool=None,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        self.backend = backend
        self.inputs = [x.clone() for x in example]  # the static buffers a replay reads
        with torch.inference_mode():
            if backend == "cuda":
                self._capture_cuda(fn, pool)
            elif backend == "trace":
                self.run = make_fx(fn)(*self.inputs)  # every Python integer frozen, as on a GPU
            else:
                self.run = fn

    def _capture_cuda(self, fn, pool) -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up: cuBLAS handles and workspaces made off-graph
            fn(*self.inputs)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool):
            self.outputs = fn(*self.inputs)

    @torch.inference_mode()
    def __call__(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        for buffer, x in zip(self.inputs, inputs, strict=True):
            buffer.copy_(x, non_blocking=True)
        if self.backend == "cuda":
            self.graph.replay()
            return tuple(out.clone() for out in self.outputs)
        return tuple(out.clone() for out in self.run(*self.inputs))
