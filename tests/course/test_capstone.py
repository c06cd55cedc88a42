"""specdec_lab.measure.capstone (engine-style counters, the capstone's plan and report) and its
checks in specdec_lab.course.checks (Exercises 7.1 and 7.2, `check_report`).

The counters must read as vLLM and llama.cpp compute theirs; each check must pass on a right
answer and fail, with a sentence, on the wrong ones (tests/wrong_answers/07_engines_and_capstone.py
holds more, run through the student notebook by tests/course/test_exercises.py); and `check_report`
must refuse a report whose numbers do not follow from each other. No model and no clock here.
"""

from __future__ import annotations

import ast
import copy
import json
import math
import runpy
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from specdec_lab import decoding, models, theory, verify
from specdec_lab.course import checks
from specdec_lab.course.checks import nb07_engines_and_capstone as nb07
from specdec_lab.measure import capstone, plan, records

WRONG = runpy.run_path(
    str(Path(__file__).parents[1] / "wrong_answers" / "07_engines_and_capstone.py")
)["WRONG_ANSWERS"]


def stats_of(accepted: list[int], gammas: list[int]) -> decoding.GenerationStats:
    return decoding.GenerationStats(accepted=accepted, gammas=gammas)


def test_engine_counters_follow_the_engines_rules() -> None:
    # Steps of γ = 3 keeping 3, 0, 1, 2 drafts, and one short last step (γ = 1) left out.
    stats = stats_of([3, 0, 1, 2, 1], [3, 3, 3, 3, 1])
    counters = capstone.engine_counters(stats, 3)
    assert counters["vllm"] == {
        "num_drafts": 4,
        "num_draft_tokens": 12,
        "num_accepted_tokens": 6,
        "num_accepted_tokens_per_pos": [3, 2, 1],  # steps accepting position 0, 1, 2
    }
    assert counters["llama.cpp"] == {"n_draft": 3, "n_drafted": 12, "n_accept": 6, "n_predict": 10}
    metrics = capstone.vllm_metrics(counters["vllm"])
    assert metrics["mean_acceptance_length"] == pytest.approx(1 + 6 / 4)
    assert metrics["per_position_acceptance_rate"] == pytest.approx([0.75, 0.5, 0.25])
    assert metrics["draft_acceptance_rate"] == pytest.approx(0.5)
    assert capstone.llama_cpp_accept(counters["llama.cpp"]) == pytest.approx(50.0)
    assert capstone.llama_cpp_tokens_per_call(counters["llama.cpp"]) == pytest.approx(10 / 4)
    # The course's α̂ of the same steps: 6 accepted of 3 + 1 + 2 + 3 examined.
    assert capstone.full_steps(stats, 3).acceptance_rate == pytest.approx(6 / 9)
    with pytest.raises(ValueError, match="no step"):
        capstone.engine_counters(stats, 5)
    with pytest.raises(ValueError, match="positive integer"):
        capstone.full_steps(stats, 0)


def test_parse_speculative_simple() -> None:
    # The shape of the lines llama-speculative-simple ends with (a format sample, not a run).
    text = "decoded  10 tokens\nn_draft   = 4\nn_predict = 10\nn_drafted = 12\nn_accept  = 6\n"
    assert capstone.parse_speculative_simple(text) == {
        "n_draft": 4,
        "n_predict": 10,
        "n_drafted": 12,
        "n_accept": 6,
    }
    with pytest.raises(ValueError, match="n_accept"):
        capstone.parse_speculative_simple("n_draft = 4\nn_predict = 10\nn_drafted = 12\n")


LOG_END = (
    "decoded   52 tokens in    0.100 seconds, speed:  520.000 t/s\n"
    "n_draft   = 4\nn_predict = 52\nn_drafted = 55\nn_accept  = 38\naccept    = 69.091%\n"
)


def fake_binary(tmp_path, body: str):
    """An executable shell script standing in for llama-speculative-simple."""
    path = tmp_path / "llama-speculative-simple"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_run_speculative_simple_repeats_a_run_that_lost_its_last_lines(tmp_path) -> None:
    # The first run exits before its logger writes the closing lines; the second one does not.
    seen = tmp_path / "runs"
    body = f"echo x >> {seen}\nif [ $(wc -l < {seen}) -lt 2 ]; then echo 'def f(x):'; exit 0; fi\n"
    (tmp_path / "log").write_text(LOG_END)
    binary = fake_binary(tmp_path, body + f"cat {tmp_path / 'log'} >&2\n")
    counters = capstone.run_speculative_simple([binary, "-m", "t.gguf"])
    assert counters == {
        "n_draft": 4,
        "n_predict": 52,
        "n_drafted": 55,
        "n_accept": 38,
        "tokens_per_s": 520.0,
    }
    assert seen.read_text().count("x") == 2


