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


def good_report() -> dict:
    stats = stats_of([4, 1, 0, 2, 4, 3, 1, 4], [4] * 8)
    a = stats.acceptance_rate
    se = math.sqrt(a * (1 - a) / stats.trials)
    plan = capstone.best_plan(a, se, 0.06, CURVE)
    return capstone.report(
        "embedded", stats, 0.06, CURVE, plan, [1.0, 1.2, 0.9], [0.6, 0.9, 0.5], 3, "cpu"
    )


def test_a_report_from_its_measurements_checks() -> None:
    rep = good_report()
    summary = capstone.check_report(rep)
    assert rep["measured_low"] == min(rep["measured_per_prompt"]) == pytest.approx(1.2 / 0.9)
    assert rep["measured_high"] == pytest.approx(0.9 / 0.5)
    assert rep["measured_pooled"] == pytest.approx(3.1 / 2.0)
    assert "embedded on cpu" in summary and "over 3 prompts" in summary
    with pytest.raises(ValueError, match="one time per prompt"):
        capstone.report("x", stats_of([1], [1]), 0.1, CURVE, rep, [1.0], [1.0], 3, "cpu")


def edited(**changes) -> dict:
    rep = copy.deepcopy(good_report())
    rep.update(changes)
    return rep


@pytest.mark.parametrize(
    "label, changes, says",
    [
        ("a best-of instead of the range", {"measured_low": 1.8}, "not a best-of"),
        ("the best prompt as the pooled speedup", {"measured_pooled": 1.8}, "pooled"),
        ("α̂ from another count", {"alpha": 0.9}, "accepted / examined"),
        ("the standard error of another n", {"alpha_se": 0.01}, "standard error"),
        ("a γ that is not the best", {"gamma": 1}, "best γ"),
        ("a prediction that does not follow", {"predicted": 2.5}, "predicted"),
        ("a range of ± 1 SE", {"predicted_high": 2.0}, "predicted_high"),
        (
            "a per-prompt speedup upside down",
            {"measured_per_prompt": [0.6, 0.75, 0.55]},
            "prompt 0",
        ),
        ("a curve not relative to one token", {"verify_curve": [2.0, *CURVE[1:]]}, "verify_curve"),
        ("one prompt only", {"plain_seconds": [1.0], "spec_seconds": [0.6]}, "one time per prompt"),
    ],
)
def test_check_report_refuses_numbers_that_do_not_add_up(label: str, changes, says) -> None:
    with pytest.raises(capstone.ReportError, match=says):
        capstone.check_report(edited(**changes))
