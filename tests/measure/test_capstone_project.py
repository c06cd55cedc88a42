"""The capstone project (`capstone.Arm`, `measure_arm`, `project`) and its check
(`checks.check_project`): a table measured from its settings passes; one whose numbers were not
measured with them (counts typed in, a speedup inflated, an arm relabelled, two changes at once)
is refused with a sentence. The arms are the embedded pair at a small size, measured once."""

from __future__ import annotations

import copy
import time

import pytest

from specdec_lab import theory
from specdec_lab.course import checks
from specdec_lab.course.checks import nb07_engines_and_capstone as nb07
from specdec_lab.measure import capstone

PROMPTS = ("def fibonacci(n):\n", "class Stack:\n    def __init__(self):\n")
N_NEW, ROUNDS = 12, 1


@pytest.fixture(scope="module")
def arms() -> tuple[capstone.Arm, capstone.Arm]:
    before = capstone.Arm(PROMPTS, draft="draft-large", gamma=4)
    return before, before.changed({"gamma": 2})


@pytest.fixture(scope="module")
def table(arms) -> dict:
    before, after = (capstone.measure_arm(a, N_NEW, ROUNDS, time.process_time) for a in arms)
    return capstone.project(before, after)


@pytest.fixture
def rerun_as_table(monkeypatch, table):
    """The check's rerun hands back the table's own measurement, its clock scaled by `scale`."""
    scale = {"plain": 1.0, "c": 1.0}

    def rerun(arm, n_new, rounds, clock, gamma=None):
        side = "before" if arm == capstone.Arm(**table["before"]["arm"]) else "after"
        return dict(remeasured(table[side], scale["plain"]), c=table[side]["c"] * scale["c"])

    monkeypatch.setattr(capstone, "measure_arm", rerun)
    return scale


def remeasured(rep: dict, plain_scale: float) -> dict:
    """The report `rep` again, every plain-decoding time scaled and its arithmetic kept."""
    fresh = copy.deepcopy(rep)
    fresh["plain_seconds"] = [s * plain_scale for s in rep["plain_seconds"]]
    fresh["measured_per_prompt"] = [
        p / s for p, s in zip(fresh["plain_seconds"], rep["spec_seconds"], strict=True)
    ]
    fresh["measured_pooled"] = sum(fresh["plain_seconds"]) / sum(rep["spec_seconds"])
    fresh["verdict"] = capstone.verdict(
        fresh["measured_pooled"], rep["predicted_low"], rep["predicted_high"]
    )
    return fresh


def test_arm_refuses_bad_settings_with_a_sentence() -> None:
    for bad, match in [
        (dict(prompts=("one prompt",)), "at least two"),
        (dict(prompts=("a", "  ")), "non-empty"),
        (dict(prompts=PROMPTS, gamma=0), "gamma"),
        (dict(prompts=PROMPTS, gamma=9), "gamma"),
        (dict(prompts=PROMPTS, gamma="best"), "gamma"),
        (dict(prompts=PROMPTS, dtype="float8"), "dtype"),
        (dict(prompts=PROMPTS, runtime="vllm"), "runtime"),
        (dict(prompts=PROMPTS, temperature=-1.0), "temperature"),
        (dict(prompts=PROMPTS, temperature=float("nan")), "temperature"),
    ]:
        with pytest.raises(ValueError, match=match):
            capstone.Arm(**bad)
    arm = capstone.Arm(list(PROMPTS))  # a list is kept as a tuple: arms compare and hash
    assert arm.prompts == PROMPTS and hash(arm) == hash(capstone.Arm(PROMPTS))
    with pytest.raises(ValueError, match="one setting"):
        arm.changed({"gamma": 2, "dtype": "bfloat16"})
    with pytest.raises(ValueError, match="change one of"):
        arm.changed({"pair": "smollm2-local"})
    with pytest.raises(ValueError, match="already"):
        arm.changed({"gamma": "planned"})
    assert capstone.differences(arm, arm.changed({"runtime": "hf"})) == ["runtime"]


