"""Every figure the README, docs/ and the model card quote, read from its record and checked as
printed (rounded the way the prose rounds it). A new record that moves a figure fails here, with
the sentence to fix."""

import importlib.util
import json
import math
import re
import sys
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

from specdec_lab import heads, theory
from specdec_lab.measure import records
from specdec_lab.proof import stats

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "data" / "results"
MODELS = ROOT / "data" / "models"
CARD = MODELS / "README.md"
SPEED = ROOT / "docs" / "speed.md"
README = ROOT / "README.md"
FORMULAS = ROOT / "docs" / "formulas.md"


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def half_up(x: float, digits: int) -> str:
    """`x` rounded as a person rounds the decimal the record stores (5.465 -> 5.47), where an
    f-string rounds the binary float (5.465 -> 5.46)."""
    return str(Decimal(repr(x)).quantize(Decimal(1).scaleb(-digits), ROUND_HALF_UP))


def flat(text: str) -> str:
    """Markdown with its line breaks and runs of spaces folded, so that a sentence matches
    wherever the prose wraps it."""
    return re.sub(r"\s+", " ", text)


def says(path: Path, *fragments: str) -> None:
    text = flat(path.read_text(encoding="utf-8"))
    for fragment in fragments:
        if flat(fragment) not in text:
            pytest.fail(f"{path.relative_to(ROOT)} should say: {fragment!r}")


def row(record: dict, method: str, temperature: float = 0.0, runtime: str | None = None) -> dict:
    found = [
        r
        for r in record["results"]["rows"]
        if r["method"].startswith(method)
        and r["temperature"] == temperature
        and (runtime is None or r["runtime"] == runtime)
    ]
    assert len(found) == 1, (method, temperature, runtime, [r["method"] for r in found])
    return found[0]


@pytest.fixture(scope="module")
def bench_record() -> dict:
    return records.load_results(RESULTS / "bench-cpu-embedded-code.json")


@pytest.fixture(scope="module")
def smollm2_bench() -> dict:
    return records.load_results(RESULTS / "bench-cpu-smollm2-local-code.json")


@pytest.fixture(scope="module")
def costs() -> dict:
    return records.load_results(RESULTS / "smollm2-costs-cpu.json")["results"]


@pytest.fixture(scope="module")
def ladder() -> dict:
    return records.load_results(RESULTS / "draft-ladder-cpu.json")["results"]["drafts"]


@pytest.fixture(scope="module")
def training() -> dict:
    return json.loads((MODELS / "training.json").read_text())


# ------------------------------------------------------------------------------ generated blocks
def test_readme_speed_lines_and_the_speed_table_are_the_records() -> None:
    figures = load_script("record_figures")
    for path, start, end, body in figures.blocks():
        current = figures.between(path.read_text(encoding="utf-8"), start, end)
        assert current == body, (
            f"{path.relative_to(ROOT)} differs from its record: run "
            "`python scripts/record_figures.py --write`"
        )


def test_the_speed_lines_quote_ranges_not_a_best_of(bench_record) -> None:
    figures = load_script("record_figures")
    lines = figures.speed_lines(bench_record)
    assert len(lines.splitlines()) == 4  # the fourth: SmolLM2 and its draft head
    t1 = [
        r["speedup"]
        for r in bench_record["results"]["rows"]
        if r["method"].startswith("speculative")
        and r["runtime"] == "lean"
        and r["temperature"] == 1.0
    ]
    assert len(t1) >= 2 and f"{min(t1):.2f}–{max(t1):.2f}x at T = 1" in lines


# ------------------------------------------------------------------------------------ the README
def test_readme_figures(training) -> None:
    shipped = [f for f in MODELS.rglob("*") if f.is_file() and f.suffix != ".pt"]
    megabytes = sum(f.stat().st_size for f in shipped) / 1e6
    says(README, f"`data/models/` ({megabytes:.0f} MB)")
    says(README, f"**target** ({training['models']['target']['params'] / 1e6:.1f}M parameters)")
    wheel = re.search(
        r"wheel from PyPI \((\d+) MB\)", (ROOT / "specdec_lab/models/smollm2.py").read_text()
    )
    says(README, f"its PyPI wheel ({wheel[1]} MB, no hub)")


