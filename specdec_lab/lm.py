"""Incremental scoring of a growing sequence: one interface over mock models and transformers.

A `Session` remembers how many tokens of the sequence its model has already consumed (for a
transformers model: what sits in the KV cache). `logits(ids)` feeds only the new tail of `ids`,
in one forward, and `crop(n)` rolls the cache back after a rejection. The decoding loops in
`specdec_lab.decoding` own the sequence; sessions only keep their caches in step with it.
"""

from __future__ import annotations

import time
from typing import Protocol

import torch


class Session(Protocol):
    """What the decoding loops need from a model."""

    vocab_size: int
    calls: int  # forward passes so far
    seconds: float  # wall time inside those forwards

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        """Next-token scores for the positions of `ids` (L,) not seen yet: (L - cached, V)."""
        ...

    def crop(self, length: int) -> None:
        """Forget everything after the first `length` tokens."""
        ...


class _SessionBase:
    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self.calls = 0
        self.seconds = 0.0
        self.cached = 0  # tokens of the sequence already consumed

    def _new_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        if ids.shape[0] <= self.cached:
            raise ValueError(f"nothing new to score: {ids.shape[0]} ids, {self.cached} cached")
        return ids[self.cached :]

    def crop(self, length: int) -> None:
        self.cached = min(self.cached, length)

    def _count(self, t0: float) -> None:
        """Book one forward that started at `t0` (perf_counter): the session owns its timing."""
        self.calls += 1
        self.seconds += time.perf_counter() - t0


class MockSession(_SessionBase):
    """Mock models are closed-form, so there is no cache: score the new positions directly."""

    def __init__(self, model, vocab_size: int | None = None) -> None:
        super().__init__(vocab_size or model.vocab_size)
        self.model = model

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        self._new_tokens(ids)
        t0 = time.perf_counter()
        out = self.model.logits(ids)[self.cached :, : self.vocab_size]  # (L - cached, V)
        self._count(t0)
        self.cached = ids.shape[0]
        return out

    def tree_logits(
        self, ids: torch.Tensor, tree_tokens: torch.Tensor, parents: list[int]
    ) -> torch.Tensor:
        """Scores after `ids` and after every node of a token tree hanging below ids[-1].

        tree_tokens: (N,); parents[i] is the index of node i's parent, or -1 for a child of the
        root (the last token of `ids`); parents come before children. Returns (1 + N, V): row 0
        scores the token after `ids`, row 1 + i the token after node i's path. One "forward".
        """
        self._new_tokens(ids)
        t0 = time.perf_counter()
        length, n = ids.shape[0], len(parents)
        rows = torch.empty(1 + n, self.vocab_size)
        leaves = sorted(set(range(n)) - set(parents)) or [-1]  # -1: no tree, only the root
        for leaf in leaves:  # one causal pass per root-to-leaf branch scores all of its nodes
            branch = tree_branch(parents, leaf)  # node indices, root to leaf
            scores = self.model.logits(torch.cat([ids, tree_tokens[branch]]))  # (L + d, V)
            rows[[0, *[1 + i for i in branch]]] = scores[length - 1 :, : self.vocab_size]
        self._count(t0)
        self.cached = length
        return rows  # (1 + N, V)