def test_measure_arm_plans_and_reports_what_it_ran(table) -> None:
    before, after = table["before"], table["after"]
    assert table["change"] == {"gamma": [4, 2]}
    assert (before["gamma"], after["gamma"]) == (4, 2)  # fixed γ, timed as set
    for rep in (before, after):
        assert len(rep["tokens"]) == len(PROMPTS) and all(len(t) == N_NEW for t in rep["tokens"])
        checks.check_report(rep)  # the arithmetic of a fixed-γ report holds
        assert capstone.tokens_per_second(rep) == pytest.approx(
            N_NEW * len(PROMPTS) / sum(rep["spec_seconds"])
        )
    # The timed runs' counts: at a fixed γ the probe ran the same decode, so they are its counts;
    # every prompt's tokens are its accepted drafts plus one per target call.
    for rep in (before, after):
        timed = rep["timed_counts"]
        assert (timed["examined"], timed["accepted"]) == (
            rep["prompt_examined"],
            rep["prompt_accepted"],
        )
        made = zip(timed["accepted"], timed["target_calls"], strict=True)
        assert [a + k for a, k in made] == [N_NEW] * len(PROMPTS)
    # Greedy: the same target tokens whatever γ; the drafts examined differ with γ.
    assert before["tokens"] == after["tokens"]
    assert before["prompt_examined"] != after["prompt_examined"]
    text = capstone.project_table(table)
    assert "gamma (the change)" in text and f"{after['measured_pooled']:.2f}x" in text
    assert "predicted, a whole call  " in text and f"{after['predicted_call']:.2f}x" in text


def test_a_report_predicts_a_whole_call_from_what_it_measured(table) -> None:
    """ "predicted_call": the plan's γ over a whole call of the arm's tokens, the prompt's
    forward and the draft's start included (`theory.run_speedup`), every input measured: a
    report whose whole-call figure does not follow from its inputs is refused."""
    for rep in (table["before"], table["after"]):
        call = rep["call"]
        assert call["new_tokens"] == N_NEW and call["prefill"] > 0 and call["start"] > 0
        assert call["loop"] >= 0 and call["plain_loop"] >= 0
        want = theory.run_speedup(
            *(theory.expected_tokens(rep["alpha"], rep["gamma"]), rep["gamma"], rep["c"]),
            *(rep["verify_curve"][rep["gamma"]], N_NEW, call["prefill"], call["start"]),
            *(rep["first"], call["loop"], call["plain_loop"]),
        )
        assert rep["predicted_call"] == pytest.approx(want)
        assert "a whole call of 12 tokens" in checks.check_report(rep)
        for edited in (
            dict(rep, predicted_call=rep["predicted_call"] * 1.1),
            dict(rep, call=dict(call, prefill=call["prefill"] * 3)),
        ):
            with pytest.raises(nb07.ReportError, match="whole call"):
                checks.check_report(edited)
        partial = dict(rep, call={k: v for k, v in call.items() if k != "loop"})
        with pytest.raises(nb07.ReportError, match="'call' lacks loop"):
            checks.check_report(partial)
        without = {k: v for k, v in rep.items() if k not in ("call", "predicted_call")}
        assert "whole call" not in checks.check_report(without)  # a report made before it


def test_a_planned_arm_takes_the_best_gamma_of_its_own_measurement() -> None:
    rep = capstone.measure_arm(capstone.Arm(PROMPTS), 8, 1, time.process_time)
    want = capstone.best_plan(
        rep["alpha"], rep["alpha_se"], rep["c"], rep["verify_curve"], rep["first"]
    )
    assert rep["gamma"] == want["gamma"] and rep["predicted"] == pytest.approx(want["predicted"])
    wrong = dict(rep, gamma=want["gamma"] % 8 + 1)  # another γ than the plan's
    with pytest.raises(nb07.ReportError, match="best γ"):
        checks.check_report(wrong)


def test_the_check_reruns_the_settings_for_real(table, monkeypatch) -> None:
    # Counts and tokens must come back exactly; the clock is loosened here so a busy test
    # machine cannot fail it (its tolerance is tested with a controlled rerun below).
    monkeypatch.setattr(capstone, "RERUN_TOLERANCE", {"speed": 10.0, "cost": 10.0})
    summary = checks.check_project(table, time.process_time)
    assert summary.startswith("gamma: 4 -> 2 moved speculative tokens/s by")
    assert "reproduced exactly" in summary


def test_a_measured_table_passes_within_the_noise(table, rerun_as_table) -> None:
    rerun_as_table["plain"] = 1.1  # the clock 10 % off on the rerun: noise
    summary = checks.check_project(table, time.process_time)
    assert "up to 10%" in summary  # the pooled speedup 1.1x apart; the rest as measured
    effect = capstone.tokens_per_second(table["after"]) / capstone.tokens_per_second(
        table["before"]
    )
    assert f"{effect:.2f}x" in summary


