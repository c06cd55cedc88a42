"""Incremental scoring of a growing sequence: one interface over mock models and transformers.

A `Session` remembers how many tokens of the sequence its model has already consumed (for a
transformers model: what sits in the KV cache). `logits(ids)` feeds only the new tail of `ids`,
in one forward, and `crop(n)` rolls the cache back after a rejection. The decoding loops in
`specdec_lab.decoding` own the sequence; sessions only keep their caches in step with it.

Two runtimes run a transformers model (`open_session(model, runtime=...)`):

- "lean" (`LeanSession`): our own forward for the Llama family (`specdec_lab.engine.llama`), with a
  preallocated KV cache; rollback moves a pointer. The default wherever it covers the model.
- "captured" (`CapturedSession`): the same lean forward in its static-shape form, captured once
  per token count and replayed (`specdec_lab.engine.capture`). The default on CUDA, where the
  eager forward is bound by kernel launches, not by memory.
- "hf" (`HFSession`): transformers' own forward and `DynamicCache`. Every family; the fallback.

A forward stopped part-way (an exception, a notebook's interrupt) leaves the cache as it was
(`_atomic`): the next call resumes from the tokens the session held before it. Every generation
call also empties the sessions it is handed first (`decoding.start_call`).
"""

from __future__ import annotations

import functools
import inspect
import time
import warnings
import weakref
from importlib.metadata import version
from typing import Protocol

import torch

from specdec_lab import env
from specdec_lab.engine import capture
from specdec_lab.engine.llama import LeanLlama, lean_support
from specdec_lab.engine.logits import output_logits


class Session(Protocol):
    """What the decoding loops need from a model."""

    vocab_size: int
    device: torch.device  # where the model computes and the sequence lives
    runtime: str  # "lean", "captured", "hf" or "mock"
    calls: int  # forward passes so far
    seconds: float  # time inside those forwards (the device's own, see env.RegionTimer)

    def logits(self, ids: torch.Tensor, last: int | None = None) -> torch.Tensor:
        """Next-token scores for the positions of `ids` (L,) not seen yet: (L - cached, V), or
        only for the `last` of them: (last, V)."""

    def crop(self, length: int) -> None:
        """Forget everything after the first `length` tokens."""

    def reserve(self, positions: int) -> None:
        """A call will hold at most `positions` tokens: preallocate the cache if it can."""


DEFAULT_RUNTIME = "auto"  # lean where it covers the model (captured on CUDA), else transformers'
RUNTIMES = (DEFAULT_RUNTIME, "lean", "captured", "hf")


def _atomic(forward):
    """A session method that leaves the cache as it found it if it stops part-way. An exception
    or a notebook interrupt inside a forward may have stored keys and values in some layers and
    not in others; the cache then goes back to the `cached` tokens, and the next call resumes
    from there, as if the stopped call had never run."""

    @functools.wraps(forward)
    def run(self, *args, **kwargs):
        try:
            return forward(self, *args, **kwargs)
        except BaseException:  # KeyboardInterrupt too: it is what a notebook's stop raises
            self.crop(self.cached)
            raise

    return run


class _SessionBase:
    runtime = "mock"
    device = torch.device("cpu")

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self.calls = 0
        self.clock: env.RegionTimer | None = None  # made on the first forward, on its device
        self.cached = 0  # tokens of the sequence already consumed
        self._seen = torch.empty(0, dtype=torch.long)  # the ids they came from (first `cached`)

    def _new_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        """The unseen tail of `ids`, after checking that its head is what the cache holds (on the
        CPU only: on an accelerator the check would cost a host sync per forward)."""
        if ids.shape[0] <= self.cached:
            raise ValueError(f"nothing new to score: {ids.shape[0]} ids, {self.cached} cached")
        seen = self._seen[: self.cached]
        on_host = ids.device.type == "cpu" and seen.device == ids.device
        if on_host and not torch.equal(ids[: self.cached], seen):
            raise ValueError(
                f"the first {self.cached} ids differ from the ones this session's cache holds: "
                "crop the session to the common prefix (or open a new one) before scoring "
                "another sequence"
            )
        self._seen = ids
        return ids[self.cached :]

    def _tree_tail(self, ids: torch.Tensor) -> torch.Tensor:
        """The unseen tail of `ids` for a tree forward, never empty: row 0 of a tree's scores
        comes from the last token of `ids`, which is re-fed if it was consumed already."""
        self.crop(min(self.cached, ids.shape[0] - 1))
        return self._new_tokens(ids)

    def crop(self, length: int) -> None:
        self.cached = min(self.cached, length)

    def reserve(self, positions: int) -> None:
        """Only the lean runtime preallocates."""

    def keep_branch(self, nodes: list[int]) -> None:
        """A tree step accepted `nodes` (root to leaf). This session dropped the tree after
        scoring it, so the accepted branch is fed again with the next forward."""

    def _start(self):
        """Start timing one forward (see `env.RegionTimer`): the session owns its timing."""
        if self.clock is None:
            self.clock = env.RegionTimer(self.device)
        return self.clock.start()

    def _count(self, started, cached: int) -> None:
        """Book one forward that `_start` began, after which `cached` tokens are consumed."""
        self.calls += 1
        self.clock.stop(started)
        self.cached = cached

    @property
    def seconds(self) -> float:
        """Time inside this session's forwards (the device's time on CUDA)."""
        return 0.0 if self.clock is None else self.clock.seconds


