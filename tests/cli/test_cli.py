"""The command-line entry points: demo and bench run end to end and print their summaries."""

import dataclasses
import math
import re
import subprocess
import sys

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specdec_lab import data, decoding, env, heads, models, theory
from specdec_lab.__main__ import main
from specdec_lab.data import MODELS_DIR
from specdec_lab.engine import sessions
from specdec_lab.measure import bench, records
from specdec_lab.measure import plan as course_plan
from specdec_lab.measure.bench_plan import Kind, Method, plan
from specdec_lab.measure.plan import Costs, Plan
from specdec_lab.models import Pair


def test_help(capsys) -> None:
    assert main(["--help"]) == 0
    assert "demo" in capsys.readouterr().out


def test_bench_runs_where_the_workshop_generator_cannot_import() -> None:
    """A GPU machine has torch and transformers but maybe no Jupyter: `bench` must not import
    the workshop generator (nbformat), as it did when the entry point imported every command."""
    code = (
        "import sys; sys.modules['nbformat'] = None; "  # `import nbformat` now raises
        "from specdec_lab.__main__ import main; sys.exit(main(['bench', '--help']))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "--dtype" in run.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_train_head_on_a_missing_gpu_says_so(tmp_path, capsys) -> None:
    text = tmp_path / "t.txt"
    text.write_text("def f():\n    return 1\n")
    argv = ["train-head", "--device", "cuda", "--online", "--text", str(text)]
    assert main([*argv, "--out", str(tmp_path / "h")]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_demo_on_mock_models(capsys) -> None:
    assert main(["demo", "--pair", "mock", "--max-new-tokens", "30", "--no-color"]) == 0
    out = capsys.readouterr().out
    assert "speedup" in out and "identical to greedy target output  True" in out
    sampled, greedy = out.split("--- greedy")  # the sampled run comes first
    assert "--- sampled at T = 0.7" in sampled and "tokens per target call" in greedy


@pytest.mark.skipif(not (MODELS_DIR / "head" / "head.json").exists(), reason="no embedded head")
def test_demo_plans_its_drafter_and_gamma_and_gamma_overrides(capsys) -> None:
    argv = ["demo", "--pair", "embedded", "--max-new-tokens", "24", "--no-color"]
    assert main([*argv, "--temperatures", "0"]) == 0
    out = capsys.readouterr().out
    assert "draft model: α ≈" in out and "draft head: α ≈" in out  # both candidates probed
    header = re.search(
        r"--- greedy: (draft model|draft head), (?:γ = (\d+)|tree (\(.*?\))) ---", out
    )
    planned = re.search(r"plan: (.+?), (?:γ = (\d+)|as the token tree (\(.*?\))), expected", out)
    if planned:  # the run is the plan's: a chain of γ, or a token tree (the plan may pick one)
        assert header.groups() == planned.groups()
    else:  # nothing expected to gain: the demo still shows γ = 1 of the draft model
        assert "plan: plain decoding" in out and header.groups() == ("draft model", "1", None)
    assert "speedup the plan expected" in out and "identical to greedy target output  True" in out
    assert main([*argv, "--temperatures", "0", "--gamma", "5"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"--- greedy: draft (model|head), γ = 5 ---", out)
    assert "[--gamma overrides γ]" in out


def test_a_one_token_demo_plans_on_a_longer_probe_and_names_no_alpha(capsys) -> None:
    """A one-token run drafts nothing: its plan probes PROBE_MIN tokens (a one-token probe has no
    α), and its summary says that nothing was drafted rather than printing α = nan."""
    argv = ["demo", "--pair", "embedded", "--max-new-tokens", "1", "--no-color"]
    assert main([*argv, "--temperatures", "0"]) == 0
    out = capsys.readouterr().out
    assert "probing α over 16 tokens (the run's 1 are too few)" in out
    assert re.search(r"acceptance rate alpha\s+none drafted", out)
    assert "nan" not in out and "plan's formula at this run's α" not in out


@pytest.mark.skipif(not (MODELS_DIR / "head" / "head.json").exists(), reason="no embedded head")
def test_demo_plans_the_dtype_where_the_pair_defaults_to_bfloat16(capsys, monkeypatch) -> None:
    # the embedded pair, as if it were smollm2-local on a CPU that computes bfloat16 natively
    monkeypatch.setattr(models.pairs, "pair_dtype", lambda name, device="cpu": torch.bfloat16)
    argv = ["demo", "--pair", "embedded", "--max-new-tokens", "12", "--no-color"]
    assert main([*argv, "--temperatures", "0"]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"  (bfloat16|float32): t\(1\) = ([\d.]+) ms, expected ([\d.]+)x", out)
    assert [dtype for dtype, _, _ in rows] == ["bfloat16", "float32"]
    rate = {dtype: float(x) / float(t1) for dtype, t1, x in rows}
    chosen = re.search(r"  (\w+): .*<- chosen", out).group(1)
    # rounding of the printed figures aside, the chosen dtype is the one expected to be fastest
    assert rate[chosen] >= 0.95 * max(rate.values())
    assert f"torch.{chosen} on " in out  # and the run's models are in it (any device)
    assert main([*argv, "--temperatures", "0", "--dtype", "bfloat16"]) == 0
    assert "<- chosen" not in capsys.readouterr().out  # --dtype overrides the plan


def _tiny_pair() -> Pair:
    config = LlamaConfig(
        vocab_size=32,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        bos_token_id=0,
        eos_token_id=None,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    target = LlamaForCausalLM(config).eval()
    draft = LlamaForCausalLM(config).eval()
    draft.load_state_dict(target.state_dict())  # a perfect draft: every token accepted
    return Pair("tiny", target, draft, None, 32, torch.device("cpu"))


def test_bench_table_on_a_tiny_pair() -> None:
    pair = _tiny_pair()
    rows, costs = bench.run_bench(pair, [torch.tensor([1, 2, 3])], bench.QUICK, progress=False)
    by_name = {r.method: r for r in rows}
    # Both runtimes decode, and the lean one is the reference for speedups.
    assert set(costs) == {"lean", "hf"} and all(c["c"] > 0 for c in costs.values())
    for rt in ("lean", "hf"):
        spec = by_name[f"speculative γ=3 (ours, {rt})"]
        assert spec.runtime == rt and spec.alpha == 1.0 and spec.tokens_per_call == 4.0
        assert spec.predicted is not None and spec.c > 0 and spec.verify_cost > 0
    assert by_name["autoregressive (ours, lean)"].speedup == 1.0
    sampled = [r for r in rows if r.temperature > 0]
    assert sorted({r.temperature for r in sampled}) == [0.7, 1.0]
    # per T: AR and speculative on each runtime; at T = 1 also prompt lookup, the heuristic γ
    # schedule, lookup-else-draft and the tree (no draft head: it belongs to the embedded target)
    assert len(sampled) == 2 * 4 + 4
    lookup = by_name["prompt lookup γ=4 (ours, lean)"]
    scheduled = by_name["heuristic γ≤10 (ours, lean)"]
    assert scheduled.alpha == 1.0 and scheduled.tokens_per_call > 4  # γ grows past 4
    assert lookup.tokens_per_call >= 1
    # the tree's shape is chosen from the measured verify curve; a perfect draft keeps all
    trees = [r for r in rows if r.method.startswith("tree ") and r.temperature == 0]
    assert len(trees) == 1 and re.fullmatch(r"tree \d(-\d)* \(ours, lean\)", trees[0].method)
    depth = trees[0].method.split()[1].count("-") + 1
    assert trees[0].tokens_per_call == 16 / math.ceil(16 / (depth + 1))
    assert all(r.alpha == 1.0 for r in sampled if r.gamma)  # a perfect draft, at any T
    assert all(r.mismatches == 0 for r in rows if r.temperature == 0)
    assert all(len(r.prompt_speedups) == 1 and 0 <= r.repeated_4grams <= 1 for r in rows)
    assert all(r.tokens_per_s == max(r.samples) for r in rows)  # the fastest repeat
    table = bench.format_table(rows, costs)
    assert all(r.method in table for r in rows) and "HF assisted" in table
    summary = bench.summarize(rows)
    assert set(summary) >= {"speedup_vs_autoregressive", "speedup_vs_hf_assisted"}
    assert {"speedup_T0.7", "speedup_T1", "ours_ar_vs_hf_generate"} <= set(summary)


def test_bench_guards_greedy_exactness_in_float32_only(monkeypatch) -> None:
    """A speculative decoder that changes the greedy output fails the bench in float32; in
    bfloat16 the bench records the mismatch and says why it does not fail."""
    real = bench.decoding.speculative_generate

    def off_by_one(*args, **kwargs):
        out = real(*args, **kwargs)
        out.tokens[-1] = (out.tokens[-1] + 1) % 32
        return out

    monkeypatch.setattr(bench.decoding, "speculative_generate", off_by_one)
    pair = _tiny_pair()
    cfg = bench.BenchConfig(gammas=(3,), max_new_tokens=8, repeats=1, n_prompts=1, hf=False)
    with pytest.raises(AssertionError, match="changed the greedy output in float32"):
        bench.run_bench(pair, [torch.tensor([1, 2, 3])], cfg, progress=False)
    pair.target.to(torch.bfloat16), pair.draft.to(torch.bfloat16)
    rows, _ = bench.run_bench(pair, [torch.tensor([1, 2, 3])], cfg, progress=False)
    # per runtime AR and speculative, then prompt lookup, heuristic γ, lookup-else-draft and the
    # (unpatched) tree
    assert [r.mismatches for r in rows if r.temperature == 0] == [0, 1, 0, 1, 1, 1, 1, 0]
    note = bench.reduced_precision_note(rows, pair.dtype)
    assert "speculative γ=3 (ours, lean) 1" in note and "asserted in float32 only" in note
    assert bench.reduced_precision_note(rows, torch.float32) is None


def test_bench_plan_carries_each_methods_temperature_and_kind() -> None:
    """Methods are data: temperature, γ, runtime and whether a method is ours come from the plan,
    not from its display name; the display names stay the ones the README's table reads."""
    methods = plan(_tiny_pair(), bench.QUICK)
    by_name = {m.name: m for m in methods}
    m = by_name["speculative γ=3 T=0.7 (ours, lean)"]
    assert (m.kind, m.temperature, m.gamma, m.runtime) == (Kind.SPECULATIVE, 0.7, 3, "lean")
    assert by_name["autoregressive (ours, hf)"].temperature == 0.0
    assert by_name["heuristic γ≤10 T=1 (ours, lean)"].kind is Kind.DRAFTER
    assert not by_name["HF assisted (default schedule)"].ours
    assert all(m.ours == ("(ours" in m.name) for m in methods)
    trees = [m for m in methods if m.kind is Kind.TREE]  # shaped once the chains ran
    assert [t.temperature for t in trees] == [0.0, 1.0] and all(t.branching is None for t in trees)


def _sessions_in(obj) -> list:
    """The sessions a maker's target or drafter runs on: itself, or those its drafter wraps."""
    if isinstance(obj, (sessions.MockSession, sessions.HFSession, sessions.LeanSession)):
        return [obj]
    inner = [getattr(obj, name, None) for name in ("session", "drafter", "target")]
    return [s for x in inner if x is not None for s in _sessions_in(x)]


@pytest.mark.parametrize("runtime", ["lean", "hf"])
def test_bench_makers_open_their_sessions_on_the_rows_runtime(runtime, tmp_path) -> None:
    """A row labelled "hf" runs on transformers' forward: every maker of the plan, the tree's
    and the draft head's included, opens the target and any draft model on the given runtime."""
    heads.save_head(heads.DraftHead(heads.HeadConfig(hidden_size=32)), tmp_path, {})
    pair = dataclasses.replace(_tiny_pair(), head_dir=tmp_path)
    makers = {m.name: m.make for m in plan(pair, bench.QUICK) if m.make is not None}
    assert {"tree (ours, lean)", "draft head γ=4 (ours, lean)"} <= set(makers)
    for name, make in makers.items():
        target, drafter = make(pair, runtime)
        assert [s.runtime for s in _sessions_in(target)] == [runtime], name
        assert all(s.runtime == runtime for s in _sessions_in(drafter)), name


def test_bench_row_takes_its_temperature_from_the_method() -> None:
    """A method named without "T=" still samples, and reports, at its own temperature."""
    pair, ids = _tiny_pair(), torch.tensor([1, 2, 3])
    cfg = bench.BenchConfig(max_new_tokens=8, repeats=1)
    plain = Method("plain", Kind.AUTOREGRESSIVE, temperature=0.7, runtime="hf")
    measured = bench.run_methods([plain], pair, [ids], cfg, progress=False)
    (row,) = bench.derive(measured, pair.dtype, reference="hf")
    assert row.method == "plain" and row.temperature == 0.7 and row.mismatches is None

    def decode(temperature: float) -> list[int]:
        gen = torch.Generator().manual_seed(cfg.seed)
        out = decoding.autoregressive_generate(
            pair.target, ids, 8, temperature=temperature, generator=gen, vocab_size=32, runtime="hf"
        )
        return out.tokens.tolist()

    ran = measured[0][1].outputs[0].tokens.tolist()
    assert ran == decode(0.7) != decode(0.0)


def test_bench_rate_is_the_fastest_repeat() -> None:
    """A method's tokens/s is its fastest repeat over all prompts, and each prompt's rate is its
    own fastest repeat, on the timing harness's clock (a fake one: seconds scripted per run)."""
    seconds = iter([100.0, 2.0, 2.0, 1.0, 1.5, 0.5, 3.0])  # the warm-up, then repeat by prompt
    now = [0.0]

    def run(ids: torch.Tensor, i: int) -> tuple[int, None]:
        now[0] += next(seconds)
        return 10, None

    prompts = [torch.tensor([1]), torch.tensor([2])]
    timed = bench.time_method(run, prompts, 3, "cpu", clock=lambda: now[0])
    assert timed.rates == pytest.approx([20 / 4, 20 / 2.5, 20 / 3.5])  # tokens/s per repeat
    assert timed.tokens_per_s == pytest.approx(8.0)  # not the median repeat (5.71)
    assert timed.prompt_rates == pytest.approx([10 / 0.5, 10 / 1.5])


def test_cli_reports_errors_in_one_line(capsys, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["demo", "--pair", "gpt2"]) == 2
    err = capsys.readouterr().err
    assert "unreachable" in err and "Traceback" not in err
    assert main(["bench", "--target", "only/target"]) == 2
    assert "needs draft= too" in capsys.readouterr().err


@pytest.mark.skipif(not (MODELS_DIR / "target" / "config.json").exists(), reason="no embedded pair")
def test_cli_memory_guard_refuses_in_one_line(capsys, monkeypatch) -> None:
    monkeypatch.setenv(env.FORCE_GPU_PATHS, "1")  # a GPU dry run: the guard runs on the CPU
    monkeypatch.setenv(env.FREE_MEMORY_GIB, "0.001")
    assert main(["bench", "--smoke"]) == 2  # refused before any weights are read
    err = capsys.readouterr().err
    assert "pair 'embedded'" in err and "GiB are free on cpu" in err and "\n" not in err.strip()


@pytest.mark.parametrize(
    "error",
    [
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        RuntimeError("boom"),
    ],
)
def test_cli_reports_out_of_memory_while_running_in_one_line(capsys, monkeypatch, error) -> None:
    """An OOM during generation (after the pair loaded) ends in one sentence, not a torch trace;
    any other RuntimeError is a bug and keeps its traceback."""

    def run_out(*args, **kwargs):
        raise error

    monkeypatch.setattr(models, "load_pair", run_out)
    if isinstance(error, torch.OutOfMemoryError):
        assert main(["bench", "--smoke"]) == 2
        err = capsys.readouterr().err.strip()
        assert "out of memory while running (CUDA out of memory." in err and "\n" not in err
    else:
        with pytest.raises(RuntimeError, match="boom"):
            main(["bench", "--smoke"])


def test_bench_markdown_renders_a_saved_record(tmp_path, capsys) -> None:
    pair = _tiny_pair()
    rows, costs = bench.run_bench(pair, [torch.tensor([1, 2, 3])], bench.QUICK, progress=False)
    record = bench.to_record(pair, bench.QUICK, rows, costs, bench.summarize(rows))
    path = records.save_results(tmp_path / "bench.json", record, "cpu")
    assert main(["bench", "--markdown", str(path)]) == 0
    table = capsys.readouterr().out
    for line in ("| autoregressive (ours) | lean | ", "| speculative (ours) | hf | ", "| tree "):
        assert line in table
    assert "**1.00x**" in table and "Isolated forwards on lean" in table
    assert "16 tokens, fastest of 1 repeat." in table
    saved = records.load_results(path)  # as saved before the bench took the fastest repeat:
    del saved["results"]["config"]["statistic"]
    assert "16 tokens, medians of 1." in bench.markdown_table(saved)


def test_bench_times_the_plans_choice_beside_its_prediction(tmp_path) -> None:
    """Each temperature's plan is a row of its own, after our other rows at that temperature: its
    drafter's chain at its γ, a token tree, or plain decoding. Its predicted column is the plan's
    expected speedup (a chain's over a whole call of the bench's length, the prompt's forward
    and the draft's start included), and the record keeps the plans."""
    pair = _tiny_pair()  # a perfect draft: every token accepted
    start = {"draft model": 0.5}
    costs = Costs((1.0, 1.1, 1.2, 1.3), {"draft model": 0.2}, 5.0, prefill=2.0, start=start)
    plans = {
        0.0: Plan("draft model", 2, 1.7, {"draft model": 1.0}, costs, 0.0),
        0.7: Plan(None, 0, 1.0, {"draft model": 0.1}, costs, 0.0),
        1.0: Plan("draft model", 2, 2.1, {"draft model": 1.0}, costs, 0.0, tree=(2, 1)),
    }
    ids = [torch.tensor([1, 2, 3])]
    rows, _ = bench.run_bench(pair, ids, bench.QUICK, progress=False, plans=plans)
    planned = [r for r in rows if r.kind == Kind.PLANNED]
    assert [r.method for r in planned] == [
        "planned: draft model γ=2 (ours, lean)",
        "planned: plain decoding T=0.7 (ours, lean)",
        "planned: draft model tree 2-1 T=1 (ours, lean)",
    ]
    call = plans[0.0].expected("draft model", 2, new_tokens=bench.QUICK.max_new_tokens)
    assert call == theory.run_speedup(3.0, 2, 0.2, 1.2, 16, 2.0, 0.5)  # α = 1: 3 tokens a round
    assert [r.predicted for r in planned] == [call, 1.0, 2.1]  # not the plan's 1.7 per round
    chain, plain, token_tree = planned
    assert chain.gamma == 2 and chain.tokens_per_call == 16 / math.ceil(16 / 3)
    assert chain.mismatches == 0 and chain.ratio == chain.speedup / call
    assert plain.tokens_per_call == 1.0 and plain.alpha is None and plain.temperature == 0.7
    assert token_tree.gamma is None and token_tree.tokens_per_call == 16 / math.ceil(16 / 3)
    for row in planned:
        later = rows[rows.index(row) + 1 :]
        assert all(r.temperature != row.temperature for r in later if Kind(r.kind).ours)
    summary = bench.summarize(rows)
    assert summary["planned_T1"] == token_tree.method
    assert summary["planned_measured_over_predicted_T1"] == token_tree.ratio
    record = bench.to_record(pair, bench.QUICK, rows, {}, summary, plans)
    assert record["plans"]["1"]["tree"] == (2, 1) and record["plans"]["0.7"]["drafter"] is None
    path = records.save_results(tmp_path / "bench.json", record, "cpu")
    assert "| planned: draft model γ=2 | lean | " in bench.markdown_table(
        records.load_results(path)
    )


@pytest.mark.skipif(not (MODELS_DIR / "head" / "head.json").exists(), reason="no embedded head")
def test_bench_plans_the_dtype_and_runs_the_plan(capsys, monkeypatch, tmp_path) -> None:
    # the embedded pair, as if it were smollm2-local on a CPU that computes bfloat16 natively
    monkeypatch.setattr(models.pairs, "pair_dtype", lambda name, device="cpu": torch.bfloat16)
    probed = []  # the prompts of each α probe: the bench's own, all of them
    real_probe = course_plan.probe
    monkeypatch.setattr(
        course_plan,
        "probe",
        lambda make, ids, *a, **k: probed.append(ids) or real_probe(make, ids, *a, **k),
    )
    out_json = tmp_path / "bench.json"
    argv = ["bench", "--pair", "embedded", "--smoke", "--no-hf", "--temperatures", "1"]
    assert main([*argv, "--out", str(out_json)]) == 0
    assert probed and all(
        isinstance(ids, list) and len(ids) == bench.QUICK.n_prompts for ids in probed
    )
    out = capsys.readouterr().out
    rows = re.findall(r"  (bfloat16|float32): t\(1\) = ([\d.]+) ms, expected ([\d.]+)x", out)
    assert [dtype for dtype, _, _ in rows] == ["bfloat16", "float32"]
    chosen = re.search(r"  (\w+): .*<- chosen", out).group(1)
    assert f"torch.{chosen} on " in out and "plan, greedy:" in out and "plan, T = 1:" in out
    saved = records.load_results(out_json)["results"]
    assert saved["dtype"] == chosen and set(saved["plans"]) == {"0", "1"}
    for t, planned in saved["plans"].items():
        (row,) = [
            r for r in saved["rows"] if r["kind"] == Kind.PLANNED and r["temperature"] == float(t)
        ]
        rebuilt = Plan(**{**planned, "costs": Costs(**planned["costs"])})
        want = planned["predicted"]  # plain decoding's 1, or a tree's per round
        if planned["drafter"] is not None and planned["tree"] is None:  # a chain: a whole call
            want = rebuilt.expected(
                planned["drafter"], planned["gamma"], new_tokens=bench.QUICK.max_new_tokens
            )
            assert want < planned["predicted"]  # the prompt's forward is paid by both
        assert row["predicted"] == pytest.approx(want)
        assert row["method"].startswith(f"planned: {planned['drafter'] or 'plain decoding'}")
    assert main([*argv, "--no-plan", "--out", str(out_json)]) == 0
    assert "plan," not in capsys.readouterr().out
    assert not [
        r for r in records.load_results(out_json)["results"]["rows"] if r["kind"] == Kind.PLANNED
    ]


def test_readme_speed_table_is_the_recorded_one() -> None:
    """The speed table (docs/speed.md, linked from the README) is generated from the bench
    record it names."""
    readme = (MODELS_DIR.parents[1] / "docs" / "speed.md").read_text()
    start, end = readme.index(bench.README_START), readme.index(bench.README_END)
    record = records.load_results(data.RESULTS_DIR / "bench-cpu-embedded-code.json")
    assert readme[start + len(bench.README_START) : end].strip() == bench.markdown_table(record)


def test_bench_runs_the_runtimes_it_is_told(monkeypatch) -> None:
    """`--runtimes lean` times our rows on the lean forward only (a slow target's bench halves)."""
    seen = {}

    class Stop(Exception):
        pass

    def capture(pair, prompts, cfg, **kwargs):
        seen["runtimes"] = cfg.runtimes
        raise Stop

    monkeypatch.setattr(bench, "run_bench", capture)
    with pytest.raises(Stop):
        main(["bench", "--smoke", "--runtimes", "lean"])
    assert seen["runtimes"] == ("lean",)
