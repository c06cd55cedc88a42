"""The package on a simulated accelerator (tests/simulated_device.py): where tensors live, which
generator draws them, and how often the host waits for the device."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import simulated_device
import torch
from simulated_device import DEVICE, DeviceTensor, Simulation

from specdec_lab import decoding, drafters, env, heads, sampling, tree, verify
from specdec_lab.engine import sessions
from specdec_lab.measure import bench
from specdec_lab.models import load_pair, pairs, save_tiny_pair

PROMPT = torch.tensor([1, 5, 7, 9, 5, 7])
SAMPLED = {"temperature": 1.0, "top_k": 50, "top_p": 0.9}


# ------------------------------------------------------------------ the simulator has power
def test_the_simulation_enforces_one_device_and_counts_syncs() -> None:
    sim = Simulation()
    with sim.active():
        x = torch.zeros(3, device=DEVICE)
        assert isinstance(x, DeviceTensor) and x.device == DEVICE
        with pytest.raises(RuntimeError, match="same device"):
            x + torch.ones(3)  # a host tensor in a device op
        assert sim.syncs == 0
        y = x + torch.tensor(2.0)  # a 0-d host scalar is allowed, as on CUDA
        assert y.tolist() == [2.0, 2.0, 2.0] and sim.syncs == 1
        bool(y.sum() > 0), int(y[0]), float(y[1]), y.max().item(), y.cpu()
        assert sim.syncs == 6
        torch.ones(2).to(DEVICE)  # a blocking copy to the device waits too
        torch.ones(2).to(DEVICE, non_blocking=True)
        assert sim.syncs == 7
        with pytest.raises(RuntimeError, match="generator"):
            torch.rand(3, generator=torch.Generator().manual_seed(0), device=DEVICE)
        assert isinstance(torch.rand(3, generator=sim.generator(0), device=DEVICE), DeviceTensor)
        with pytest.raises(RuntimeError, match="generator"):
            torch.rand(3, generator=sim.generator(0))  # a device generator drawing on the host


def test_models_load_inside_the_simulation_as_outside_it(tmp_path) -> None:
    """transformers builds models on "meta" and fills buffers it does not load (RoPE's inv_freq)
    itself: inside the simulation both must happen as outside it. (A simulator that swapped
    `torch.tensor` for a wrapper left inv_freq uninitialised, here and in every later load, and
    the lean forward's logits came back NaN.)"""
    outside = load_pair("embedded", "cpu").target.model.rotary_emb.inv_freq
    sim = Simulation()
    with sim.active():
        with torch.device("meta"):  # the memory guard's way of building a model without weights
            assert torch.zeros(3).device.type == "meta"
        model = pairs.load_model("target", "cpu")
        assert torch.equal(model.model.rotary_emb.inv_freq, outside)
        sim.to_device(model)
        assert isinstance(model.model.rotary_emb.inv_freq, DeviceTensor)
    assert torch.equal(pairs.load_model("target", "cpu").model.rotary_emb.inv_freq, outside)


def test_a_model_on_the_device_changes_dtype_with_its_values() -> None:
    """`module.to(dtype)` on the device sets each parameter's `.data`: the values must follow
    (a wrapper that kept its float32 values behind a bfloat16 face failed gpu_check's bench)."""
    sim = Simulation()
    with sim.active():
        layer = sim.to_device(torch.nn.Linear(4, 3)).to(torch.bfloat16)
        assert layer.weight.elem.dtype == torch.bfloat16
        x = torch.ones(4, dtype=torch.bfloat16).to(DEVICE)
        assert layer(x).dtype == torch.bfloat16


def test_the_mps_flavour_refuses_float64_on_the_device() -> None:
    sim = Simulation(flavour="mps")
    with sim.active():
        x = torch.zeros(3, device=DEVICE)
        assert isinstance(x, DeviceTensor) and sampling.cdf_dtype(x.device) == torch.float32
        for make in (
            lambda: torch.zeros(3, device=DEVICE, dtype=torch.float64),
            lambda: x.double(),
            lambda: x.cumsum(0, dtype=torch.float64),
            lambda: torch.ones(3, dtype=torch.float64).to(DEVICE),
        ):
            with pytest.raises(TypeError, match="float64"):
                make()
        assert torch.ones(3, dtype=torch.float64).sum().dtype == torch.float64  # the host has it
    assert sampling.cdf_dtype(DEVICE) == torch.float64  # only while the MPS flavour is on


# ------------------------------------------------------------------ the loops on the device
@pytest.fixture(scope="module")
def pair_dirs(tmp_path_factory):
    return save_tiny_pair("llama", tmp_path_factory.mktemp("pair"))


@pytest.fixture()
def pair(pair_dirs):
    """A fresh tiny Llama pair on the CPU (each test moves its own to the device)."""
    return load_pair(target=str(pair_dirs[0]), draft=str(pair_dirs[1]), device="cpu")


@pytest.fixture(scope="module")
def reference(pair_dirs):
    """Greedy tokens on the CPU."""
    cpu = load_pair(target=str(pair_dirs[0]), draft=str(pair_dirs[1]), device="cpu")
    return decoding.autoregressive_generate(
        cpu.target, PROMPT, 16, temperature=0, vocab_size=cpu.vocab_size
    ).tokens.tolist()


@pytest.fixture()
def sim(pair, reference):
    sim = Simulation()
    with sim.active():
        sim.to_device(pair.target)
        sim.to_device(pair.draft)
        yield sim


def _generator(sim: Simulation, kind: str):
    return {"none": None, "host": torch.Generator().manual_seed(0), "device": sim.generator(0)}[
        kind
    ]


def _generate(generate, shape, pair, sim, kind: str, runtime: str, temperature: float):
    """16 tokens after PROMPT with `generate` (a chain's γ or a tree's branching: `shape`)."""
    sampling = SAMPLED if temperature else {"temperature": 0.0}
    return generate(
        pair.target,
        pair.draft,
        PROMPT,
        16,
        shape,
        generator=_generator(sim, kind),
        vocab_size=pair.vocab_size,
        runtime=runtime,
        **sampling,
    )


def _steps_with_syncs(sim, monkeypatch) -> list[int]:
    """Host syncs of every speculative step of the next generation, step by step."""
    per_step, real = [], decoding.speculative_step

    def counted(*args, **kwargs):
        before = sim.syncs
        out = real(*args, **kwargs)
        per_step.append(sim.syncs - before)
        return out

    monkeypatch.setattr(decoding, "speculative_step", counted)
    return per_step


@pytest.mark.parametrize("runtime", ["lean", "captured", "hf"])
@pytest.mark.parametrize("kind", ["none", "host", "device"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_speculative_decoding_syncs_once_per_step(
    pair, reference, sim, monkeypatch, runtime, kind, temperature
) -> None:
    per_step = _steps_with_syncs(sim, monkeypatch)
    out = _generate(decoding.speculative_generate, 3, pair, sim, kind, runtime, temperature)
    assert per_step and set(per_step) == {1}, per_step
    assert type(out.tokens) is torch.Tensor, "Generation.tokens comes back on the host"
    if temperature == 0:
        assert out.tokens.tolist() == reference


@pytest.mark.parametrize("kind", ["none", "host", "device"])
def test_autoregressive_decoding_never_waits_without_an_eos(pair, sim, kind) -> None:
    counts = []
    for n in (4, 12):
        before = sim.syncs
        out = decoding.autoregressive_generate(
            pair.target, PROMPT, n, generator=_generator(sim, kind), vocab_size=pair.vocab_size
        )
        counts.append(sim.syncs - before)
        assert type(out.tokens) is torch.Tensor and out.tokens.shape == (n,)
    assert counts[0] == counts[1], f"syncs grow with the tokens: {counts}"


def test_autoregressive_decoding_waits_once_per_token_for_its_eos(pair, sim) -> None:
    counts = []
    for n in (4, 12):
        before = sim.syncs
        decoding.autoregressive_generate(
            pair.target, PROMPT, n, temperature=0, eos_token_id=10**6, vocab_size=pair.vocab_size
        )
        counts.append(sim.syncs - before)
    assert counts[1] - counts[0] == 8


@pytest.mark.parametrize("kind", ["none", "host", "device"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_every_drafter_runs_on_the_device(pair, reference, sim, kind, temperature) -> None:
    vocab = pair.vocab_size
    sampling = SAMPLED if temperature else {"temperature": 0.0}

    def model_drafter(**kw):
        return drafters.ModelDrafter(sessions.open_session(pair.draft, vocab), **kw)

    runs = {
        "lookup": (pair.target, drafters.PromptLookupDrafter(vocab)),
        "lookup, else draft": (pair.target, drafters.LookupThenModel(model_drafter())),
        "heuristic γ": (pair.target, drafters.HeuristicGamma(model_drafter())),
        "confidence": (pair.target, model_drafter(confidence_threshold=0.3)),
    }
    for name, (target, drafter) in runs.items():
        out = decoding.speculative_generate(
            target, drafter, PROMPT, 16, 4, generator=_generator(sim, kind), **sampling
        )
        assert type(out.tokens) is torch.Tensor, name
        if temperature == 0:
            assert out.tokens.tolist() == reference, name


def _chain_steps(sim, monkeypatch) -> list[tuple[int, int, int]]:
    """(γ asked for, tokens drafted, host syncs) of every speculative step of the next
    generation."""
    per_step, real = [], decoding.speculative_step

    def counted(target, drafter, ids, gamma, *args, **kwargs):
        before = sim.syncs
        ids, step = real(target, drafter, ids, gamma, *args, **kwargs)
        per_step.append((gamma, len(step.draft_tokens), sim.syncs - before))
        return ids, step

    monkeypatch.setattr(decoding, "speculative_step", counted)
    return per_step


DRAFTER_SYNCS = {  # host syncs of step i, the verifier's included (the drafters' docstrings)
    "lookup": lambda i, gamma, drafted: 1 + (i == 0),  # the host mirror reads the prompt once
    "lookup, else draft": lambda i, gamma, drafted: 1 + (i == 0),
    "heuristic γ": lambda i, gamma, drafted: 1,
    "confidence": lambda i, gamma, drafted: 1 + min(drafted, max(gamma - 1, 0)),  # per decision
}


@pytest.mark.parametrize("kind", ["none", "host", "device"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("name", list(DRAFTER_SYNCS))
def test_every_drafter_syncs_as_its_docstring_says(
    pair, reference, sim, monkeypatch, kind, temperature, name
) -> None:
    vocab = pair.vocab_size
    sampling = SAMPLED if temperature else {"temperature": 0.0}

    def model_drafter(**kw):
        return drafters.ModelDrafter(sessions.open_session(pair.draft, vocab), **kw)

    drafter = {
        "lookup": lambda: drafters.PromptLookupDrafter(vocab),
        "lookup, else draft": lambda: drafters.LookupThenModel(model_drafter()),
        "heuristic γ": lambda: drafters.HeuristicGamma(model_drafter()),
        "confidence": lambda: model_drafter(confidence_threshold=0.3),
    }[name]()
    per_step = _chain_steps(sim, monkeypatch)
    out = decoding.speculative_generate(
        pair.target, drafter, PROMPT, 16, 4, generator=_generator(sim, kind), **sampling
    )
    assert per_step
    for i, (gamma, drafted, syncs) in enumerate(per_step):
        assert syncs == DRAFTER_SYNCS[name](i, gamma, drafted), per_step
    if name == "confidence":  # the stop is exercised: some step stops early
        assert any(0 < d < g for g, d, _ in per_step), per_step
    if temperature == 0:
        assert out.tokens.tolist() == reference


@pytest.mark.parametrize("kind", ["none", "host", "device"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_token_trees_and_the_head_run_on_the_device(
    pair, reference, sim, kind, temperature
) -> None:
    sampling = SAMPLED if temperature else {"temperature": 0.0}
    out = tree.tree_speculative_generate(
        pair.target,
        pair.draft,
        PROMPT,
        16,
        (2, 1, 1),
        generator=_generator(sim, kind),
        vocab_size=pair.vocab_size,
        **sampling,
    )
    assert type(out.tokens) is torch.Tensor
    if temperature == 0:
        assert out.tokens.tolist() == reference
    head = heads.DraftHead(heads.HeadConfig(pair.target.config.hidden_size))
    sim.to_device(head)
    session, drafter = heads.head_drafter(pair.target, head, pair.vocab_size)
    out = decoding.speculative_generate(
        session, drafter, PROMPT, 16, 3, generator=_generator(sim, kind), **sampling
    )
    if temperature == 0:
        assert out.tokens.tolist() == reference


def _tree_steps_with_syncs(sim, monkeypatch) -> list[tuple[int, int, int]]:
    """(depth, host syncs, of which inside the sessions' tree methods) of every token-tree step
    of the next generation."""
    per_step, inside, real = [], [0], tree.tree_step

    def counted(target, draft, ids, branching, *args, **kwargs):
        before, before_inside = sim.syncs, inside[0]
        out = real(target, draft, ids, branching, *args, **kwargs)
        per_step.append((len(branching), sim.syncs - before, inside[0] - before_inside))
        return out

    def in_session(method):
        def wrapped(*args, **kwargs):
            before = sim.syncs
            out = method(*args, **kwargs)
            inside[0] += sim.syncs - before
            return out

        return wrapped

    for cls in (sessions.LeanSession, sessions.HFSession):
        for name in ("tree_logits", "keep_branch"):
            monkeypatch.setattr(cls, name, in_session(getattr(cls, name)))
    monkeypatch.setattr(tree, "tree_step", counted)
    return per_step


@pytest.mark.parametrize("runtime", ["lean", "hf"])
@pytest.mark.parametrize("where", ["host", "device"])
def test_an_out_of_range_id_is_refused_before_any_kernel_sees_it(
    pair, sim, monkeypatch, runtime, where
) -> None:
    """On CUDA an embedding lookup of an id past the table is a device-side assert that ends the
    process: the id is refused on the host, before a forward, and the host waits for the device
    only to copy a prompt that lives there (once per call, not per step)."""
    ops, real = [], simulated_device._dispatch
    monkeypatch.setattr(
        simulated_device,
        "_dispatch",
        lambda s, func, *a: (ops.append(str(func)), real(s, func, *a))[1],
    )
    opened = [sessions.open_session(m, pair.vocab_size, runtime) for m in (pair.target, pair.draft)]
    good = PROMPT.to(DEVICE) if where == "device" else PROMPT
    bad = torch.cat([good, good.new_full((1,), pair.vocab_size)])
    ops.clear()
    syncs = sim.syncs
    with pytest.raises(ValueError, match=f"token id {pair.vocab_size}, outside"):
        decoding.speculative_generate(*opened, bad, 8, 3, vocab_size=pair.vocab_size)
    assert [s.calls for s in opened] == [0, 0] and not [op for op in ops if "embedding" in op]
    assert (sim.syncs > syncs) == (where == "device")
    decoding.speculative_generate(*opened, good, 8, 3, vocab_size=pair.vocab_size)
    assert any("embedding" in op for op in ops)  # the same watch sees a forward's lookup


@pytest.mark.parametrize("runtime", ["lean", "captured", "hf"])
@pytest.mark.parametrize("kind", ["none", "host", "device"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("branching", [(2, 1, 1), (3, 2)])
def test_token_trees_sync_once_per_step(
    pair, reference, sim, monkeypatch, runtime, kind, temperature, branching
) -> None:
    """`tree.tree_step`'s docstring: one host sync per step (the verdict), none in the
    sessions (their masks and positions are copied without waiting)."""
    per_step = _tree_steps_with_syncs(sim, monkeypatch)
    out = _generate(
        tree.tree_speculative_generate, branching, pair, sim, kind, runtime, temperature
    )
    assert per_step
    assert {(syncs, in_sessions) for _, syncs, in_sessions in per_step} == {(1, 0)}, per_step
    if temperature == 0:
        assert out.tokens.tolist() == reference


def test_a_tree_rule_passed_in_runs_as_written(pair, sim, monkeypatch) -> None:
    """No identity test picks the path: `verify.multi_draft_sample` passed as the rule runs
    node by node on the host, with its own syncs, like any learner's rule."""
    per_step = _tree_steps_with_syncs(sim, monkeypatch)
    tree.tree_speculative_generate(
        pair.target,
        pair.draft,
        PROMPT,
        16,
        (2, 1, 1),
        temperature=1.0,
        generator=_generator(sim, "host"),
        vocab_size=pair.vocab_size,
        verify_siblings=verify.multi_draft_sample,
        runtime="lean",
    )
    assert max(syncs for _, syncs, _ in per_step) > 1, per_step


@pytest.fixture()
def mps(pair):
    """The pair on the MPS flavour of the simulator (no float64 on the device)."""
    sim = Simulation(flavour="mps")
    with sim.active():
        sim.to_device(pair.target)
        sim.to_device(pair.draft)
        yield sim


@pytest.mark.parametrize("kind", ["none", "host", "device"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_loops_run_on_mps_without_float64(pair, reference, mps, kind, temperature) -> None:
    """Every decoding loop on a device without float64: a float64 tensor there would raise."""
    sampling = SAMPLED if temperature else {"temperature": 0.0}
    vocab = pair.vocab_size
    runs = {
        "autoregressive": lambda g: decoding.autoregressive_generate(
            pair.target, PROMPT, 16, generator=g, vocab_size=vocab, **sampling
        ),
        "chain": lambda g: decoding.speculative_generate(
            pair.target, pair.draft, PROMPT, 16, 3, generator=g, vocab_size=vocab, **sampling
        ),
        "chain, hf": lambda g: decoding.speculative_generate(
            pair.target,
            pair.draft,
            PROMPT,
            16,
            3,
            generator=g,
            vocab_size=vocab,
            runtime="hf",
            **sampling,
        ),
        "lookup, else draft": lambda g: decoding.speculative_generate(
            pair.target,
            drafters.LookupThenModel(
                drafters.ModelDrafter(sessions.open_session(pair.draft, vocab))
            ),
            PROMPT,
            16,
            4,
            generator=g,
            **sampling,
        ),
        "tree": lambda g: tree.tree_speculative_generate(
            pair.target, pair.draft, PROMPT, 16, (3, 2), generator=g, vocab_size=vocab, **sampling
        ),
    }
    for name, run in runs.items():
        out = run(_generator(mps, kind))
        assert type(out.tokens) is torch.Tensor and out.tokens.shape == (16,), name
        if temperature == 0:
            assert out.tokens.tolist() == reference, name


def test_the_default_dtype_is_native_to_the_device(monkeypatch) -> None:
    assert env.default_dtype("cpu") == torch.float32
    assert env.default_dtype("mps") == torch.float16  # MPS: float16
    for native, dtype in ((True, torch.bfloat16), (False, torch.float16)):  # Ampere+ vs a T4
        monkeypatch.setattr(
            torch.cuda, "is_bf16_supported", lambda including_emulation, n=native: n
        )
        assert env.default_dtype("cuda") == dtype


def test_the_loops_clock_reads_cuda_events_once_not_per_region(monkeypatch) -> None:
    """Sessions and drafters time their forwards with `env.RegionTimer`: on CUDA, events that
    are read after one synchronize (perf_counter without a sync measured enqueue time)."""
    log = []

    class FakeEvent:
        def __init__(self, enable_timing: bool) -> None:
            self.t = None

        def record(self) -> None:
            self.t = len(log)
            log.append("record")

        def synchronize(self) -> None:
            log.append("synchronize")

        def elapsed_time(self, end) -> float:  # milliseconds
            return 1000.0 * (end.t - self.t)

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    clock = env.RegionTimer("cuda")
    for _ in range(3):
        clock.stop(clock.start())
    assert "synchronize" not in log  # timing a region never waits for the device
    assert clock.seconds == 3.0 and log.count("synchronize") == 1
    assert clock.seconds == 3.0 and log.count("synchronize") == 1  # read once


def test_the_bench_runs_on_the_device(pair, sim) -> None:
    pair.device = DEVICE  # the pair's models were moved by the fixture
    cfg = dataclasses.replace(bench.QUICK, hf=True)
    rows, costs = bench.run_bench(pair, [torch.tensor([1, 2, 3, 4])], cfg, progress=False)
    methods = {r.method for r in rows}
    assert {"autoregressive (ours, lean)", "speculative γ=3 (ours, hf)"} <= methods
    assert any(m.startswith("tree ") for m in methods) and "HF generate (greedy)" in methods
    assert all(r.mismatches == 0 for r in rows if r.temperature == 0)  # float32: exact
    assert set(costs) == {"lean", "hf"}


def test_the_memory_guard_counts_cached_blocks(monkeypatch) -> None:
    monkeypatch.delenv(env.FREE_MEMORY_GIB, raising=False)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (2 * 2**30, 80 * 2**30))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: 5 * 2**30)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: 1 * 2**30)
    assert env.free_memory("cuda") == 6 * 2**30  # the driver's free + the allocator's cached


def test_weights_load_straight_onto_an_accelerator(monkeypatch) -> None:
    """On an accelerator the weights go through `device_map` (never the whole model in host
    memory, then `.to`); on the CPU, plainly."""
    calls = []

    class Loaded(torch.nn.Module):
        def to(self, *args, **kwargs):
            raise AssertionError("the model was copied to the device after loading")

    def fake_load(kind, source, **kwargs):
        calls.append(kwargs)
        return Loaded()

    monkeypatch.setattr(pairs, "_load", fake_load)
    pairs._load_model("somewhere", torch.device("cuda", 0), torch.float16)
    pairs._load_model("somewhere", torch.device("cpu"), torch.float32)
    assert calls == [{"dtype": torch.float16, "device_map": "cuda:0"}, {"dtype": torch.float32}]
    # Without accelerate (a GPU machine set up without it), the model loads, then moves.
    monkeypatch.setattr(pairs.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(AssertionError, match="copied to the device"):
        pairs._load_model("somewhere", torch.device("cuda", 0), torch.float16)


# ------------------------------------------------------------------ a whole process on it
SIM_MAIN = Path(__file__).resolve().parents[1] / "sim_main.py"


def test_the_demo_runs_on_the_simulated_accelerator() -> None:
    """`python -m specdec_lab demo` with the process on the simulated accelerator
    (tests/sim_main.py): the pair lands on the device, and the greedy run still equals the
    target's own greedy output."""
    argv = ["demo", "--pair", "embedded", "--max-new-tokens", "12", "--no-color"]
    run = subprocess.run(
        [sys.executable, str(SIM_MAIN), *argv],
        capture_output=True,
        text=True,
        timeout=600,
        env=os.environ | {"OMP_NUM_THREADS": "1"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"torch.float32 on {DEVICE.type}" in run.stdout
    assert "identical to greedy target output  True" in run.stdout
    assert re.search(r"simulated accelerator: [1-9]\d* host syncs", run.stdout)
