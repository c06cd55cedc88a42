"""A session survives a step stopped at any point (an exception, a notebook interrupt): the next
call resumes from a consistent cache, or resets, and its tokens equal a fresh run's. Each runtime
stops in its own forward: the mock's `logits`, the lean forward's RMS norms (two per layer, then
the final one, after the cache pointer has moved), transformers' decoder layers and LM head."""

from __future__ import annotations

import contextlib

import pytest
import torch

from specdec_lab import decoding, tree
from specdec_lab.engine import llama, sessions
from specdec_lab.models import load_pair
from specdec_lab.models.stand_ins import stand_in_dirs
from specdec_lab.proof import mock

PROMPT = torch.tensor([1, 5, 7, 9, 5, 7])
N_NEW = 12
FAMILY = {"lean": "llama", "hf": "gpt2"}  # gpt2 runs on transformers' forward by default
EVENTS_PER_FORWARD = {"mock": 1, "lean": 2 * 2 + 1, "hf": 2 + 1}  # the targets have 2 layers


class Stop(KeyboardInterrupt):
    """What a notebook's stop button raises, at a chosen point."""


@pytest.fixture(scope="module", params=["mock", "lean", "hf"])
def runtime(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def models(runtime):
    if runtime == "mock":
        target = mock.MockLM(vocab_size=16, seed=0)
        return target, mock.MockDraft(target, quality=0.7)
    target, draft = stand_in_dirs(FAMILY[runtime])
    pair = load_pair(target=str(target), draft=str(draft), device="cpu")
    return pair.target, pair.draft


@contextlib.contextmanager
def stop_at(n: int, runtime: str, models, monkeypatch):
    """Raise `Stop` at the n-th forward event of either model (1-based) while inside."""
    seen = [0]

    def tick() -> None:
        seen[0] += 1
        if seen[0] == n:
            raise Stop(f"stopped at event {n}")

    with monkeypatch.context() as patch:
        if runtime == "mock":
            for model in models:
                real = model.logits
                patch.setattr(model, "logits", lambda ids, real=real: (tick(), real(ids))[1])
        elif runtime == "lean":
            real = llama._rms_norm
            patch.setattr(llama, "_rms_norm", lambda *a: (tick(), real(*a))[1])
        else:
            hooks = [
                module.register_forward_hook(lambda *_: tick())
                for model in models
                for module in (*model.transformer.h, model.lm_head)
            ]
        try:
            yield seen
        finally:
            if runtime == "hf":
                for hook in hooks:
                    hook.remove()
    assert seen[0] >= n, f"only {seen[0]} events: the stop at {n} never came"


def _open(model, runtime: str) -> sessions.Session:
    return sessions.open_session(model, runtime="auto" if runtime == "mock" else runtime)


def _run(method: str, target, draft, temperature: float):
    settings = dict(temperature=temperature, generator=torch.Generator().manual_seed(7))
    if method == "autoregressive":
        return decoding.autoregressive_generate(target, PROMPT, N_NEW, **settings).tokens
    if method == "tree":
        return tree.tree_speculative_generate(
            target, draft, PROMPT, N_NEW, (2, 1), **settings
        ).tokens
    return decoding.speculative_generate(target, draft, PROMPT, N_NEW, 3, **settings).tokens


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("method", ["speculative", "autoregressive", "tree"])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 11])
def test_a_rerun_after_a_stop_equals_a_fresh_run(
    runtime, models, monkeypatch, method, n, temperature
) -> None:
    """Stopped at event n, the same open sessions rerun to the tokens of a fresh run."""
    reference = _run(method, *models, temperature)
    opened = [_open(m, runtime) for m in models]
    with stop_at(n, runtime, models, monkeypatch), pytest.raises(Stop):
        _run(method, *opened, temperature)
    assert torch.equal(_run(method, *opened, temperature), reference)


def test_a_stop_between_the_forward_and_the_rollback(runtime, models, monkeypatch) -> None:
    """Stopped in the verifier, after the target scored the drafts and before either cache
    was rolled back, the next call still starts afresh."""
    reference = _run("speculative", *models, 1.0)
    opened = [_open(m, runtime) for m in models]
    calls, real = [0], decoding.verify_on_device

    def verify(*args):
        calls[0] += 1
        if calls[0] == 2:
            raise Stop("stopped in the verifier")
        return real(*args)

    with monkeypatch.context() as patch, pytest.raises(Stop):
        patch.setattr(decoding, "verify_on_device", verify)
        _run("speculative", *opened, 1.0)
    assert torch.equal(_run("speculative", *opened, 1.0), reference)


def test_a_session_resumes_from_its_cache_after_a_stop(runtime, models, monkeypatch) -> None:
    """Stopped at any point of a forward, a session still holds the tokens it held before it,
    in every layer, and then scores the sequence as a fresh session does."""
    target = models[0]
    ids = torch.arange(10) % 16
    fresh = _open(target, runtime)
    fresh.logits(ids[:6])
    expected = fresh.logits(ids)  # (4, V)
    for n in range(1, EVENTS_PER_FORWARD[runtime] + 1):
        session = _open(target, runtime)
        session.logits(ids[:6])
        with stop_at(n, runtime, (target,), monkeypatch), pytest.raises(Stop):
            session.logits(ids)
        assert session.cached == 6
        if runtime == "hf":
            assert {layer.get_seq_length() for layer in session.cache.layers} == {6}
        assert torch.equal(session.logits(ids), expected)