class HFSession(_SessionBase):
    """A transformers causal LM with a `DynamicCache` that can be rolled back.

    With `keep_hidden=True` the session also keeps the final (normalised) hidden state of every
    position it has consumed in `self.hidden` (cached, d): a draft head reads them for free.
    """

    def __init__(self, model, vocab_size: int | None = None, keep_hidden: bool = False) -> None:
        from transformers import DynamicCache

        super().__init__(vocab_size or model.config.vocab_size)
        self.model = model
        self.device = model.device
        self.cache = DynamicCache(config=model.config)
        self.keep_hidden = keep_hidden
        self.hidden = torch.empty(0, model.config.hidden_size)  # (cached, d), if keep_hidden

    @torch.inference_mode()
    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        new = self._new_tokens(ids).to(self.device)  # (k,)
        t0 = time.perf_counter()
        out = self._forward(new[None])  # (k, V)
        self._count(t0)
        self.cached = ids.shape[0]
        return out

    @torch.inference_mode()
    def tree_logits(
        self, ids: torch.Tensor, tree_tokens: torch.Tensor, parents: list[int]
    ) -> torch.Tensor:
        """One forward over the unseen tail of `ids` and a whole token tree (see MockSession).

        The tree attention mask lets each node see the cache, the tail and its own ancestors
        only; position ids place each node at its depth. The tree's cache entries are dropped
        afterwards (the accepted branch is re-fed with the next forward): correctness first.
        """
        tail = self._new_tokens(ids)  # (t,)
        t, n, past = tail.shape[0], len(parents), self.cached
        depth = tree_depths(parents)  # (N,) 1 for a child of the root
        positions = torch.cat([torch.arange(past, past + t), past + t - 1 + depth])  # (t + N,)
        allowed = torch.ones(t + n, past + t + n, dtype=torch.bool).tril(past)  # causal
        allowed[t:, past + t :] = tree_ancestry(parents)  # (N, N) node i sees node j iff j ≤ i
        dtype = self.model.dtype
        mask = torch.zeros(allowed.shape, dtype=dtype)
        mask.masked_fill_(~allowed, torch.finfo(dtype).min)  # additive: works for eager and SDPA
        t0 = time.perf_counter()
        out = self._forward(
            torch.cat([tail, tree_tokens])[None].to(self.device),
            attention_mask=mask[None, None].to(self.device),  # (1, 1, t + N, past + t + N)
            position_ids=positions[None].to(self.device),
        )  # (t + N, V)
        self._count(t0)
        self.cache.crop(-n)  # forget the tree; transformers 5.x: a negative count to remove
        self.hidden = self.hidden[: past + t]
        self.cached = ids.shape[0]
        return out[t - 1 :]  # (1 + N, V)

    def _forward(self, input_ids: torch.Tensor, **kwargs) -> torch.Tensor:
        # transformers 5.x: the cache goes in as `cache=` (`past_key_values` is deprecated).
        if not self.keep_hidden:
            out = self.model(input_ids=input_ids, cache=self.cache, use_cache=True, **kwargs)
            logits = out.logits[0]
        else:  # the decoder's last (normalised) hidden state, then the LM head by hand
            h = self.model.get_decoder()(
                input_ids=input_ids, cache=self.cache, use_cache=True, **kwargs
            ).last_hidden_state[0]  # (k, d)
            self.hidden = torch.cat([self.hidden, h.float().cpu()])
            logits = self.model.get_output_embeddings()(h)
        # Verification runs on the CPU with the caller's CPU generator: one small copy per step.
        return logits[:, : self.vocab_size].float().cpu()  # (k, V)

    def crop(self, length: int) -> None:
        drop = self.cached - length
        if drop > 0:
            self.cache.crop(-drop)  # transformers 5.x: a negative count of tokens to remove
        super().crop(length)
        self.hidden = self.hidden[: self.cached]


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


def tree_path(ids: torch.Tensor, tree_tokens: torch.Tensor, parents: list[int], node: int):
    """The sequence `ids` followed by the tokens from the root down to `node`: (L + depth,)."""
    return torch.cat([ids, tree_tokens[tree_branch(parents, node)].long()])


def vocab_size_of(model) -> int:
    """The size of a model's output vocabulary (mock or transformers)."""
    if hasattr(model, "vocab_size") and not _is_hf(model):
        return int(model.vocab_size)
    if _is_hf(model):
        return int(model.get_output_embeddings().weight.shape[0])
    raise TypeError(
        f"expected a specdec_lab mock model or a transformers causal LM, got {type(model).__name__}"
    )


def open_session(model, vocab_size: int | None = None) -> Session:
    """Wrap `model` in the right session type. `vocab_size` restricts the scored vocabulary.

    A session passed in is returned as it is (e.g. an `HFSession(..., keep_hidden=True)` shared
    with a draft head).
    """
    if isinstance(model, _SessionBase):
        return model
    if _is_hf(model):
        return HFSession(model, vocab_size)
    if hasattr(model, "logits") and hasattr(model, "vocab_size"):
        return MockSession(model, vocab_size)
    raise TypeError(
        f"expected a specdec_lab mock model or a transformers causal LM, got {type(model).__name__}"
    )


def _is_hf(model) -> bool:
    return isinstance(model, torch.nn.Module) and hasattr(model, "config")
