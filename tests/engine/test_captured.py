"""The captured runtime (`sessions.CapturedSession`, `llama.LeanLlama.forward_static`) on the CPU.

A CUDA graph replays recorded kernels on recorded addresses, with every Python integer frozen at
its capture-time value. The CPU twin of that capture ("trace", `make_fx`) freezes integers and
refuses host reads the same way, so these tests catch, on the CPU, a forward that a CUDA graph
would silently get wrong: each replayed step's tokens and logits are compared with the eager
lean forward's, over runs with rejections, trees, rollbacks and a growing cache, and a capture
that bakes the cache length in is shown to fail that comparison. The simulated accelerator's
one-sync-per-step tests run the captured runtime too (tests/engine/test_simulated_device.py).
"""

import functools
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch._dynamo.testing import CompileCounter
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

from specdec_lab import data, decoding, models, tree
from specdec_lab.engine import capture, llama, sessions

RELATIVE = 1e-5  # float32: the same kernels on the same numbers, in one summation order or two
needs_embedded = pytest.mark.skipif(
    not (data.MODELS_DIR / "target" / "config.json").exists(), reason="embedded pair not trained"
)


@pytest.fixture(scope="module")
def pair():
    """The course's trained pair, in float32: greedy and sampled runs with real rejections."""
    return models.load_pair("embedded", device="cpu", dtype=torch.float32)


@pytest.fixture(scope="module")
def prompt(pair):
    return pair.encode("def fibonacci(n):\n    ")


def _recording(session, log: list) -> sessions.Session:
    """`session`, with every logits it returns appended to `log` (as (method, tensor))."""
    for name in ("logits", "tree_logits"):
        real = getattr(session, name)

        @functools.wraps(real)
        def spy(*args, _real=real, _name=name, **kwargs):
            out = _real(*args, **kwargs)
            log.append((_name, out.clone()))
            return out

        setattr(session, name, spy)
    return session


def _run(pair, prompt, runtime, method="chain", temperature=0.0, session_class=None):
    """One generation of 48 tokens with both models on `runtime`: (tokens, logits log, target
    session, draft session)."""
    log: list = []
    open_ = session_class or functools.partial(sessions.open_session, runtime=runtime)
    target = _recording(open_(pair.target, pair.vocab_size), log)
    draft = _recording(open_(pair.draft, pair.vocab_size), log)
    generate, shape = {
        "chain": (decoding.speculative_generate, 4),
        "tree": (tree.tree_speculative_generate, (3, 2, 1)),
    }[method]
    out = generate(
        target,
        draft,
        prompt,
        48,
        shape,
        temperature=temperature,
        generator=torch.Generator().manual_seed(0),
    )
    return out, log, target, draft


def _first_mismatch(eager, captured) -> str | None:
    """Where two runs' tokens or logits part (beyond float32 rounding), or None."""
    (a, log_a, *_), (b, log_b, *_) = eager, captured
    if not torch.equal(a.tokens, b.tokens):
        return f"tokens differ: {a.tokens.tolist()} against {b.tokens.tolist()}"
    if len(log_a) != len(log_b):
        return f"{len(log_a)} forwards against {len(log_b)}"
    for i, ((name, x), (_, y)) in enumerate(zip(log_a, log_b, strict=True)):
        if x.shape != y.shape or (x - y).abs().max() > RELATIVE * x.abs().max():
            return f"forward {i} ({name}): logits differ by {(x - y).abs().max():.3g}"
    return None