def test_run_speculative_simple_reports_failures(tmp_path) -> None:
    failing = fake_binary(tmp_path, "echo 'error loading model' >&2\nexit 1\n")
    with pytest.raises(RuntimeError, match="error loading model"):
        capstone.run_speculative_simple([failing])
    silent = fake_binary(tmp_path, "echo 'def f(x):'\n")
    with pytest.raises(ValueError, match="decoded"):
        capstone.run_speculative_simple([silent], attempts=2)


def test_prompt_se_counts_each_prompt_as_one_unit() -> None:
    def stats(accepted: list[int]) -> decoding.GenerationStats:
        return decoding.GenerationStats(accepted=accepted, gammas=[4] * len(accepted))

    same = [stats([2, 2]), stats([2, 2])]  # α = 2/3 on both prompts (trials 3 + 3 each)
    assert capstone.prompt_se(same) == pytest.approx(0.0)
    apart = [stats([4, 4]), stats([0, 0])]  # α = 1 and 0: pooled 8 / 10
    # residuals 8 - 0.8 * 8 = 1.6 and 0 - 0.8 * 2 = -1.6; sqrt(2 * 2 * 1.6²) / 10
    assert capstone.prompt_se(apart) == pytest.approx(math.sqrt(2 * 2 * 1.6**2) / 10)
    assert capstone.prompt_se(apart) > capstone.binomial_se(0.8, 10)  # correlated prompts
    assert math.isnan(capstone.prompt_se(same[:1]))
    assert capstone.binomial_se(0.8, 10) == pytest.approx(math.sqrt(0.8 * 0.2 / 10))


def right_alpha(num_drafts: int, accepted_per_pos: list[int]) -> float:
    return sum(accepted_per_pos) / (num_drafts + sum(accepted_per_pos[:-1]))


def my_counters() -> tuple[dict, float]:
    stats = stats_of([4, 1, 0, 2, 4, 3], [4] * 6)
    return capstone.engine_counters(stats, 4)["vllm"], stats.acceptance_rate


def run_7_1(answer=right_alpha, prediction="α̂ is higher", left_out=nb07.LEFT_OUT):
    counters, alpha = my_counters()
    return checks.exercise_7_1(answer, prediction, left_out, counters, alpha, 0.05, 1.3, 1.4)


def test_exercise_7_1_passes_a_right_answer_and_the_closed_form_is_the_pooled_rate() -> None:
    assert run_7_1() == pytest.approx(my_counters()[1])
    for _label, accepted, gamma in nb07._worked_7_1():
        vllm, want = nb07._counters_of(accepted, gamma)
        assert right_alpha(vllm["num_drafts"], vllm["num_accepted_tokens_per_pos"]) == (
            pytest.approx(want, abs=1e-12)
        )


@pytest.mark.parametrize("label", list(WRONG["7.1"]))
def test_exercise_7_1_fails_on_wrong_answers(label: str) -> None:
    wrong = WRONG["7.1"][label]
    kw = {
        "answer": wrong["alpha_from_counters"],
        "prediction": wrong.get("prediction_7_1", "α̂ is higher"),
        "left_out": wrong.get("left_out_7_1", nb07.LEFT_OUT),
    }
    with pytest.raises(AssertionError, match=r"^Exercise 7\.1"):
        run_7_1(**kw)


def test_exercise_7_1_stub_and_prediction() -> None:
    def stub(num_drafts, accepted_per_pos):
        raise NotImplementedError("Exercise 7.1: α from an engine's counters")

    with pytest.raises(NotImplementedError):
        run_7_1(stub)
    with pytest.raises(NotImplementedError):
        run_7_1(prediction=None)
    with pytest.raises(NotImplementedError):
        run_7_1(left_out=None)
    with pytest.raises(AssertionError, match="one of"):
        run_7_1(prediction="higher")
    with pytest.raises(AssertionError, match="keys of"):
        run_7_1(left_out={"latency"})
    with pytest.raises(AssertionError, match="accepted over drafted"):
        run_7_1(lambda n, a: sum(a) / (n * len(a)))