# ---------------------------------------------------------------------------- docs/speed.md prose
def test_speed_page_figures(bench_record, smollm2_bench, costs, training) -> None:
    res = bench_record["results"]
    ar, ar_hf = (
        row(bench_record, "autoregressive", 0, "lean"),
        row(bench_record, "autoregressive", 0, "hf"),
    )
    generate = row(bench_record, "HF generate")
    assisted = row(bench_record, "HF assisted")
    spec_hf_2 = row(bench_record, "speculative γ=2 (", 0, "hf")
    says(
        SPEED,
        f"runs {ar['tokens_per_s'] / ar_hf['tokens_per_s']:.2f}x faster on the lean runtime than on "
        f"transformers' eager forward, and {ar['tokens_per_s'] / generate['tokens_per_s']:.2f}x "
        "faster than `generate`",
        f"over HF assisted generation {res['summary']['speedup_vs_hf_assisted']:.2f}x",
        f"at γ = 2 makes {spec_hf_2['tokens_per_s']:.0f} tokens/s against assisted generation's "
        f"{assisted['tokens_per_s']:.0f} "
        f"({spec_hf_2['tokens_per_s'] / assisted['tokens_per_s']:.2f}x)",
    )
    lean = [
        r for r in res["rows"] if r["method"].startswith("speculative") and r["runtime"] == "lean"
    ]
    greedy = [r["speedup"] for r in lean if r["temperature"] == 0]
    sampled = [r["speedup"] for r in lean if r["temperature"] == 1]
    gammas = sorted(r["gamma"] for r in lean if r["temperature"] == 0)
    says(
        SPEED,
        f"speculation gains {min(greedy):.2f}-{max(greedy):.2f}x greedy and "
        f"{min(sampled):.2f}-{max(sampled):.2f}x at T = 1**, over γ = {gammas[0]}-{gammas[-1]}",
        f"c is {res['costs']['lean']['c']:.2f} on the lean runtime and "
        f"{res['costs']['hf']['c']:.2f} on transformers' forward",
        f"({res['costs']['lean']['t_target_ms']:.2f} vs {res['costs']['hf']['t_target_ms']:.2f} ms)",
    )
    gamma4 = row(bench_record, "speculative γ=4 (", 0, "lean")
    says(SPEED, f"verifying 5 tokens costs {gamma4['verify_cost']:.2f}x one token")
    greedy_lean = [r for r in lean if r["temperature"] == 0]
    assert max(abs(r["speedup"] / r["predicted_verify"] - 1) for r in greedy_lean) < 0.05
    says(SPEED, "predicts the lean runtime's greedy speedups to within 5%")

    sampled_4grams = [r["repeated_4grams"] for r in res["rows"] if r["temperature"] == 1]
    says(
        SPEED,
        f"repeat {ar['repeated_4grams']:.0%} of their 4-grams (its samples at T = 1: "
        f"{min(sampled_4grams):.0%}-{max(sampled_4grams):.0%})".replace("%-", "-"),
        f"the model card's {training['quality']['data/models/target']['greedy_repeated_4gram_median']:.0%}"
        " is the same measure over 8 code prompts x 96 tokens",
    )
    config = res["config"]
    says(SPEED, f"the bench's {config['n_prompts']} prompts x {config['max_new_tokens']} tokens")
    lookup0, lookup1 = row(bench_record, "prompt lookup", 0), row(bench_record, "prompt lookup", 1)
    lookup_draft1 = row(bench_record, "lookup, else draft", 1)
    says(
        SPEED,
        f"({lookup0['speedup']:.2f}x against {gamma4['speedup']:.2f}x), while at T = 1 "
        f"lookup-else-draft falls to {lookup_draft1['speedup']:.2f}x and prompt lookup below 1x "
        f"({lookup1['speedup']:.2f}x)",
    )
    lookup_draft0 = row(bench_record, "lookup, else draft", 0)
    assert lookup1["speedup"] < 1 and lookup_draft1["speedup"] < lookup_draft0["speedup"]

    # SmolLM2
    quality = training["quality"]
    ours, smol = quality["data/models/target"], quality["data/cache/smollm2-135m"]
    says(
        SPEED,
        f"it scores {smol['heldout_ce']['code']['nats_per_char']:.3f} against "
        f"{ours['heldout_ce']['code']['nats_per_char']:.3f} nats per character on code",
        f"repeats {smol['greedy_repeated_4gram_median']:.0%} of its 4-grams, against "
        f"{ours['greedy_repeated_4gram_median']:.0%}",
        f"α = {training['models']['smollm2-draft']['alpha']['code']['alpha']:.2f} on held-out code",
        f"after {training['models']['smollm2-draft']['tokens_seen'] / 1e6:.1f}M tokens",
    )
    bf16 = costs["dtypes"]["bfloat16"]["t_ms"]
    says(SPEED, f"verifying 3 tokens costs {bf16[2] / bf16[0]:.2f}x one")
    best = smollm2_bench["results"]["summary"]
    says(
        SPEED,
        f"gains {best['speedup_vs_autoregressive']:.2f}x greedy (γ = 2)",
        f"prompt lookup gains {best['speedup_T1']:.2f}x at T = 1",
    )
    assert best["best_greedy"].startswith("speculative γ=2") and best["best_T1"].startswith(
        "prompt"
    )