class MockSession(_SessionBase):
    """Mock models are closed-form, so there is no cache: score the new positions directly."""

    def __init__(self, model, vocab_size: int | None = None) -> None:
        super().__init__(vocab_size or model.vocab_size)
        self.model = model

    def logits(self, ids: torch.Tensor, last: int | None = None) -> torch.Tensor:
        self._new_tokens(ids)
        t0 = self._start()
        first = ids.shape[0] - last if last else self.cached
        out = self.model.logits(ids)[first:, : self.vocab_size]  # (L - cached or last, V)
        self._count(t0, ids.shape[0])
        return out

    def tree_logits(
        self, ids: torch.Tensor, tree_tokens: torch.Tensor, parents: list[int]
    ) -> torch.Tensor:
        """Scores after `ids` and after every node of a token tree hanging below ids[-1]:
        tree_tokens (N,), parents[i] node i's parent (-1: the root, ids[-1]), parents before
        children. Returns (1 + N, V): row 0 after `ids`, row 1 + i after node i's path."""
        self._tree_tail(ids)
        t0 = self._start()
        length, n = ids.shape[0], len(parents)
        rows = torch.empty(1 + n, self.vocab_size)
        leaves = sorted(set(range(n)) - set(parents)) or [-1]  # -1: no tree, only the root
        for leaf in leaves:  # one causal pass per root-to-leaf branch scores all of its nodes
            branch = tree_branch(parents, leaf)  # node indices, root to leaf
            scores = self.model.logits(torch.cat([ids, tree_tokens[branch]]))  # (L + d, V)
            rows[[0, *[1 + i for i in branch]]] = scores[length - 1 :, : self.vocab_size]
        self._count(t0, length)
        return rows  # (1 + N, V)