CURVE = [1.0, 1.1, 1.18, 1.3, 1.35, 1.5, 1.62]
FIRST = 0.15  # a round's first drafting step: dearer than the others' c = 0.06


def test_exercise_7_2_passes_the_reference_plan_and_fails_on_wrong_ones() -> None:
    plan = checks.exercise_7_2(capstone.best_plan, 0.75, 0.03, 0.06, CURVE, FIRST)
    g = plan["gamma"]
    assert g == max(
        range(1, len(CURVE)), key=lambda k: theory.speedup(0.75, k, 0.06, CURVE[k], FIRST)
    )
    assert plan["predicted_low"] < plan["predicted"] < plan["predicted_high"]
    # A round costs first + (γ − 1)c + r(γ): at γ = 1, first alone drafts.
    assert capstone.best_plan(0.75, 0.03, 0.06, CURVE, FIRST, gamma=1)["predicted"] == (
        pytest.approx(1.75 / (FIRST + CURVE[1]))
    )
    for wrong in WRONG["7.2"].values():
        with pytest.raises(AssertionError, match=r"^Exercise 7\.2"):
            checks.exercise_7_2(wrong, 0.75, 0.03, 0.06, CURVE, FIRST)
    with pytest.raises(AssertionError, match="keys"):
        checks.exercise_7_2(lambda *a: {"gamma": 3}, 0.75, 0.03, 0.06, CURVE, FIRST)


PROMPTS = [[4, 1, 0, 2], [4, 3, 1, 4], [0, 1, 0, 0]]  # accepted per step, γ = 4, three prompts


def good_report(plain=(1.0, 1.2, 0.9), spec=(0.6, 0.9, 0.5)) -> dict:
    per_prompt = [stats_of(accepted, [4] * len(accepted)) for accepted in PROMPTS]
    a = decoding.GenerationStats.merge(per_prompt).acceptance_rate
    plan = capstone.best_plan(a, capstone.prompt_se(per_prompt), 0.06, CURVE, FIRST)
    return capstone.report(
        "embedded", per_prompt, 0.06, CURVE, plan, list(plain), list(spec), 3, "cpu", 1.0, FIRST
    )


def test_a_report_from_its_measurements_checks() -> None:
    rep = good_report()
    summary = checks.check_report(rep)
    # α̂ pooled over the prompts: 7 of 10, 12 of 14, 1 of 5 examined (min(n + 1, γ) a step).
    assert (rep["prompt_accepted"], rep["prompt_examined"]) == ([7, 12, 1], [10, 14, 5])
    assert rep["alpha"] == pytest.approx(20 / 29)
    assert rep["alpha_se"] == pytest.approx(capstone.cluster_se([7, 12, 1], [10, 14, 5]))
    assert rep["alpha_se"] > 1.5 * rep["alpha_se_binomial"]  # prompts this different: wider
    assert rep["measured_pooled"] == pytest.approx(3.1 / 2.0)
    assert rep["measured_per_prompt"] == pytest.approx([1.0 / 0.6, 1.2 / 0.9, 0.9 / 0.5])
    g, r = rep["gamma"], CURVE[rep["gamma"]]
    assert rep["predicted_per_prompt"] == pytest.approx(
        [theory.speedup(a / e, g, 0.06, r, FIRST) for a, e in ([7, 10], [12, 14], [1, 5])]
    )
    assert "measured_low" not in rep  # the min–max spread is no longer the comparison
    assert rep["verdict"] == "inside" and "inside the predicted interval" in summary
    assert "embedded on cpu, T = 1" in summary and "over 3 prompts" in summary
    assert "SE across 3 prompts, used" in summary
    table = capstone.per_prompt_table(rep).splitlines()
    assert len(table) == 1 + 3 + 1 and table[-1].split()[0] == "pooled"
    with pytest.raises(ValueError, match="one time per prompt"):
        capstone.report("x", [stats_of([1], [1])], 0.1, CURVE, rep, [1.0], [1.0], 3, "cpu")
    with pytest.raises(ValueError, match="one GenerationStats per prompt"):
        capstone.report("x", [stats_of([1], [1])], 0.1, CURVE, rep, [1.0, 1], [1.0, 1], 3, "cpu")