def test_speed_page_planned_bench() -> None:
    record = records.load_results(RESULTS / "bench-cpu-smollm2-local-code-planned.json")
    res, best = record["results"], record["results"]["summary"]
    greedy, sampled = res["plans"]["0"], res["plans"]["1"]
    assert greedy["drafter"] == sampled["drafter"] == "draft head"
    assert greedy["gamma"] == sampled["gamma"] and record["device_info"]["cpu_native_bf16"]
    chains = [r["speedup"] for r in res["rows"] if r["method"].startswith("speculative")]
    says(
        SPEED,
        f"the plan chose {res['dtype']} over the pair's bfloat16 default, and the draft head at "
        f"γ = {greedy['gamma']} at both temperatures",
        f"measured {best['planned_speedup_T0']:.2f}x greedy (the plan expected "
        f"{greedy['predicted']:.2f}x; measured/predicted "
        f"{best['planned_measured_over_predicted_T0']:.2f}) and {best['planned_speedup_T1']:.2f}x "
        f"at T = 1 (expected {sampled['predicted']:.2f}x; "
        f"{best['planned_measured_over_predicted_T1']:.2f})",
        f"the draft model's chains ran {min(chains):.2f}–{max(chains):.2f}x",
        f"These are the {res['config']['n_prompts']} shipped code prompts",
    )
    says(SPEED, f"bench-cpu-smollm2-local-code-planned.json`, {record['created'][:10]})")
    assert best["best_greedy"].startswith("planned") and best["best_T1"].startswith("planned")


def test_speed_page_llama_cpp_figures() -> None:
    rec = records.load_results(RESULTS / "llama-cpp-cpu-embedded.json")["results"]
    cpp, ours = rec["llama_cpp"], rec["ours"]
    cpp_spec = cpp["spec_tokens_per_s"]  # pooled over the prompts' runs
    verify = rec["ks"].index(rec["gamma"] + 1)
    says(
        SPEED,
        f"decodes plainly at {cpp['ar_tokens_per_s']:.0f} tokens/s against our "
        f"{ours['ar_tokens_per_s']:.0f} ({cpp['ar_tokens_per_s'] / ours['ar_tokens_per_s']:.1f}x)",
        f"r(5) = {cpp['t_k'][verify] / cpp['t_k'][0]:.2f} against our "
        f"{ours['t_k'][verify] / ours['t_k'][0]:.2f}",
        f"{cpp_spec / cpp['ar_tokens_per_s']:.2f}x against our "
        f"{ours['spec_tokens_per_s'] / ours['ar_tokens_per_s']:.2f}x, at {cpp_spec:.0f} against "
        f"{ours['spec_tokens_per_s']:.0f} tokens/s",
        f"γ = {rec['gamma']}",
    )


def test_speed_page_reconciles_its_three_verification_costs(bench_record) -> None:
    """docs/speed.md's table of r: each figure from its record, with the k, cache and statistic
    that record used, and the shared conditions (dtype, runtime, machine, date, kernel)."""
    import datetime
    import inspect

    from specdec_lab.measure import timing

    res = bench_record["results"]
    chains = [r for r in res["rows"] if r["gamma"] and r["temperature"] == 0]
    best = max(chains, key=lambda r: r["tokens_per_s"])  # the γ the bench times its costs at
    isolated = res["costs"]["lean"]
    loop = row(bench_record, "speculative γ=4 (", 0, "lean")
    cpp = records.load_results(RESULTS / "llama-cpp-cpu-embedded.json")
    ours, ks = cpp["results"]["ours"], cpp["results"]["ks"]
    script = load_script("llama_cpp_record")
    r5 = ours["t_k"][ks.index(5)] / ours["t_k"][0]
    assert best["gamma"] == 5 and res["config"]["repeats"] == 3
    assert inspect.signature(timing.session_sweep).parameters["prefix"].default == 32
    assert (script.DEPTH, script.REPEATS, script.GAMMA) == (64, 5, 4)
    says(
        SPEED,
        f"appears on this page as {isolated['verify_cost']:.2f}, {loop['verify_cost']:.2f} and "
        f"{r5:.2f}",
        f'| {isolated["verify_cost"]:.2f}, under the table ("verifying γ+1 tokens") | '
        "`bench-cpu-embedded-code.json`, `costs.lean` |",
        f"| {best['gamma'] + 1}: the bench times its best greedy chain's γ, here {best['gamma']} | 32 tokens |",
        f'| {loop["verify_cost"]:.2f}, "inside the loop" | the same record, row '
        f"`speculative γ={loop['gamma']} (ours, lean)` |",
        f"| {loop['gamma'] + 1} | the prompt plus up to {res['config']['max_new_tokens']} new tokens "
        f"| the mean over every call of the {res['config']['repeats']} repeats |",
        f'| {r5:.2f}, "our {r5:.2f}" beside llama.cpp | `llama-cpp-cpu-embedded.json`, `ours.t_k` |',
        f"| {script.GAMMA + 1} | {script.DEPTH} tokens | the fastest of {script.REPEATS} repeats |",
        f"At the same 5 tokens the loop's ratio came out higher, {loop['verify_cost']:.2f} against "
        f"{r5:.2f}",
    )
    # The shared conditions: float32, lean, one thread, one machine, 34 minutes apart that day,
    # both before the packed verify path, whose own motivation cites a later record.
    assert res["dtype"] == "float32" and "float32" in cpp["results"]["what"]
    assert loop["runtime"] == "lean" and "runtime lean" in res["pair"]
    infos = (bench_record["device_info"], cpp["device_info"])
    assert all(i["torch_threads"] == 1 and i["cpu"] == "Intel(R) Xeon(R) Processor" for i in infos)
    made = [datetime.datetime.fromisoformat(r["created"]) for r in (cpp, bench_record)]
    minutes = (made[1] - made[0]).total_seconds() / 60
    assert {m.date().isoformat() for m in made} == {"2026-12-03"} and round(minutes) == 34
    packing = records.load_results(RESULTS / "smollm2-costs-cpu-emulated-bf16.json")
    linear = (ROOT / "specdec_lab" / "engine" / "linear.py").read_text(encoding="utf-8")
    assert "data/results/smollm2-costs-cpu-emulated-bf16.json" in flat(linear)
    assert (
        packing["created"].startswith("2026-12-04") and max(made).isoformat() < packing["created"]
    )
    says(
        SPEED,
        "the same Intel Xeon, 34 minutes apart on 2026-12-03",
        "whose own motivation cites a record of 2026-12-04",
    )