@needs_embedded
@pytest.mark.parametrize("method", ["chain", "tree"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_replayed_steps_equal_the_eager_forward(pair, prompt, method, temperature) -> None:
    """Every token and every logit of a 48-token run, through replayed graphs, equals the eager
    lean forward's: at least 20 target steps, rejections and rollbacks among them."""
    eager = _run(pair, prompt, "lean", method, temperature)
    captured = _run(pair, prompt, "captured", method, temperature)
    assert _first_mismatch(eager, captured) is None, _first_mismatch(eager, captured)
    out, _, target, draft = captured
    steps = len(out.stats.accepted)
    gamma = len(out.stats.steps[0].draft_tokens)
    assert steps >= 10 and any(n < gamma for n in out.stats.accepted), out.stats.accepted
    assert (target.runtime, draft.runtime) == ("captured", "captured")
    assert target.backend == "trace" and draft.replays
    if method == "chain":  # the draft's one-token forward and the target's verify
        assert (False, 1) in draft.replays and (False, gamma + 1) in target.replays
    else:  # the tree's levels
        assert any(tree_ for tree_, _ in target.replays), target.replays.keys()


class _LengthBaking(sessions.CapturedSession):
    """What a naive capture does: record the eager forward, whose slice bounds are the cache
    length at capture time, as Python integers."""

    def _static_forward(self, tokens, slots, *tree):
        hidden = self.lean.forward(tokens, self.cache)
        self.cache.length -= tokens.shape[0]  # `_forward` moves the length after a replay
        return (hidden,)


@needs_embedded
def test_a_capture_that_bakes_the_cache_length_in_fails_the_comparison(pair, prompt) -> None:
    eager = _run(pair, prompt, "lean", temperature=1.0)
    baking = _run(pair, prompt, "captured", temperature=1.0, session_class=_LengthBaking)
    assert baking[2].replays, "the naive capture was not replayed"
    assert _first_mismatch(eager, baking) is not None


def _tiny(config, seed: int = 0):
    torch.manual_seed(seed)
    config.initializer_range = 0.3
    return AutoModelForCausalLM.from_config(config).eval()


SMALL = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_attention_heads=4)
TINY = {
    "llama-gqa": LlamaConfig(**SMALL, num_key_value_heads=2, num_hidden_layers=2),
    "qwen2-bias": Qwen2Config(
        **SMALL, num_key_value_heads=2, num_hidden_layers=2, tie_word_embeddings=False
    ),
}


@pytest.mark.parametrize("family", sorted(TINY))
def test_the_static_forward_equals_the_eager_one_over_chunks_rollback_and_growth(family) -> None:
    """Prefill, chunks of 1, 3 and 5, a rollback and its re-feed, then single tokens past the
    first chunk of capacity (the cache grows, so the graphs are captured again): the captured
    session's logits equal the eager lean session's at every call."""
    model = _tiny(TINY[family])
    ids = torch.randint(96, (300,), generator=torch.Generator().manual_seed(1))
    lean, captured = (sessions.open_session(model, runtime=rt) for rt in ("lean", "captured"))
    ends = [20, 21, 24, 29, 30, ("crop", 22), 25, 26, *range(27, 300)]
    capacities, replayed = set(), set()
    for end in ends:
        if isinstance(end, tuple):
            lean.crop(end[1])
            captured.crop(end[1])
            continue
        x, y = lean.logits(ids[:end]), captured.logits(ids[:end])
        assert (x - y).abs().max() <= RELATIVE * x.abs().max(), end
        capacities.add(captured.cache.capacity)
        replayed |= set(captured.replays)
    assert capacities == {256, 512} and captured.runtime == "captured"
    assert {(False, 1), (False, 3), (False, 5)} <= replayed


def test_a_tree_mask_is_honoured_in_the_replay() -> None:
    """A tree's nodes see only their ancestors: the captured tree forward's rows equal the
    eager lean forward's for two trees of one shape in a row (one capture, two replays)."""
    model = _tiny(TINY["llama-gqa"])
    ids = torch.randint(96, (12,), generator=torch.Generator().manual_seed(2))
    parents = [-1, -1, 0, 0, 1]
    for seed in (3, 4):
        nodes = torch.randint(96, (5,), generator=torch.Generator().manual_seed(seed))
        rows = []
        for runtime in ("lean", "captured"):
            session = sessions.open_session(model, runtime=runtime)
            session.logits(ids)  # the prefix, then a tree after ids[-1]
            rows.append(session.tree_logits(ids, nodes, parents))
        assert (rows[0] - rows[1]).abs().max() <= RELATIVE * rows[0].abs().max()


def _in_a_fresh_process(name: str) -> None:
    """Run this module's function `name` in a new interpreter: TorchDynamo fails in a process
    where the simulated accelerator has renamed PyTorch's PrivateUse1 backend (another test's)."""
    code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
    code += f"import test_captured; test_captured.{name}()"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]


def test_the_static_forward_compiles_as_one_graph_with_no_recompile_per_step() -> None:
    """`torch.compile(fullgraph=True)` raises at any graph break; three steps at three cache
    lengths compile once, since the lengths are device tensors, not guarded integers."""
    _in_a_fresh_process("_compiles_once")


