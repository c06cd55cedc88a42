"""specdec_lab.course.capstone: engine-style counters, Exercises 7.1 and 7.2, the capstone report.

The counters must read as vLLM and llama.cpp compute theirs; each check must pass on a right
answer and fail, with a sentence, on the wrong ones (tests/wrong_answers/07_engines_and_capstone.py
holds more, run through the student notebook by tests/test_exercises.py); and `check_report`
must refuse a report whose numbers do not follow from each other. No model and no clock here.
"""

from __future__ import annotations

import copy
import math
import runpy
from pathlib import Path

import pytest

from specdec_lab import decoding, theory
from specdec_lab.course import capstone

WRONG = runpy.run_path(str(Path(__file__).parent / "wrong_answers" / "07_engines_and_capstone.py"))[
    "WRONG_ANSWERS"
]


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


def run_7_1(answer=right_alpha, prediction="α̂ is higher", left_out=capstone.LEFT_OUT):
    counters, alpha = my_counters()
    return capstone.exercise_7_1(answer, prediction, left_out, counters, alpha, 0.05, 1.3, 1.4)


def test_exercise_7_1_passes_a_right_answer_and_the_closed_form_is_the_pooled_rate() -> None:
    assert run_7_1() == pytest.approx(my_counters()[1])
    for _label, accepted, gamma in capstone._worked_7_1():
        vllm, want = capstone._counters_of(accepted, gamma)
        assert right_alpha(vllm["num_drafts"], vllm["num_accepted_tokens_per_pos"]) == (
            pytest.approx(want, abs=1e-12)
        )


@pytest.mark.parametrize("label", list(WRONG["7.1"]))
def test_exercise_7_1_fails_on_wrong_answers(label: str) -> None:
    wrong = WRONG["7.1"][label]
    kw = {
        "answer": wrong["alpha_from_counters"],
        "prediction": wrong.get("prediction_7_1", "α̂ is higher"),
        "left_out": wrong.get("left_out_7_1", capstone.LEFT_OUT),
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


def test_exercise_7_2_passes_the_reference_plan_and_fails_on_wrong_ones() -> None:
    plan = capstone.exercise_7_2(capstone.best_plan, 0.75, 0.03, 0.06, CURVE)
    g = plan["gamma"]
    assert g == max(range(1, len(CURVE)), key=lambda k: theory.speedup(0.75, k, 0.06, CURVE[k]))
    assert plan["predicted_low"] < plan["predicted"] < plan["predicted_high"]
    for wrong in WRONG["7.2"].values():
        with pytest.raises(AssertionError, match=r"^Exercise 7\.2"):
            capstone.exercise_7_2(wrong, 0.75, 0.03, 0.06, CURVE)
    with pytest.raises(AssertionError, match="keys"):
        capstone.exercise_7_2(lambda *a: {"gamma": 3}, 0.75, 0.03, 0.06, CURVE)


PROMPTS = [[4, 1, 0, 2], [4, 3, 1, 4], [0, 1, 0, 0]]  # accepted per step, γ = 4, three prompts


def good_report(plain=(1.0, 1.2, 0.9), spec=(0.6, 0.9, 0.5)) -> dict:
    per_prompt = [stats_of(accepted, [4] * len(accepted)) for accepted in PROMPTS]
    a = decoding.GenerationStats.merge(per_prompt).acceptance_rate
    plan = capstone.best_plan(a, capstone.prompt_se(per_prompt), 0.06, CURVE)
    return capstone.report(
        "embedded", per_prompt, 0.06, CURVE, plan, list(plain), list(spec), 3, "cpu", 1.0
    )


def test_a_report_from_its_measurements_checks() -> None:
    rep = good_report()
    summary = capstone.check_report(rep)
    # α̂ pooled over the prompts: 7 of 10, 12 of 14, 1 of 5 examined (min(n + 1, γ) a step).
    assert (rep["prompt_accepted"], rep["prompt_examined"]) == ([7, 12, 1], [10, 14, 5])
    assert rep["alpha"] == pytest.approx(20 / 29)
    assert rep["alpha_se"] == pytest.approx(capstone.cluster_se([7, 12, 1], [10, 14, 5]))
    assert rep["alpha_se"] > 1.5 * rep["alpha_se_binomial"]  # prompts this different: wider
    assert rep["measured_pooled"] == pytest.approx(3.1 / 2.0)
    assert rep["measured_per_prompt"] == pytest.approx([1.0 / 0.6, 1.2 / 0.9, 0.9 / 0.5])
    g, r = rep["gamma"], CURVE[rep["gamma"]]
    assert rep["predicted_per_prompt"] == pytest.approx(
        [theory.speedup(a / e, g, 0.06, r) for a, e in ([7, 10], [12, 14], [1, 5])]
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
        assert rep["verdict"] in capstone.check_report(rep)


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
    narrow = capstone.best_plan(rep["alpha"], rep["alpha_se_binomial"], rep["c"], CURVE)
    rep |= {k: narrow[k] for k in capstone.PLAN_KEYS} | {"alpha_se": rep["alpha_se_binomial"]}
    return rep


def test_check_report_refuses_the_binomial_standard_error() -> None:
    with pytest.raises(capstone.ReportError, match="binomial SE.*across prompts"):
        capstone.check_report(binomial_report())
    # With the SE right but the interval still from the binomial SE, the interval is named.
    rep = binomial_report()
    rep["alpha_se"] = good_report()["alpha_se"]
    with pytest.raises(capstone.ReportError, match="predicted_low.*binomial"):
        capstone.check_report(rep)


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
    with pytest.raises(capstone.ReportError, match=says):
        capstone.check_report(edited(**changes))