# ------------------------------------------------------------------------------- the model card
def test_model_card_models_and_acceptance_tables(training) -> None:
    models = training["models"]
    for name in ("target", "draft", "draft-small", "draft-prose", "draft-large"):
        m = models[name]
        disk = (MODELS / name / "model.safetensors").stat().st_size / 1e6
        ce = m["heldout_ce"]
        says(CARD, f"| {m['params'] / 1e6:.2f} M | {disk:.1f} MB |")
        says(CARD, f"| {ce['code']:.2f} / {ce['prose']:.2f} |")
        if name != "target":
            a = m["alpha"]
            says(
                CARD,
                f"| `{name}` | **{a['code']['alpha']:.3f}** | {a['code']['greedy_match']:.3f} | "
                f"{a['prose']['alpha']:.3f} | {a['prose']['greedy_match']:.3f} | "
                f"{half_up(m['latency_ms_k1'], 2)} |",
            )
    target = models["target"]
    says(
        CARD,
        f"from scratch, {target['wall_s'] / 60:.0f} min, {target['tokens_seen'] / 1e6:.1f} M tokens",
        f"| 1 | 1 | 1 | 1 | {half_up(target['latency_ms_k1'], 2)} |",
    )
    large = models["draft-large"]
    says(CARD, f"({large['tokens_seen'] / 1e6:.1f} M tokens, {large['steps']:,} steps;")
    head = json.loads((MODELS / "head" / "head.json").read_text())
    says(
        CARD,
        f"is {head['alpha_greedy']:.2f} ({head['tokens_per_target_call']:.2f} tokens per target call)",
        f"{head['train']['steps']:,} AdamW steps",
    )


def test_model_card_corpus_and_sizing(training) -> None:
    corpus = training["corpus"]

    def cell(split: str) -> str:
        c = corpus[split]
        return f"{c['mb']:.1f} MB, {c['files']:,} files, {c['tokens'] / 1e6:.1f} M tokens"

    says(
        CARD,
        f"| train | {cell('code_train')} | {cell('prose_train')} |",
        f"| held-out | {cell('code_heldout')} | {cell('prose_heldout')} |",
        f"({corpus['files_by_source']['stdlib']:,} of the files come from the stdlib, "
        f"{corpus['files_by_source']['site-packages']:,} from site-packages",
        f"and {len(corpus['packages']) - 7} more",
        f"About {corpus['code_train']['mb'] * 1e6 / corpus['code_train']['tokens']:.1f} characters "
        "per token",
    )
    target = training["models"]["target"]
    n, d = target["params"], target["tokens_seen"]
    compute = 6 * n * d
    says(
        CARD,
        f"C = 6·N·D ≈ 6 × {n / 1e6:.1f} M × {d / 1e6:.1f} M ≈ {compute / 1e15:.1f}e15 FLOPs",
        f"N ≈ √(C/120) ≈ {math.sqrt(compute / 120) / 1e6:.0f} M parameters trained on "
        f"≈ {20 * math.sqrt(compute / 120) / 1e6:.0f} M tokens",
        f"We kept {n / 1e6:.1f} M ({d / n:.1f} tokens per parameter)",
    )