def test_the_eager_forward_does_not_compile_without_recompiling() -> None:
    """Why `forward_static` exists: under `torch.compile` the eager forward guards on the cache
    length, a Python integer, so each step's new length compiles again."""
    _in_a_fresh_process("_recompiles")


def _compiles_once() -> None:
    model = _tiny(TINY["llama-gqa"])
    lean = llama.LeanLlama(model, packed=False)
    cache = lean.new_cache(64)
    lean.prepare_static(cache.capacity)
    ids = torch.randint(96, (8,), generator=torch.Generator().manual_seed(5))
    frames = CompileCounter()  # backend "eager" that counts frames
    compiled = torch.compile(lean.forward_static, fullgraph=True, backend=frames, dynamic=False)
    with torch.inference_mode():
        lean.forward_static(ids[:5], torch.arange(5), cache)
        for i in (5, 6, 7):
            got = compiled(ids[i : i + 1], torch.tensor([i]), cache)
            want = lean.forward_static(ids[i : i + 1], torch.tensor([i]), cache)
            assert torch.allclose(got, want, rtol=RELATIVE, atol=1e-6)
    assert frames.frame_count == 1
    torch._dynamo.reset()


def _recompiles() -> None:
    model = _tiny(TINY["llama-gqa"])
    lean = llama.LeanLlama(model, packed=False)
    cache = lean.new_cache(64)
    ids = torch.randint(96, (8,), generator=torch.Generator().manual_seed(5))
    frames = CompileCounter()
    compiled = torch.compile(lean.forward, backend=frames, dynamic=False)
    with torch.inference_mode():
        lean.forward(ids[:5], cache)
        for i in (5, 6, 7):
            compiled(ids[i : i + 1], cache)
    assert frames.frame_count >= 2
    torch._dynamo.reset()


def test_capture_happens_before_the_session_clock_starts(monkeypatch) -> None:
    model = _tiny(TINY["llama-gqa"])
    events = []
    session = sessions.open_session(model, runtime="captured")
    real_start, real_replay = session._start, capture.Replay.__init__
    monkeypatch.setattr(session, "_start", lambda: (events.append("clock"), real_start())[1])
    monkeypatch.setattr(
        capture.Replay,
        "__init__",
        lambda self, *a, **k: (events.append("capture"), real_replay(self, *a, **k))[1],
    )
    ids = torch.randint(96, (10,), generator=torch.Generator().manual_seed(6))
    for end in (8, 9, 10):
        session.logits(ids[:end])
    assert events == ["capture", "clock", "capture", "clock", "clock"]  # k = 8, 1, then 1 again
    assert session.capture_seconds > 0


def test_a_failed_capture_warns_once_and_runs_the_eager_forward(monkeypatch) -> None:
    model = _tiny(TINY["llama-gqa"])
    ids = torch.randint(96, (12,), generator=torch.Generator().manual_seed(7))
    reference = decoding.autoregressive_generate(model, ids, 6, temperature=0, runtime="lean")

    def refuse(self, *args, **kwargs):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(capture.Replay, "__init__", refuse)
    session = sessions.open_session(model, runtime="captured")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = decoding.autoregressive_generate(session, ids, 6, temperature=0)
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and "not permitted when stream is capturing" in messages[0]
    assert "eager lean forward" in messages[0] and session.runtime == "lean"
    assert torch.equal(out.tokens, reference.tokens)


def test_auto_replays_graphs_on_cuda_only(monkeypatch) -> None:
    model = _tiny(TINY["llama-gqa"])
    assert sessions.runtime_of(model) == "lean"  # the CPU keeps the eager lean forward
    assert sessions.runtime_of(model, "captured") == "captured"

    class OnCuda:  # what `_hf_session_class` reads of a model on a CUDA device
        device = torch.device("cuda")

    monkeypatch.setattr(sessions, "lean_support", lambda model: None)
    assert sessions._hf_session_class(OnCuda(), "auto") is sessions.CapturedSession
    assert sessions._hf_session_class(OnCuda(), "lean") is sessions.LeanSession
    assert sessions._hf_session_class(OnCuda(), "hf") is sessions.HFSession