def test_a_table_whose_numbers_were_not_measured_is_refused(table, rerun_as_table) -> None:
    def refused(bad: dict, match: str) -> None:
        with pytest.raises(nb07.ReportError, match=match):
            checks.check_project(bad, time.process_time)

    # A speedup inflated by half, its arithmetic made consistent: beyond the clock's noise.
    inflated = copy.deepcopy(table)
    inflated["after"] = remeasured(table["after"], 1.5)
    refused(inflated, "beyond the clock's noise")
    # Counts typed in: one more draft accepted on prompt 0, α̂ and the plan recomputed.
    typed = copy.deepcopy(table)
    rep = typed["before"]
    rep["prompt_accepted"][0] += 1 if rep["prompt_accepted"][0] < rep["prompt_examined"][0] else -1
    rep["accepted"] = sum(rep["prompt_accepted"])
    rep["alpha"] = rep["accepted"] / rep["examined"]
    rep["alpha_se"] = capstone.cluster_se(rep["prompt_accepted"], rep["prompt_examined"])
    rep["alpha_se_binomial"] = capstone.binomial_se(rep["alpha"], rep["examined"])
    plan = capstone.best_plan(
        rep["alpha"], rep["alpha_se"], rep["c"], rep["verify_curve"], rep["first"], 4
    )
    rep.update(plan)
    rep["verdict"] = capstone.verdict(
        rep["measured_pooled"], plan["predicted_low"], plan["predicted_high"]
    )
    gamma, c, r = 4, rep["c"], rep["verify_curve"][4]
    rep["predicted_per_prompt"] = [
        theory.speedup(a / e, gamma, c, r, rep["first"])
        for a, e in zip(rep["prompt_accepted"], rep["prompt_examined"], strict=True)
    ]
    curve = rep["verify_curve"]
    rep["predicted_call"] = capstone.call_speedup(
        rep["alpha"], 4, c, curve, rep["first"], rep["call"]
    )
    refused(typed, "were not measured")
    # The after arm relabelled: before's measurement under after's settings.
    relabelled = copy.deepcopy(table)
    relabelled["after"] = dict(copy.deepcopy(table["before"]), arm=table["after"]["arm"])
    refused(relabelled, "fixed γ is 2")
    # Tokens from other text.
    other = copy.deepcopy(table)
    other["after"]["tokens"][1][0] ^= 1
    refused(other, "other tokens")
    # Two changes, none, a change that does not name the difference, no arm at all.
    two = copy.deepcopy(table)
    two["after"]["arm"]["runtime"] = "hf"
    refused(two, "exactly one")
    none = copy.deepcopy(table)
    none["after"]["arm"] = dict(table["before"]["arm"])
    refused(none, "differ in nothing")
    lying = dict(copy.deepcopy(table), change={"dtype": [None, "bfloat16"]})
    refused(lying, "not what separates")
    bare = copy.deepcopy(table)
    del bare["before"]["arm"]
    refused(bare, "no 'arm'")
    refused({"before": 1.2, "after": 1.5}, "capstone.project")


def test_a_cost_the_rerun_does_not_find_is_refused(table, rerun_as_table) -> None:
    rerun_as_table["c"] = 2.2  # 2.2x apart, as a busy neighbour moved it: inside the costs' noise
    checks.check_project(table, time.process_time)
    rerun_as_table["c"] = 1 / 2.2  # and the other way
    checks.check_project(table, time.process_time)
    for scale in (4.0, 1 / 4.0):  # the table's c 4x off what every rerun finds, either way
        rerun_as_table["c"] = scale
        with pytest.raises(nb07.ReportError, match="c is .* closest of 3 reruns.* beyond"):
            checks.check_project(table, time.process_time)


def test_one_outlying_rerun_is_measured_again(table, monkeypatch) -> None:
    """A rerun whose clock was disturbed (c 4x off) does not fail a measured table: the check
    reruns that arm, and stops at the first rerun that agrees; counts are checked on each."""
    calls = []

    def rerun(arm, n_new, rounds, clock, gamma=None):
        side = "before" if arm == capstone.Arm(**table["before"]["arm"]) else "after"
        calls.append(side)
        first = calls.count(side) == 1
        return dict(copy.deepcopy(table[side]), c=table[side]["c"] * (4.0 if first else 1.1))

    monkeypatch.setattr(capstone, "measure_arm", rerun)
    checks.check_project(table, time.process_time)
    assert calls == ["before", "before", "after", "after"]
    # Every rerun's counts must match: a second rerun that examined other drafts is refused.
    calls.clear()

    def drifting(arm, n_new, rounds, clock, gamma=None):
        fresh = rerun(arm, n_new, rounds, clock, gamma)
        if len(calls) == 2:
            fresh["prompt_examined"] = [n + 1 for n in fresh["prompt_examined"]]
        return fresh

    monkeypatch.setattr(capstone, "measure_arm", drifting)
    with pytest.raises(nb07.ReportError, match="were not measured with these settings"):
        checks.check_project(table, time.process_time)


def test_disagreement_is_the_factor_between_two_measurements() -> None:
    assert capstone.disagreement(1.0, 1.1) == pytest.approx(0.1)
    assert capstone.disagreement(1.1, 1.0) == pytest.approx(0.1)
    assert capstone.disagreement(0.1, 0.25) == pytest.approx(1.5)