def test_model_card_goals_and_prose(training, ladder, bench_record) -> None:
    models, quality = training["models"], training["quality"]["data/models/target"]
    says(
        CARD,
        f"| **{models['target']['heldout_ce']['code']:.2f}** ✔ |",
        f"| **{quality['greedy_repeated_4gram_median']:.2f}** ✘ |",
        f"| {quality['human_code_repeated_4gram_median']:.2f} (",
        f"| **{models['draft']['alpha']['code']['alpha']:.2f}** ✘ |",
    )
    gamma4_t1 = row(bench_record, "speculative γ=4 T=1", 1, "lean")
    t1 = [
        r["speedup"]
        for r in bench_record["results"]["rows"]
        if r["method"].startswith("speculative")
        and r["runtime"] == "lean"
        and r["temperature"] == 1
    ]
    says(
        CARD,
        f"| **{gamma4_t1['speedup']:.2f}x** ✘ |",
        f"{min(t1):.2f}-{max(t1):.2f}x over γ = 2-8",
    )
    draft, large = ladder["draft"], ladder["draft-large"]
    says(
        CARD,
        f"best speedup {large['T0']['speedup']:.2f}x against {draft['T0']['speedup']:.2f}x greedy, "
        f"{large['T1']['speedup']:.2f}x against {draft['T1']['speedup']:.2f}x at T = 1",
        f"{large['c'] / draft['c']:.1f}x on the lean runtime",
        f"({models['draft-large']['latency_ms_k1'] / models['draft']['latency_ms_k1']:.1f}x in the "
        "latency column above",
        "3.6x the size",
    )
    assert f"{models['draft-large']['params'] / models['draft']['params']:.1f}" == "3.6"
    stages = models["draft"]["earlier_stages"]
    early = [s["alpha"]["code"]["alpha"] for s in stages.values()]
    says(CARD, f"({early[0]:.2f} after 5 minutes, {early[1]:.2f} after 27)")
    ce = models["draft"]["heldout_ce"]["code"] - models["target"]["heldout_ce"]["code"]
    says(CARD, f"only {ce:.2f} nats above the target's")
    rows = bench_record["results"]["rows"]
    at = {t: [r["repeated_4grams"] for r in rows if r["temperature"] == t] for t in (0.7, 1.0)}
    says(
        CARD,
        f"repeat {min(at[0.7]):.0%}-{max(at[0.7]):.0%} of their 4-grams at T = 0.7 and "
        f"{min(at[1.0]):.0%}-{max(at[1.0]):.0%} at T = 1, against "
        f"{row(bench_record, 'autoregressive', 0, 'lean')['repeated_4grams']:.0%}".replace(
            "%-", "-"
        ),
    )
    says(CARD, f"the `c` field says {models['draft']['c']:.2f}")
    throughput = {
        (r["setup"], r["context"], r["batch"]): r["tokens_per_s"]
        for r in training["throughput"]["rows"]
    }
    says(
        CARD,
        f"bf16 autocast {throughput[('bf16, 1 thread', 256, 8)]:,} tokens/s against "
        f"{throughput[('fp32, 1 thread', 256, 8)]:,} in fp32",
        f"batch 16 {throughput[('bf16, 1 thread', 256, 16)]:,}",
        f"2 threads {throughput[('bf16, 2 threads', 256, 8)]:,}",
        f"{throughput[('bf16, 2 procs x 1 thread (gloo)', 256, 8)]:,} in total",
    )