def test_the_verdict_places_the_pooled_speedup_against_the_predicted_interval() -> None:
    assert capstone.verdict(1.5, 1.2, 2.0) == "inside"
    assert capstone.verdict(1.2, 1.2, 2.0) == "inside"  # the ends belong to the interval
    assert capstone.verdict(1.1, 1.2, 2.0) == "below"
    assert capstone.verdict(2.1, 1.2, 2.0) == "above"
    low, high = good_report()["predicted_low"], good_report()["predicted_high"]
    slow = good_report(spec=(5.0, 5.0, 5.0))  # speculation far slower than plain decoding
    fast = good_report(spec=(0.01, 0.01, 0.01))
    assert slow["verdict"] == "below" and slow["measured_pooled"] < low
    assert fast["verdict"] == "above" and fast["measured_pooled"] > high
    for rep in (slow, fast):
        assert rep["verdict"] in checks.check_report(rep)


def test_per_prompt_predictions_rise_with_each_prompts_alpha() -> None:
    rep = good_report()
    alphas = [a / e for a, e in zip(rep["prompt_accepted"], rep["prompt_examined"], strict=True)]
    order = sorted(range(len(alphas)), key=alphas.__getitem__)
    predicted = [rep["predicted_per_prompt"][i] for i in order]
    assert predicted == sorted(predicted) and predicted[0] < predicted[-1]
    # The pooled prediction lies among the prompts' own.
    assert predicted[0] < rep["predicted"] < predicted[-1]


def test_cluster_se_is_prompt_se_and_needs_matching_counts() -> None:
    per_prompt = [stats_of(accepted, [4] * len(accepted)) for accepted in PROMPTS]
    assert capstone.prompt_se(per_prompt) == pytest.approx(
        capstone.cluster_se([7, 12, 1], [10, 14, 5])
    )
    with pytest.raises(ValueError, match="one count per prompt"):
        capstone.cluster_se([1, 2], [3])


def edited(**changes) -> dict:
    rep = copy.deepcopy(good_report())
    rep.update(changes)
    return rep


def binomial_report() -> dict:
    """The plausible wrong report: the range from the binomial SE, which that SE also reports."""
    rep = good_report()
    narrow = capstone.best_plan(rep["alpha"], rep["alpha_se_binomial"], rep["c"], CURVE, FIRST)
    rep |= {k: narrow[k] for k in capstone.PLAN_KEYS} | {"alpha_se": rep["alpha_se_binomial"]}
    return rep


def test_check_report_refuses_the_binomial_standard_error() -> None:
    with pytest.raises(nb07.ReportError, match="binomial SE.*across prompts"):
        checks.check_report(binomial_report())
    # With the SE right but the interval still from the binomial SE, the interval is named.
    rep = binomial_report()
    rep["alpha_se"] = good_report()["alpha_se"]
    with pytest.raises(nb07.ReportError, match="predicted_low.*binomial"):
        checks.check_report(rep)


@pytest.mark.parametrize(
    "label, changes, says",
    [
        ("the best prompt as the pooled speedup", {"measured_pooled": 1.8}, "pooled"),
        ("the mean of per-prompt speedups as pooled", {"measured_pooled": 1.6}, "pooled"),
        ("α̂ from another count", {"alpha": 0.9}, "accepted / examined"),
        ("pooled counts not the prompts' sums", {"accepted": 21}, "sums over the prompts"),
        ("the standard error of another n", {"alpha_se": 0.01}, "across prompts"),
        ("a wrong binomial SE", {"alpha_se_binomial": 0.5}, "binomial standard error"),
        ("a γ that is not the best", {"gamma": 1}, "best γ"),
        ("a prediction that does not follow", {"predicted": 2.5}, "predicted"),
        ("a range of ± 1 SE", {"predicted_high": 2.0}, "predicted_high"),
        ("a verdict against the numbers", {"verdict": "below"}, "lies inside"),
        ("the verdict of a min–max overlap", {"verdict": "overlap"}, "lies inside"),
        (
            "a per-prompt speedup upside down",
            {"measured_per_prompt": [0.6, 0.75, 0.55]},
            "prompt 0",
        ),
        (
            "per-prompt predictions all the pooled one",
            {"predicted_per_prompt": [2.0, 2.0, 2.0]},
            "its own α̂",
        ),
        ("a curve not relative to one token", {"verify_curve": [2.0, *CURVE[1:]]}, "verify_curve"),
        ("one prompt only", {"prompt_accepted": [7], "prompt_examined": [10]}, "at least two"),
        ("times for other prompts", {"plain_seconds": [1.0, 2.0]}, "one time per prompt"),
    ],
)
def test_check_report_refuses_numbers_that_do_not_add_up(label: str, changes, says) -> None:
    with pytest.raises(nb07.ReportError, match=says):
        checks.check_report(edited(**changes))