class HFSession(_SessionBase):
    """A transformers causal LM with a `DynamicCache` that can be rolled back. `keep_hidden`:
    also keep the final (normalised) hidden states, `self.hidden` (cached, d), for a draft head."""

    runtime = "hf"

    def __init__(self, model, vocab_size: int | None = None, keep_hidden: bool = False) -> None:
        from transformers import DynamicCache  # lazy: mock-only notebooks never import transformers

        if (problem := cache_api_problem(model.forward)) is not None:
            raise RuntimeError(problem)
        super().__init__(vocab_size or model.config.vocab_size)
        self.model = model
        self.device = model.device
        self.cache = DynamicCache(config=model.config)
        # Sliding-window layers (Mistral, Gemma, Phi-3) refuse `crop` once the window is full
        # unless they keep their past states; transformers' assisted decoding does the same.
        self.cache.activate_past_recording()
        self.keep_hidden = keep_hidden
        self.hidden = torch.empty(0, model.config.hidden_size, device=self.device)  # (cached, d)

    @_atomic
    @torch.inference_mode()
    def logits(self, ids: torch.Tensor, last: int | None = None) -> torch.Tensor:
        """Scores for the unseen positions of `ids`, or only for the `last` of them (a prefill
        then never materialises the prompt's L x V logits)."""
        new = self._new_tokens(ids).to(self.device)  # (k,)
        t0 = self._start()
        out = self._forward(new[None], logits_to_keep=last or 0)  # (k or last, V)
        self._count(t0, ids.shape[0])
        return out

    @_atomic
    @torch.inference_mode()
    def tree_logits(
        self, ids: torch.Tensor, tree_tokens: torch.Tensor, parents: list[int]
    ) -> torch.Tensor:
        """One forward over the unseen tail of `ids` and a whole token tree (see MockSession):
        each node sees the sequence and its own ancestors, at its depth. The tree's cache entries
        are dropped afterwards (the accepted branch is re-fed with the next forward)."""
        tail = self._tree_tail(ids)  # (t,)
        t, n, past = tail.shape[0], len(parents), self.cached
        depth = tree_depths(parents)  # (N,) 1 for a child of the root
        positions = torch.cat([torch.arange(past, past + t), past + t - 1 + depth])  # (t + N,)
        allowed = torch.ones(t + n, past + t + n, dtype=torch.bool).tril(past)  # causal
        allowed[t:, past + t :] = tree_ancestry(parents)  # (N, N) node i sees node j iff j ≤ i
        dtype = self.model.dtype
        mask = torch.zeros(allowed.shape, dtype=dtype)
        mask.masked_fill_(~allowed, torch.finfo(dtype).min)  # additive: works for eager and SDPA
        t0 = self._start()
        out = self._forward(
            torch.cat([tail.to(self.device), tree_tokens.long().to(self.device)])[None],
            # built on the host from the tree's shape, copied without waiting for the device
            attention_mask=mask[None, None].to(self.device, non_blocking=True),
            position_ids=positions[None].to(self.device, non_blocking=True),
        )  # (t + N, V)
        self._count(t0, ids.shape[0])
        self.cache.crop(-n)  # forget the tree; transformers 5.x: a negative count to remove
        self.hidden = self.hidden[: past + t]
        return out[t - 1 :]  # (1 + N, V)

    def _forward(self, input_ids: torch.Tensor, logits_to_keep: int = 0, **kwargs) -> torch.Tensor:
        # transformers 5.x: the cache goes in as `cache=` (`past_key_values` is deprecated).
        kwargs.update(input_ids=input_ids, cache=self.cache, use_cache=True)
        if not self.keep_hidden:
            logits = self.model(**kwargs, logits_to_keep=logits_to_keep).logits[0]
            self._check_cache(input_ids.shape[1])
        else:  # the decoder's last (normalised) hidden state, then the LM head by hand
            h = self.model.get_decoder()(**kwargs).last_hidden_state[0]  # (k, d)
            self.hidden = torch.cat([self.hidden, h.float()])
            self._check_cache(input_ids.shape[1])
            logits = output_logits(self.model, h[-logits_to_keep:])
        return logits[:, : self.vocab_size].float()  # (k, V), on the model's device

    def _check_cache(self, fed: int) -> None:
        """The cache must hold what was fed (a forward that ignored it would rescore the new
        tokens without their prefix, silently). Host integers only: no sync."""
        if any(layer.is_sliding for layer in self.cache.layers):
            return  # a sliding window keeps what it keeps
        expected = self.cached + fed
        if self.cache.get_seq_length() != expected:
            raise RuntimeError(
                f"the KV cache holds {self.cache.get_seq_length()} positions after a forward "
                f"that should leave {expected}: this model's forward ignored `cache=`"
            )

    def crop(self, length: int) -> None:
        super().crop(length)
        for layer in self.cache.layers:  # one by one: a stopped forward may have filled a few
            if (drop := layer.get_seq_length() - self.cached) > 0:
                layer.crop(-drop)  # transformers 5.x: a negative count of tokens to remove
        self.hidden = self.hidden[: self.cached]