def test_model_card_smollm2_section(training, costs, smollm2_bench) -> None:
    quality = training["quality"]
    ours, smol = quality["data/models/target"], quality["data/cache/smollm2-135m"]
    for key in ("code", "prose"):
        says(
            CARD,
            f"| {ours['heldout_ce'][key]['nats_per_token']:.2f} | "
            f"{smol['heldout_ce'][key]['nats_per_token']:.2f} |",
            f"| {ours['heldout_ce'][key]['nats_per_char']:.3f} | "
            f"{smol['heldout_ce'][key]['nats_per_char']:.3f} |",
        )
    says(
        CARD,
        f"| {ours['greedy_repeated_4gram_median']:.2f} | {smol['greedy_repeated_4gram_median']:.2f} |",
        f"| {ours['sampled_repeated_4gram_median']:.2f} | {smol['sampled_repeated_4gram_median']:.2f} |",
    )
    draft = training["models"]["smollm2-draft"]
    a, ce = draft["alpha"], draft["heldout_ce"]
    says(
        CARD,
        f"| `smollm2-draft` | {ce['code']:.2f} / {ce['prose']:.2f} | **{a['code']['alpha']:.2f}** / "
        f"{a['prose']['alpha']:.2f} | {a['code']['greedy_match']:.2f} / {a['prose']['greedy_match']:.2f} | "
        f"{costs['c']:.2f} (",
        f"{draft['params'] / 1e6:.1f}M parameters",
        f"{draft['steps']:,} steps",
        f"{draft['tokens_seen'] / 1e6:.2f}M tokens in all ({draft['tokens_per_s']:.0f} tokens/s",
    )
    ks = costs["ks"]
    for dtype in ("float32", "bfloat16"):
        t = dict(zip(ks, costs["dtypes"][dtype]["t_ms"], strict=True))
        says(CARD, "| " + " | ".join(f"{t[k]:.1f}" for k in (1, 2, 3, 4, 5, 8, 16)) + " |")
    f32, bf16 = costs["dtypes"]["float32"], costs["dtypes"]["bfloat16"]
    r = {d: dict(zip(ks, costs["dtypes"][d]["r"], strict=True)) for d in costs["dtypes"]}
    says(CARD, f"r(5) = {f32['t_ms'][4] / f32['t_ms'][0]:.1f}")
    low = min(r["bfloat16"][k] for k in range(1, 10))
    high = max(r["bfloat16"][k] for k in range(1, 10))
    says(CARD, f"r(k) stays between {low:.2f} and {high:.2f} up to k = 9")
    faster = 1 - bf16["t_ms"][0] / f32["t_ms"][0]
    says(CARD, f"one token takes {faster:.0%} less time")
    greedy2 = row(smollm2_bench, "speculative γ=2 (", 0)
    alpha = greedy2["alpha"]
    e = theory.expected_tokens(alpha, 2)
    r3_bf16, r3_f32 = bf16["t_ms"][2] / bf16["t_ms"][0], f32["t_ms"][2] / f32["t_ms"][0]
    says(
        CARD,
        f"α ≈ {alpha:.2f} and γ = 2, with bfloat16's r(3) = {r3_bf16:.2f}, gains at most "
        f"E/r = {e:.2f} / {r3_bf16:.2f} = **{e / r3_bf16:.2f}x**",
        f"In float32, with r(3) = {r3_f32:.2f}, it gains at most {e / r3_f32:.2f}x",
        f"the limit for a free draft at this α is {e / r3_bf16:.2f}x",
    )
    says(
        CARD,
        f"costs {f32['lm_head_ms']:.1f} ms of the target's {f32['t_ms'][0]:.1f} ms in float32 "
        f"({f32['lm_head_ms'] / f32['t_ms'][0]:.0%}; {bf16['lm_head_ms']:.1f} of "
        f"{bf16['t_ms'][0]:.1f} ms in bfloat16)",
        f"costs {f32['lm_head_8192_ms']:.1f} ms ({bf16['lm_head_8192_ms']:.2f} ms in bfloat16)",
    )
    res = smollm2_bench["results"]
    for name, label in (
        ("autoregressive (", "autoregressive (ours)"),
        ("speculative γ=1 (", "speculative γ = 1"),
        ("speculative γ=2 (", "speculative γ = 2"),
        ("speculative γ=3 (", "speculative γ = 3"),
        ("prompt lookup", "prompt lookup γ = 4"),
        ("heuristic", "heuristic γ ≤ 10"),
        ("lookup, else draft", "lookup, else draft γ = 6"),
        ("tree", "tree 4-2"),
    ):
        g, s = row(smollm2_bench, name, 0), row(smollm2_bench, name.replace(" (", " T=1 ("), 1)
        speed = (
            f"**{g['speedup']:.2f}x**"
            if g["speedup"] == max(r["speedup"] for r in res["rows"] if r["temperature"] == 0)
            else f"{g['speedup']:.2f}x"
        )
        alpha = f" {g['alpha']:.2f} " if g["alpha"] is not None else " "
        says(
            CARD,
            f"| {label} | {g['tokens_per_s']:.1f} | {speed} |{alpha}| {s['tokens_per_s']:.1f} |",
        )
    ratios = [row(smollm2_bench, f"speculative γ={g} (", 0)["ratio"] for g in (1, 2, 3)]
    sampled = [row(smollm2_bench, f"speculative γ={g} T=1", 1)["ratio"] for g in (1, 2, 3)]
    says(
        CARD,
        f"was {ratios[0]:.2f}, {ratios[1]:.2f} and {ratios[2]:.2f} for γ = 1, 2, 3 greedy, and "
        f"{sampled[0]:.2f}, {sampled[1]:.2f} and {sampled[2]:.2f} at T = 1",
    )
    outputs = res["config"]["repeats"] * res["config"]["n_prompts"]
    mismatched = row(smollm2_bench, "speculative γ=2 (", 0)["mismatches"]
    assert mismatched / outputs == 0.5
    says(CARD, "half the greedy outputs differ")


HEAD_RECORDS = {
    "bfloat16": RESULTS / "head-decoding-cpu-smollm2-local.json",
    "float32": RESULTS / "head-decoding-cpu-smollm2-local-float32.json",
}