# --- real engine logs and Exercise 7.3 -----------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def test_the_quoted_logs_parse_to_counters_that_print_as_they_do() -> None:
    logs = {name: capstone.parse_engine_log(log) for name, log in capstone.ENGINE_LOGS.items()}
    vllm_log, server = logs["vllm-ngram"], logs["llama-server-eagle3"]
    assert (vllm_log["num_drafts"], vllm_log["num_draft_tokens"]) == (59, 295)
    assert vllm_log["num_accepted_tokens_per_pos"] == [58, 56, 54, 52, 42]
    assert vllm_log["num_accepted_tokens"] == 262 and vllm_log["new_tokens"] is None
    printed = capstone.vllm_metrics(vllm_log)  # the line, recomputed from the counters
    assert round(printed["mean_acceptance_length"], 2) == 5.44
    assert round(100 * printed["draft_acceptance_rate"], 1) == 88.8
    assert [round(x, 3) for x in printed["per_position_acceptance_rate"]] == [
        0.983,
        0.949,
        0.915,
        0.881,
        0.712,
    ]
    assert (server["num_drafts"], server["num_draft_tokens"], server["gamma"]) == (87, 259, 3)
    assert server["num_accepted_tokens_per_pos"] == [70, 55, 42]
    assert (server["new_tokens"], server["ms_per_token"]) == (256, 8.97)
    assert capstone.log_tokens_per_call(server) == pytest.approx(256 / 89)
    assert capstone.log_tokens_per_call(vllm_log) is None
    for log in capstone.ENGINE_LOGS.values():
        assert log.source.startswith("https://github.com/") and log.text.strip()


def test_a_log_whose_rounding_allows_several_draft_counts_is_refused() -> None:
    # 32594 accepted over about 10,000 drafts: a 2-decimal mean length fits dozens of counts.
    line = (
        "SpecDecoding metrics: Mean acceptance length: 4.26, Accepted: 32594 tokens, "
        "Drafted: 53716 tokens, Per-position acceptance rate: 0.9, 0.8, 0.7, 0.6, 0.5"
    )
    with pytest.raises(ValueError, match="/metrics"):
        capstone.parse_vllm_log(line)
    with pytest.raises(ValueError, match="no 'Accepted"):
        capstone.parse_vllm_log("SpecDecoding metrics: Mean acceptance length: 2.00")


def test_alpha_range_brackets_the_true_alpha_and_is_exact_for_full_drafts() -> None:
    rng = np.random.default_rng(3)
    for _ in range(300):
        gamma = int(rng.integers(1, 7))
        lengths = [int(x) for x in rng.integers(1, gamma + 1, size=int(rng.integers(1, 12)))]
        lengths[0] = gamma  # the longest draft sets γ
        kept = [int(rng.integers(0, g + 1)) for g in lengths]
        counters, true_alpha = nb07._drafts_counters(lengths, kept)
        low, high = capstone.alpha_range(
            counters["num_drafts"],
            counters["num_draft_tokens"],
            counters["num_accepted_tokens_per_pos"],
        )
        assert low - 1e-12 <= true_alpha <= high + 1e-12 and high <= 1 + 1e-12
        if all(g == gamma for g in lengths):
            full = decoding.GenerationStats(accepted=kept, gammas=lengths).acceptance_rate
            assert low == pytest.approx(high) == pytest.approx(full)
    with pytest.raises(ValueError, match="cannot hold"):
        capstone.alpha_range(2, 9, [1, 0, 0, 0])  # 9 tokens in 2 drafts of at most 4


def test_drafting_counters_count_every_step_that_drafted() -> None:
    stats = stats_of([2, 0, 0, 1, 3], [3, 0, 1, 2, 3])  # a step that drafted nothing, short ones
    counters = capstone.drafting_counters(stats, 3)
    assert counters == {
        "num_drafts": 4,
        "num_draft_tokens": 9,
        "num_accepted_tokens": 6,
        "num_accepted_tokens_per_pos": [3, 2, 1],
    }
    low, high = capstone.alpha_range(4, 9, [3, 2, 1])
    assert low <= stats.acceptance_rate <= high
    with pytest.raises(ValueError, match="between 1 and"):
        capstone.drafting_counters(stats, 2)