class LeanSession(_SessionBase):
    """A Llama-family model run by our own lean forward (`specdec_lab.engine.llama`): as
    `HFSession`, but `crop` moves a pointer, and a token tree's entries stay in the cache (a tree
    grown level by level feeds each level once; `keep_branch` keeps the accepted branch's)."""

    runtime = "lean"

    def __init__(
        self,
        model,
        vocab_size: int | None = None,
        keep_hidden: bool = False,
        packed: bool | None = None,
    ) -> None:
        super().__init__(vocab_size or model.config.vocab_size)
        self.model = model
        self.device = model.device
        # ValueError, naming the reason, if not covered; `packed` as LeanLlama's, None: shared
        self.lean = LeanLlama.of(model) if packed is None else LeanLlama(model, packed)
        self.cache = self.lean.new_cache()
        self.keep_hidden = keep_hidden
        self._hidden = torch.empty(0, model.config.hidden_size, device=self.device)  # (cap, d)
        self.tree_fed = 0  # nodes of the current token tree that sit in the cache after `cached`
        self.tree_rows = torch.empty(0, self.vocab_size, device=self.device)  # (1 + fed, V)

    @property
    def hidden(self) -> torch.Tensor:
        """Final hidden states of the consumed positions: (cached, d), if keep_hidden."""
        return self._hidden[: self.cached]

    def reserve(self, positions: int) -> None:
        self.cache.reserve(positions)

    @_atomic
    @torch.inference_mode()
    def logits(self, ids: torch.Tensor, last: int | None = None) -> torch.Tensor:
        new = self._new_tokens(ids).to(self.device)  # (k,)
        self._drop_tree()
        self._prepare(new.shape[0])
        t0 = self._start()
        h = self._forward(new)  # (k, d)
        if self.keep_hidden:
            self._keep_hidden(h)
        out = self.lean.logits(h[-last:] if last else h, self.vocab_size).float()
        self._count(t0, ids.shape[0])
        return out  # (k or last, V)

    @_atomic
    @torch.inference_mode()
    def tree_logits(
        self, ids: torch.Tensor, tree_tokens: torch.Tensor, parents: list[int]
    ) -> torch.Tensor:
        """As `MockSession.tree_logits`, feeding the unseen tail of `ids` and only the nodes not
        already in the cache."""
        n, fed = len(parents), self.tree_fed
        if fed and (self.cached != ids.shape[0] or n < fed):
            self._drop_tree()  # a different tree: start again
            fed = 0
        tail = self._tree_tail(ids) if not fed else ids[:0]  # (t,) empty while growing a tree
        t, past = tail.shape[0], self.cached  # past: sequence tokens in the cache
        prefix = past + t  # = len(ids): the nodes follow the whole sequence in the cache
        depth = tree_depths(parents)[fed:]  # (n - fed,)
        positions = torch.cat([torch.arange(past, prefix), prefix - 1 + depth])  # (t + n - fed,)
        allowed = torch.ones(t + n - fed, prefix + n, dtype=torch.bool).tril(past)  # causal
        allowed[t:, prefix:] = tree_ancestry(parents)[fed:]  # node i sees its ancestors only
        self._prepare(t + n - fed, tree=True)
        t0 = self._start()
        h = self._forward(
            torch.cat([tail.to(self.device), tree_tokens[fed:].long().to(self.device)]),
            positions,  # on the host: the forward reads their maximum to size its RoPE table
            allowed.to(self.device, non_blocking=True),  # the tree's shape: no wait
        )  # (t + n - fed, d)
        rows = self.lean.logits(h[max(t - 1, 0) :], self.vocab_size).float()
        self._count(t0, prefix)
        self.tree_rows = torch.cat([self.tree_rows[: 1 + fed] if fed else rows[:0], rows])
        self.tree_fed, self.tree_tokens = n, tree_tokens
        return self.tree_rows  # (1 + N, V)

    def _prepare(self, k: int, tree: bool = False) -> None:
        """Untimed set-up before a forward of k tokens: none for the eager forward."""

    def _forward(self, tokens, positions=None, allowed=None) -> torch.Tensor:
        """The forward of `tokens` (k,) after the cache: final hidden states (k, d)."""
        return self.lean.forward(tokens, self.cache, positions, allowed)

    def keep_branch(self, nodes: list[int]) -> None:
        """Keep the accepted branch's cache entries as sequence positions: no re-feed."""
        fed = [i for i in nodes if i < self.tree_fed]  # a branch's fed nodes form a prefix
        rows = torch.tensor(fed, dtype=torch.long).to(self.device, non_blocking=True)
        self.cache.keep(self.cached, rows)
        kept = self.tree_tokens[rows].to(self._seen.device, self._seen.dtype)
        self._seen = torch.cat([self._seen[: self.cached], kept])
        self.cached += len(fed)
        self.tree_fed = 0

    def crop(self, length: int) -> None:
        self._drop_tree()
        super().crop(length)
        self.cache.crop(self.cached)

    def _drop_tree(self) -> None:
        if self.tree_fed:
            self.cache.crop(self.cached)
            self.tree_fed = 0

    def _keep_hidden(self, h: torch.Tensor) -> None:
        end = self.cached + h.shape[0]
        if end > self._hidden.shape[0]:  # grow like the cache: whole chunks
            grown = self._hidden.new_empty(self.cache.capacity, self._hidden.shape[1])
            grown[: self.cached] = self._hidden[: self.cached]
            self._hidden = grown
        self._hidden[self.cached : end] = h.float()