def head_decoding_table(record: dict) -> str:
    """The model card's table of one `scripts/head_decoding.py` record (rows: drafter x T)."""
    res = record["results"]
    by_t = res["temperatures"]
    gammas = sorted({int(k.split("γ=")[1]) for k in by_t["0"] if "γ=" in k})
    lines = [
        f"| {res['dtype']} | " + " | ".join(f"γ = {g}" for g in gammas) + " |",
        "|---" * (len(gammas) + 1) + "|",
    ]
    for temperature, label in (("0", "greedy"), ("1", "T = 1")):
        for drafter, name in (("draft head", "head"), ("draft model", "draft model")):
            cells = []
            for g in gammas:
                r = by_t[temperature][f"{drafter} γ={g}"]
                cells.append(
                    f"{half_up(r['alpha'], 2)} / {half_up(r['tokens_per_target_call'], 2)} / "
                    f"{half_up(r['speedup'], 2)}x"
                )
            lines.append(f"| {name}, {label} | " + " | ".join(cells) + " |")
    ar0, ar1 = (by_t[t]["autoregressive"]["tokens_per_s"] for t in ("0", "1"))
    c = res["c"]
    lines.append(
        f"\nAutoregressive decoding: {ar0:.1f} tok/s greedy, {ar1:.1f} at T = 1. The planner's "
        f"c (a whole drafting step, interleaved with the target's forwards): "
        f"{c['draft head']:.3f} for the head, {c['draft model']:.3f} for the draft model; "
        f"r(3) = {res['verify_cost'][2]:.2f}."
    )
    return "\n".join(lines)


def test_model_card_smollm2_head_section() -> None:
    recs = {dtype: records.load_results(path) for dtype, path in HEAD_RECORDS.items()}
    assert recs["bfloat16"]["device_info"]["cpu_native_bf16"]  # the card: "with native bfloat16"
    for dtype, rec in recs.items():
        assert rec["results"]["dtype"] == dtype
        says(CARD, head_decoding_table(rec))
        if dtype == "float32":  # exact in float32: every greedy output equals plain decoding's
            rows = rec["results"]["temperatures"]["0"]
            assert all(r["greedy_equal"] == "4/4" for k, r in rows.items() if "γ=" in k)
    says(CARD, f"{recs['bfloat16']['device_info']['cpu']} with native bfloat16")
    held = records.load_results(RESULTS / "head-heldout-cpu-smollm2-local.json")["results"]
    new, old = (
        held["heads"]["data/models/smollm2-head"],
        held["heads"]["data/models/smollm2-head@60448de"],
    )
    for domain in ("code", "prose"):
        says(
            CARD,
            f"| {domain} | "
            + " / ".join(half_up(a, 2) for a in new["alpha_t1"][domain])
            + " | "
            + " / ".join(half_up(a, 2) for a in old["alpha_t1"][domain])
            + " |",
        )
    info = json.loads((MODELS / "smollm2-head" / "head.json").read_text())
    assert (
        info["config"]
        == new["config"]
        == {
            "hidden_size": 576,
            "mlp_size": 2048,
            "n_blocks": 2,
            "draft_vocab": 16384,
        }
    )
    runs = [info["init_info"]["train"], info["train"]]
    assert [r["steps"] for r in runs] == [3869, 1869]  # the card's steps and tokens per run
    assert [round(r["tokens_seen"] / 1e6, 1) for r in runs] == [31.7, 15.3]
    curve = [p for run in runs for p in run["curve"]]
    says(
        CARD,
        "| held-out α, code | "
        + " | ".join(" / ".join(half_up(a, 2) for a in p["heldout_alpha_t1_code"]) for p in curve)
        + " |",
    )
    head = heads.load_head(MODELS / "smollm2-head")
    assert round(sum(p.numel() for p in head.parameters()) / 1e6, 2) == 5.39
    figures = load_script("record_figures")
    best = {  # (speedup, γ) of each drafter's best cell, per dtype and temperature
        (dtype, t, d): figures.best_head(rec, t, d)
        for dtype, rec in recs.items()
        for t in ("0", "1")
        for d in ("draft head", "draft model")
    }
    (h0, g0), (h1, g1) = best["bfloat16", "0", "draft head"], best["bfloat16", "1", "draft head"]
    (f0, k0), (f1, k1) = best["float32", "0", "draft head"], best["float32", "1", "draft head"]
    says(
        SPEED,
        f"the head gains {half_up(h0, 2)}x greedy (γ = {g0}) and {half_up(h1, 2)}x at T = 1 "
        f"(γ = {g1}), where the draft model reaches "
        f"{half_up(best['bfloat16', '0', 'draft model'][0], 2)}x and "
        f"{half_up(best['bfloat16', '1', 'draft model'][0], 2)}x",
        f"{half_up(f0, 2)}x and {half_up(f1, 2)}x (γ = {k0} and {k1})",
        f"(r(3) = {half_up(recs['float32']['results']['verify_cost'][2], 2)})",
        f"α = {half_up(new['alpha_t1']['code'][0], 2)} on held-out code",
        f"after 110 minutes on one core: {half_up(old['alpha_t1']['code'][0], 2)})",
    )
    sweep = records.load_results(RESULTS / "smollm2-costs-cpu-v5.json")["results"]["dtypes"]
    r = {d: sweep[d]["r"] for d in ("float32", "float32_packed", "bfloat16")}
    says(
        CARD,
        f"r(3) = {half_up(r['float32'][2], 2)} through `F.linear` (MKL), "
        f"{half_up(r['float32_packed'][2], 2)} packed and {half_up(r['bfloat16'][2], 2)} in "
        f"bfloat16; r(16) = {half_up(r['float32'][15], 2)}, {half_up(r['float32_packed'][15], 2)} "
        f"and {half_up(r['bfloat16'][15], 2)}.",
    )