def run_7_3(answer=capstone.alpha_range, prediction="the mean acceptance length is higher"):
    logs = {name: capstone.parse_engine_log(log) for name, log in capstone.ENGINE_LOGS.items()}
    stats = stats_of([2, 0, 0, 1, 3], [3, 0, 1, 2, 3])
    lookup = capstone.drafting_counters(stats, 3)
    return checks.exercise_7_3(answer, prediction, logs, lookup, stats.acceptance_rate, 1.5)


def _right_range(num_drafts, num_draft_tokens, accepted_per_pos):
    gamma, accepted = len(accepted_per_pos), sum(accepted_per_pos)
    examined = num_drafts + sum(accepted_per_pos[:-1])
    short = min(gamma * num_drafts - num_draft_tokens, accepted_per_pos[0] - accepted_per_pos[-1])
    return accepted / examined, accepted / (examined - short)


def test_exercise_7_3_passes_a_right_answer() -> None:
    run_7_3(_right_range)


@pytest.mark.parametrize("label", list(WRONG["7.3"]))
def test_exercise_7_3_fails_on_wrong_answers(label: str) -> None:
    wrong = WRONG["7.3"][label]
    with pytest.raises(AssertionError, match=r"^Exercise 7\.3"):
        run_7_3(wrong["alpha_range"], wrong.get("prediction_7_3", "they are equal"))


def test_exercise_7_3_stub_and_prediction() -> None:
    with pytest.raises(NotImplementedError):
        run_7_3(_right_range, prediction=None)
    with pytest.raises(AssertionError, match="two numbers"):
        run_7_3(lambda n, d, a: 0.5)


# --- the capstone's worked exemplar --------------------------------------------------------------

EXEMPLAR = ROOT / "data/results/capstone-exemplar-cpu-embedded.json"


def _notebook_settings(*names: str) -> dict:
    """Notebook 07's top-level assignments `names`, as syntax trees (cells with shell magics
    skipped); `X = a if BIG else b` gives b, the CPU default."""
    notebook = json.loads((ROOT / "notebooks/07_engines_and_capstone.ipynb").read_text())
    found = {}
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        try:
            tree = ast.parse("".join(cell["source"]))
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                value = node.value
                found[node.targets[0].id] = value.orelse if isinstance(value, ast.IfExp) else value
    return {name: found[name] for name in names}


def test_the_exemplar_is_the_notebooks_default_project_and_its_table_adds_up(monkeypatch) -> None:
    """data/results/capstone-exemplar-cpu-embedded.json (scripts/capstone_exemplar.py) holds
    notebook 07's default project at its CPU defaults, and its table passes everything
    `check_project` checks short of the clock: `capstone.measure_arm` is replaced by a rerun that
    returns the recorded arm, so the arithmetic, the one change and the settings are checked
    as they are, and the recorded line's effect is the table's own."""
    results = records.load_results(EXEMPLAR)["results"]
    table = results["table"]
    nb = _notebook_settings("MY_PROMPTS", "GAMMA", "N_NEW", "CAP_ROUNDS", "BEFORE", "CHANGE")
    before_call = {kw.arg: kw.value for kw in nb["BEFORE"].keywords}
    want = capstone.Arm(
        ast.literal_eval(nb["MY_PROMPTS"]),
        **{k: ast.literal_eval(v) for k, v in before_call.items() if k != "gamma"},
        gamma=ast.literal_eval(nb["GAMMA"]),
    )
    assert capstone.Arm(**table["before"]["arm"]) == want
    assert capstone.Arm(**table["after"]["arm"]) == want.changed(ast.literal_eval(nb["CHANGE"]))
    n_new, rounds = ast.literal_eval(nb["N_NEW"]), ast.literal_eval(nb["CAP_ROUNDS"])
    assert (results["n_new"], results["rounds"]) == (n_new, rounds)
    assert results["clock"] == "process_time" and results["threads"] == 1

    reruns = []

    def recorded_rerun(arm, n, r, clock, gamma=None, progress=False):  # the clock left out
        side = "before" if arm == capstone.Arm(**table["before"]["arm"]) else "after"
        assert (n, r, gamma) == (n_new, rounds, table[side]["gamma"])
        reruns.append(side)
        return copy.deepcopy(table[side])

    monkeypatch.setattr(capstone, "measure_arm", recorded_rerun)
    line = checks.check_project(copy.deepcopy(table), clock=lambda: 0.0)
    assert reruns == ["before", "after"]
    assert line.split(";")[0] == results["check_project"].split(";")[0]  # the effect
    assert "up to 0%" in line  # a rerun that is the record agrees with it
    for side in ("before", "after"):
        assert checks.check_report(table[side]) == results["check_report"][side]
    assert capstone.project_table(table) == results["project_table"]
    # Step 4's decodes: every prompt's new tokens are its accepted drafts plus one per call, and
    # at the fixed γ = 4 of the before arm they are its probe's counts.
    for steps in results["timed_gamma_steps"].values():
        made = zip(steps["accepted"], steps["target_calls"], strict=True)
        assert [a + k for a, k in made] == [n_new] * 4
    steps = results["timed_gamma_steps"]["before"]
    assert steps["accepted"] == table["before"]["prompt_accepted"]
    assert steps["examined"] == table["before"]["prompt_examined"]