class CapturedSession(LeanSession):
    """The lean forward replayed from one captured graph per token count k (`engine.capture`):
    the default on CUDA, where the eager forward is launch-bound. A forward of up to
    `CAPTURE_MAX` tokens (a draft's 1, a verify's γ + 1, a tree level) runs
    `LeanLlama.forward_static`, captured on its k's first use *before* the session's clock
    starts (`capture_seconds` says how long that took), then replayed; a longer one (a prefill)
    runs the eager lean forward. Growing the cache moves its buffers, so the graphs are captured
    again (`reserve` up front, as `decoding.run_steps` does, avoids it). If a capture fails, the
    session warns once, naming the reason, and runs the eager lean forward from then on."""

    runtime = "captured"
    CAPTURE_MAX = 64  # tokens: longer forwards are prefills, run once each

    def __init__(self, model, *args, backend: str | None = None, **kwargs) -> None:
        """As `LeanSession`'s; `backend` as `capture.BACKENDS` (None: the device's default)."""
        super().__init__(model, *args, **kwargs)
        self.backend = backend or capture.default_backend(self.device)
        self.replays: dict[tuple[bool, int], capture.Replay] = {}  # (tree?, k) -> its replay
        self.capture_seconds = 0.0  # spent capturing: outside every timed forward
        self._pool = torch.cuda.graph_pool_handle() if self.backend == "cuda" else None
        self._captured_on: tuple[torch.Tensor, ...] = ()  # the buffers the graphs address

    def _prepare(self, k: int, tree: bool = False) -> None:
        if self.runtime != "captured" or k > self.CAPTURE_MAX:
            return
        began = time.perf_counter()
        self.cache.reserve(self.cache.length + k)
        if not self._captured_on or self._captured_on[0] is not self.cache.k:  # new buffers
            self.replays.clear()
            self.lean.prepare_static(self.cache.capacity, self.vocab_size)
            # held here, so a table that another session regrows is never freed under a graph
            self._captured_on = (self.cache.k, self.cache.v, self.lean.cos, self.lean.sin)
        if (tree, k) in self.replays:
            return
        try:
            self.replays[tree, k] = capture.Replay(
                self._static_forward,
                self._static_inputs(torch.zeros(k, dtype=torch.long), tree),
                self.backend,
                self._pool,
            )
        except Exception as err:  # any capture failure: the eager forward computes the same
            reason = f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
            warnings.warn(
                f"the captured forward failed ({reason}); running the eager lean forward",
                stacklevel=4,
            )
            self.runtime, self.replays = "lean", {}
        self.capture_seconds += time.perf_counter() - began

    def _static_forward(self, tokens, slots, *tree):  # tree: its positions and mask
        return (self.lean.forward_static(tokens, slots, self.cache, *tree),)

    def _static_inputs(self, tokens, tree, positions=None, allowed=None) -> tuple:
        """The static forward's inputs for `tokens` (k,) in the next k cache entries: a chain's
        (tokens, slots), a tree's also its positions and its mask (k, capacity)."""
        start, k = self.cache.length, tokens.shape[0]
        tokens = tokens.to(self.device, non_blocking=True)
        slots = torch.arange(start, start + k, device=self.device)
        if not tree:
            return tokens, slots
        mask = torch.zeros(k, self.cache.capacity, dtype=torch.bool, device=self.device)
        if allowed is not None:
            mask[:, : allowed.shape[1]] = allowed
        positions = slots if positions is None else positions.to(self.device, non_blocking=True)
        return tokens, slots, positions, mask

    def _forward(self, tokens, positions=None, allowed=None) -> torch.Tensor:
        tree = allowed is not None
        replay = self.replays.get((tree, tokens.shape[0]))
        if replay is None or self.runtime != "captured":
            return super()._forward(tokens, positions, allowed)
        (hidden,) = replay(*self._static_inputs(tokens, tree, positions, allowed))
        self.cache.length += tokens.shape[0]
        return hidden


def cache_api_problem(forward) -> str | None:
    """One sentence if a transformers `forward` lacks the `cache=` keyword the sessions pass
    (transformers before the cache API specdec_lab is tested on), else None."""
    if "cache" in inspect.signature(forward).parameters:
        return None
    return (
        f"{forward.__qualname__} takes no `cache=` keyword: this transformers "
        f"({version('transformers')}) predates the cache API specdec_lab is tested on; install "
        "the transformers that pyproject.toml names (it is pure Python: a wheel can be carried)"
    )