# ---------------------------------------------------------------------------- the formula sheet
def test_formula_sheet_examples_are_the_packages() -> None:
    e = theory.expected_tokens(0.8, 4)
    says(
        FORMULAS,
        f"α = 0.8, γ = 4, c = 0.1, r = 1.2 gives {theory.round_speedup(e, 4, 0.1, 1.2):.2f}x per "
        f"round; a call of 64 tokens with P = 3 gives {theory.run_speedup(e, 4, 0.1, 1.2, 64, 3.0):.2f}x "
        f"with a head and {theory.run_speedup(e, 4, 0.1, 1.2, 64, 3.0, 0.4):.2f}x with a draft model "
        f"of S = 0.4, and a call of 16 tokens {theory.run_speedup(e, 4, 0.1, 1.2, 16, 3.0, 0.4):.2f}x",
    )
    says(FORMULAS, f"α = 0.8, γ = 4 gives {theory.expected_tokens(0.8, 4):.2f} tokens per call")
    says(
        FORMULAS,
        f"α = 0.8, γ = 4, c = 0.1 gives {theory.speedup(0.8, 4, 0.1):.2f}x with r = 1 and "
        f"{theory.speedup(0.8, 4, 0.1, 1.7):.2f}x with r = 1.7",
    )
    best = theory.optimal_gamma(0.8, 0.1)
    says(FORMULAS, f"α = 0.8, c = 0.1 → γ = {best} ({theory.speedup(0.8, best, 0.1):.2f}x)")
    best = theory.optimal_gamma(0.9, 0.5)
    says(FORMULAS, f"α = 0.9, c = 0.5 → γ = {best} ({theory.speedup(0.9, best, 0.5):.2f}x)")
    says(
        FORMULAS,
        f"γ = 16 yields {theory.expected_tokens(0.6, 16):.2f} tokens per call but runs at "
        f"{theory.speedup(0.6, 16, 0.2):.2f}x",
    )
    says(FORMULAS, f"needs N = {stats.samples_needed(0.06, 1e-6, 6):,}")
    # The break-even statements, on a grid: with r = 1 some γ gains iff α > c.
    for alpha in (0.1, 0.3, 0.5, 0.7, 0.9):
        for c in (0.05, 0.2, 0.4, 0.6):
            gains = any(theory.speedup(alpha, g, c) > 1 for g in range(1, 65))
            assert gains == theory.breaks_even(alpha, c) == (alpha > c)
            assert math.isclose(theory.speedup(alpha, 1, c), (1 + alpha) / (1 + c))
    # γ = 1 with r > 1 gains only when α > c + r − 1.
    for alpha, c, r in ((0.5, 0.1, 1.3), (0.5, 0.1, 1.5), (0.9, 0.2, 1.6)):
        assert (theory.speedup(alpha, 1, c, r) > 1) == (alpha > c + r - 1)
    # The marginal rule of the best γ.
    for alpha, c in ((0.8, 0.1), (0.6, 0.2), (0.9, 0.5)):
        for g in range(1, 20):
            rises = theory.speedup(alpha, g + 1, c) > theory.speedup(alpha, g, c)
            assert rises == (alpha ** (g + 1) / c > theory.speedup(alpha, g, c))


def test_readme_minutes_are_the_notebook_record() -> None:
    """README "What needs a GPU": the course's run time, from `scripts/notebook_minutes.py`."""
    rec = records.load_results(RESULTS / "notebook-minutes-cpu.json")
    notebooks, total = rec["results"]["notebooks"], rec["results"]["total"]
    assert len(notebooks) == 8  # 00-07, every one
    cpu = [r["cpu_s"] for r in notebooks.values()]
    says(
        ROOT / "README.md",
        f"notebooks 00-07 took {total['cpu_s'] / 60:.1f} minutes of CPU time\n"
        f"({total['wall_s'] / 60:.1f} of wall time) in fresh kernels on one core of a 2-core "
        f"{rec['device_info']['cpu']}, {min(cpu):.0f}-{max(cpu):.0f} s each",
    )