def _exemplar_quotes(results: dict, doc: str) -> None:
    """The doc quotes the record: the table, the check's line and the per-prompt tables
    verbatim, and each number its interpretation derives from them."""
    table, steps = results["table"], results["timed_gamma_steps"]
    before, after = table["before"], table["after"]
    assert results["project_table"] in doc and results["check_project"] in doc
    for side in (before, after):
        assert capstone.per_prompt_table(side) in doc
    flat = " ".join(doc.split())

    def share(rep: dict) -> str:
        return f"{rep['measured_pooled'] / rep['predicted']:.2f}"

    mb, ma = before["measured_per_prompt"], after["measured_per_prompt"]
    ratios = [m / p for m, p in zip(mb, before["predicted_per_prompt"], strict=True)]
    calls = {side: sum(s["target_calls"]) for side, s in steps.items()}
    tokens = len(before["tokens"]) * len(before["tokens"][0])  # new tokens over the prompts
    per_call = {side: tokens / calls[side] for side in calls}
    expected = {
        side: theory.expected_tokens(rep["alpha"], rep["gamma"])
        for side, rep in (("before", before), ("after", after))
    }
    at_four = theory.speedup(
        after["alpha"], 4, after["c"], after["verify_curve"][4], after["first"]
    )
    plain = capstone.tokens_per_second(after, True) / capstone.tokens_per_second(before, True)
    effect = capstone.tokens_per_second(after) / capstone.tokens_per_second(before)
    # the time per round over the predicted, with tokens per call as counted
    slower = {
        side: (per_call[side] / expected[side]) / (rep["measured_pooled"] / rep["predicted"])
        for side, rep in (("before", before), ("after", after))
    }
    said = [
        f"{before['measured_pooled']:.2f}x against {before['predicted']:.2f}x ({share(before)} of "
        f"it) and {after['measured_pooled']:.2f}x against {after['predicted']:.2f}x "
        f"({share(after)} of it)",
        f"({min(ratios):.2f} to {max(ratios):.2f} of its prediction)",
        f"prompt 1 ran fastest ({ma[1]:.2f}x)",
        f"prompt 2 ran slowest ({ma[2]:.2f}x)",
        f"counted {', '.join(map(str, steps['before']['target_calls']))} target calls at γ = 4 and "
        f"{', '.join(map(str, steps['after']['target_calls']))} at γ = 8",
        f"the arms made {calls['before']} and {calls['after']} target calls, "
        f"{per_call['before']:.2f} and {per_call['after']:.2f} tokens per call against the "
        f"formula's {expected['before']:.2f} and {expected['after']:.2f} "
        f"({per_call['before'] / expected['before']:.2f} and "
        f"{per_call['after'] / expected['after']:.2f} of it)",
        f"({sum(steps['after']['accepted'])} of {sum(steps['after']['examined'])} examined drafts, "
        f"{sum(steps['after']['accepted']) / sum(steps['after']['examined']):.3f})",
        f"the rounds ran {slower['before']:.2f}x and {slower['after']:.2f}x the time predicted",
        f"γ = 4 predicts {at_four:.2f}x, so planning predicted {after['predicted'] / at_four:.2f}x",
        f"the clock found {effect:.2f}x",
        f"speculative tokens per second moved {effect:.2f}x",
        f"plain decoding, the same work in both arms, moved {plain:.2f}x",
        f"({after['predicted']:.2f}x against {before['predicted']:.2f}x)",
        f"α̂ = {before['alpha']:.3f} over {before['examined']} examined drafts",
        f"(binomial {before['alpha_se_binomial']:.3f}, not used)",
        f"SE across the four prompts of {before['alpha_se']:.3f}",
        f"gives the intervals {before['predicted_low']:.2f}–{before['predicted_high']:.2f}x at "
        f"γ = {before['gamma']} and {after['predicted_low']:.2f}–{after['predicted_high']:.2f}x "
        f"at γ = {after['gamma']}",
        f"greedy, {len(before['tokens'][0])} new tokens each",
        f"the fastest of {before['rounds']} rounds",
        f"the top of the measured curve ({len(after['verify_curve'])} tokens)",
        f"the same two models gave {before['c']:.3f} and {after['c']:.3f}",
        f"it predicted the before arm to {share(before)}",
    ]
    for words in said:
        assert words in flat, words
    # What the interpretation reads off these numbers.
    assert before["verdict"] == after["verdict"] == "below"
    own = [a / e for a, e in zip(after["prompt_accepted"], after["prompt_examined"], strict=True)]
    assert mb == sorted(mb, reverse=True)  # before: ranked as the prompts' α̂ (1.000 ... 0.909)
    assert max(ma) == ma[1] and own[0] > own[1] and min(ma) == ma[2]  # after: not ranked
    assert steps["after"]["target_calls"][1] < steps["after"]["target_calls"][0]
    assert after["alpha"] == before["alpha"]  # both probes at γ = 4
    assert after["predicted"] > before["predicted"] and after["predicted"] > at_four
    assert abs(effect - 1) <= 0.08 and "inside that noise" in results["check_project"]
    # "more than half of the after arm's shortfall": the budget's share of it, in logs
    budget = math.log(per_call["after"] / expected["after"]) / math.log(share_value(after))
    assert budget > 0.5