def tree_depths(parents: list[int]) -> torch.Tensor:
    """Depth of every tree node (1 for a child of the root): (N,)."""
    depth: list[int] = []
    for i, parent in enumerate(parents):
        if not -1 <= parent < i:
            raise ValueError(f"parents[{i}] = {parent}: a parent must come before its child")
        depth.append(1 if parent < 0 else depth[parent] + 1)
    return torch.tensor(depth, dtype=torch.long)


def tree_ancestry(parents: list[int]) -> torch.Tensor:
    """(N, N) boolean: entry [i, j] is True iff node j is node i or one of its ancestors."""
    n = len(parents)
    seen = torch.eye(n, dtype=torch.bool)
    for i, parent in enumerate(parents):
        if parent >= 0:
            seen[i] |= seen[parent]
    return seen


def tree_branch(parents: list[int], node: int) -> list[int]:
    """The node indices from the root down to `node` (empty for the root, -1)."""
    branch = []
    while node >= 0:
        branch.append(node)
        node = parents[node]
    return branch[::-1]


def vocab_size_of(model) -> int:
    """The size of a model's output vocabulary (mock or transformers)."""
    if hasattr(model, "vocab_size") and not _is_hf(model):
        return int(model.vocab_size)
    if _is_hf(model):
        return int(model.get_output_embeddings().weight.shape[0])
    raise TypeError(
        f"expected a specdec_lab mock model or a transformers causal LM, got {type(model).__name__}"
    )


def max_positions(model) -> int | None:
    """The most positions (prompt + generated tokens) `model` takes; None if it sets no limit
    (a mock model). Past it GPT-2's position table raises an IndexError (on CUDA, a device-side
    assert that kills the process); rotary models compute, but were never trained there."""
    config = getattr(model, "config", None)
    limit = getattr(config, "max_position_embeddings", None)  # GPT-2 maps it to n_positions
    return int(limit) if limit else None


def open_session(
    model, vocab_size: int | None = None, runtime: str = DEFAULT_RUNTIME, keep_hidden: bool = False
) -> Session:
    """Wrap `model` in the right session type. `vocab_size` restricts the scored vocabulary.
    runtime: `DEFAULT_RUNTIME` runs a transformers model with our lean forward where it covers
    the model (`llama.lean_support`), replayed as captured graphs on CUDA and eager elsewhere,
    else with transformers' own; "lean" (eager) and "captured" insist (ValueError naming the
    family), "hf" keeps transformers' eager path. A session passed in is returned as
    it is (e.g. one shared with a draft head), if it runs on the runtime asked for.
    """
    if runtime not in RUNTIMES:
        raise ValueError(f"runtime must be one of {RUNTIMES}, got {runtime!r}")
    if isinstance(model, _SessionBase):
        if runtime not in (DEFAULT_RUNTIME, model.runtime) and model.runtime != "mock":
            raise ValueError(f"runtime={runtime!r}, but this session runs on {model.runtime!r}")
        return model
    if _is_hf(model):
        return _hf_session_class(model, runtime)(model, vocab_size, keep_hidden=keep_hidden)
    if hasattr(model, "logits") and hasattr(model, "vocab_size"):
        return MockSession(model, vocab_size)
    raise TypeError(
        f"expected a specdec_lab mock model or a transformers causal LM, got {type(model).__name__}"
    )


def runtime_of(model, runtime: str = DEFAULT_RUNTIME) -> str:
    """Which runtime `open_session(model, runtime=runtime)` would use: "lean", "captured", "hf"
    or "mock"."""
    if isinstance(model, _SessionBase):
        return open_session(model, runtime=runtime).runtime
    if not _is_hf(model):
        return "mock"
    return _hf_session_class(model, runtime).runtime


def _hf_session_class(model, runtime: str) -> type:
    why = lean_support(model)
    if runtime in ("lean", "captured") and why is not None:
        raise ValueError(f"runtime={runtime!r}: {why}; use runtime='hf' (or 'auto') for this model")
    if runtime == "hf" or why is not None:
        if why is not None and " model not covered: " in why and model not in _WARNED:
            _WARNED.add(model)  # a covered family with a config the lean forward lacks
            warnings.warn(f"{why}: running it with transformers' forward", stacklevel=3)
        return HFSession
    if runtime == "captured" or (runtime == DEFAULT_RUNTIME and model.device.type == "cuda"):
        return CapturedSession
    return LeanSession


# Models whose fallback was announced (once each). Weak references, not ids: a collected model's
# id is reused by the next one, which then never heard its warning.
_WARNED: weakref.WeakSet = weakref.WeakSet()


def _is_hf(model) -> bool:
    return isinstance(model, torch.nn.Module) and hasattr(model, "config")