def share_value(rep: dict) -> float:
    return rep["measured_pooled"] / rep["predicted"]


def test_the_exemplar_quotes_its_record() -> None:
    """docs/capstone_exemplar.md quotes the record as it says; an edited number fails."""
    results = records.load_results(EXEMPLAR)["results"]
    doc = (ROOT / "docs" / "capstone_exemplar.md").read_text(encoding="utf-8")
    _exemplar_quotes(results, doc)
    table, calls = results["table"], results["timed_gamma_steps"]["after"]["target_calls"]
    effect = capstone.tokens_per_second(table["after"]) / capstone.tokens_per_second(
        table["before"]
    )
    shortfall = table["before"]["measured_pooled"] / table["before"]["predicted"]
    for old in (f"{effect:.2f}x", f"{shortfall:.2f} of it", ", ".join(map(str, calls))):
        assert old in doc
        edited = doc.replace(old, old.replace(old[0], str((int(old[0]) + 1) % 10), 1))
        with pytest.raises(AssertionError):
            _exemplar_quotes(results, edited)


def test_the_formula_sheet_states_what_the_package_computes() -> None:
    """docs/formulas.md's worked numbers for Exercise 7.3 and argmax drafting."""
    sheet = " ".join((ROOT / "docs" / "formulas.md").read_text(encoding="utf-8").split())
    low, high = capstone.alpha_range(87, 259, [70, 55, 42])
    assert f"give {low:.3f} ≤ α̂ ≤ {high:.3f} and 256 / 89 = {256 / 89:.2f} tokens" in sheet
    p = torch.tensor([0.5, 0.3, 0.15, 0.05])
    assert verify.acceptance_rate(p, p).item() == pytest.approx(1) and p.max().item() == 0.5
    p, q = torch.tensor([0.85, 0.05, 0.05, 0.05]), torch.tensor([0.28, 0.24, 0.24, 0.24])
    sampled, top = verify.acceptance_rate(p, q).item(), p[q.argmax()].item()
    assert f"gives {sampled:.2f} sampled and {top:.2f} by argmax" in sheet


def test_arm_costs_come_from_the_plans_instrument(monkeypatch) -> None:  # timing.loop_costs
    pair = models.load_pair("embedded")
    seen = []
    real = plan.measure_costs
    monkeypatch.setattr(plan, "measure_costs", lambda *a, **k: seen.append(k) or real(*a, **k))
    curve, c, first, call = capstone.arm_costs(
        pair, pair.encode("def f(x):\n"), repeats=2, max_tokens=4
    )
    assert len(seen) == 1 and seen[0]["clock"] is time.perf_counter
    assert len(curve) == 4 and curve[0] == 1.0
    assert all(r > 0 for r in curve) and 0 < c < 1  # the embedded draft is smaller than its target
    assert first >= c  # the fastest first step of a round is one of the steps c is the fastest of
    assert set(call) == {"prefill", "start", "t1_ms"} and min(call.values()) > 0
