"""measure.plan: the demo's and bench's own plan, on the `micro` Llama of conftest.py (its numbers are CPU noise,
so the tests check how the plan follows from what it measured, not the numbers)."""

import time
from dataclasses import replace

import pytest
import torch

from specdec_lab import decoding, drafters, theory, tree
from specdec_lab.engine import sessions
from specdec_lab.measure import plan


class _Slow(drafters.ModelDrafter):
    """A draft model whose every drafting step also waits 30 ms: c is in the hundreds."""

    def propose(self, *args, **kwargs):
        time.sleep(0.03)
        return super().propose(*args, **kwargs)


def _candidates(micro) -> dict:
    return {
        "itself": lambda: (micro, drafters.ModelDrafter(sessions.open_session(micro))),
        "slow": lambda: (micro, _Slow(sessions.open_session(micro))),
    }


IDS = torch.tensor([0, 5, 9, 3, 17, 2, 30, 8])


def test_the_plan_follows_from_what_it_measured(micro) -> None:
    p = plan.make_plan(micro, _candidates(micro), IDS, 0.0, max_tokens=5, probe_tokens=12)
    assert len(p.costs.verify_cost) == 5 and p.costs.verify_cost[0] == 1.0
    assert p.alpha["itself"] == 1.0  # the target drafting for itself, greedy: all accepted
    assert (
        p.costs.c["slow"] > p.costs.c["itself"]
    )  # the same work, and a sleep no clock can shorten
    assert p.rates["itself"] == (1.0,) * 4  # every depth of the probe's γ = 4 kept
    assert set(p.costs.first) == set(p.costs.c) and p.costs.first["slow"] > 2
    # a call's start: both draft models read the prompt themselves; the sleep is in slow's too
    assert p.costs.prefill > 0 and set(p.costs.start) == {"itself", "slow"}
    assert p.costs.start["slow"] > 2
    best = {
        n: theory.best_gamma(
            *(p.alpha[n], p.costs.c[n], p.costs.verify_cost, p.costs.first[n], p.rates[n]),
            *(p.loop[n], p.plain_loop),
        )
        for n in p.alpha
    }
    # E(α, γ) <= γ + 1 < γc for any c > 2: a 30 ms wait on a target of ~1 ms never pays
    assert p.costs.c["slow"] > 2 and best["slow"] == (0, 1.0)
    if p.drafter is None:
        assert p.gamma == 0 and p.predicted == 1.0 and all(g == 0 for g, _ in best.values())
    else:
        assert p.drafter == "itself" and (p.gamma, p.predicted) == best["itself"]
    assert "plan:" in p.describe() and "slow" in p.describe()


def test_a_probe_reads_the_acceptance_of_its_own_run(micro) -> None:
    def make():
        return micro, drafters.ModelDrafter(sessions.open_session(micro))

    assert plan.probe(make, IDS, 0.0, 12, 3).acceptance_rate == 1.0
    sampled = plan.probe(make, IDS, 1.0, 24, 3, seed=1).acceptance_rate
    assert sampled == 1.0  # p = q exactly: min(1, p/q) accepts every draft at any temperature


def test_a_probe_over_several_prompts_pools_their_trials(micro) -> None:
    """The bench probes α on all its prompts: accepted drafts over examined drafts of every run,
    prompt i sampled with seed + i; not the mean of each prompt's α, not the first prompt's."""

    def make():  # drafts copied from the text so far: good on a repetitive prompt, poor elsewhere
        return micro, drafters.PromptLookupDrafter(32)

    prompts = [IDS, torch.tensor([3, 4, 3, 4, 3, 4, 3, 4])]
    runs = [
        decoding.speculative_generate(
            *make(), ids, 20, 3, temperature=0.0, generator=torch.Generator().manual_seed(i)
        ).stats
        for i, ids in enumerate(prompts)
    ]
    accepted, trials = sum(sum(r.accepted) for r in runs), sum(r.trials for r in runs)
    pooled = plan.probe(make, prompts, 0.0, 20, 3).acceptance_rate
    assert pooled == accepted / trials
    each = [r.acceptance_rate for r in runs]
    assert each[0] != each[1] and pooled != sum(each) / 2  # the prompts differ, and weigh by trials
    assert (
        plan.probe(make, prompts[:1], 0.0, 20, 3).acceptance_rate
        == each[0]
        == plan.probe(make, IDS, 0.0, 20, 3).acceptance_rate
    )


def test_expected_takes_another_alpha_and_stops_at_the_measured_r(micro) -> None:
    costs = plan.Costs(verify_cost=(1.0, 1.1, 1.2), c={"d": 0.1}, t1_ms=40.0)
    p = plan.Plan("d", 1, 1.5, {"d": 0.8}, costs, 0.0)
    assert p.expected("d", 2) == theory.speedup(0.8, 2, 0.1, 1.2)  # r(γ + 1) = verify_cost[γ]
    assert p.expected("d", 2, alpha=0.5) == theory.speedup(0.5, 2, 0.1, 1.2)
    assert p.expected("d", 2, alpha=0.5) < p.expected("d", 2)
    assert p.expected("d", 3) is None  # r(4) was not measured


def test_expected_over_a_whole_call_charges_its_start() -> None:
    """With `new_tokens`, a call of so many tokens, the prompt's forward and (a draft model's)
    start included: `theory.run_speedup` on the plan's own costs; a head, with no start, has
    its first token from the prompt's forward alone."""
    costs = plan.Costs((1.0, 1.1, 1.2), {"d": 0.1, "h": 0.1}, 40.0, prefill=3.0, start={"d": 0.6})
    p = plan.Plan("d", 2, 1.5, {"d": 0.8, "h": 0.8}, costs, 0.0, loop={"d": 0.05})
    tokens = theory.expected_tokens(0.8, 2)
    want = theory.run_speedup(tokens, 2, 0.1, 1.2, 48, 3.0, 0.6, loop=0.05)
    assert p.expected("d", 2, new_tokens=48) == pytest.approx(want)
    assert p.expected("h", 2, new_tokens=48) == pytest.approx(
        theory.run_speedup(tokens, 2, 0.1, 1.2, 48, 3.0)
    )
    assert p.expected("d", 2, new_tokens=48) < p.expected("d", 2)  # the start is paid once
    assert p.expected("d", 3, new_tokens=48) is None


def test_a_tree_is_probed_and_weighed_against_every_chain(micro, monkeypatch) -> None:
    flat = plan.Costs(verify_cost=(1.0,) * 9, c={"d": 0.05}, t1_ms=1.0)
    p = plan.Plan(None, 0, 1.0, {"d": 0.4}, flat, 0.0)
    sweeps, outputs = [], {}  # what the harness was given; what each call decoded
    real = plan.timing.interleaved

    def spy(calls, *args, **kwargs):  # runs every call, and says the tree took 2/3 of the time
        sweeps.append(set(calls))
        real({k: (lambda k=k, c=c: outputs.setdefault(k, c())) for k, c in calls.items()}, 1)
        return {key: 2.0 if key[0] is not None else 3.0 for key in calls}

    monkeypatch.setattr(plan.timing, "interleaved", spy)
    shape, gain = plan.probe_tree(micro, micro, p, "d", [IDS, IDS[:4]], 0.0, 12)
    assert shape == tree.choose_branching(0.4, 0.05, flat.verify_cost) and max(shape) > 1
    # one sweep: the tree and plain decoding of every prompt, timed in the same rounds
    assert sweeps == [{(shape, 0), (None, 0), (shape, 1), (None, 1)}]
    assert gain == 3.0 / 2.0  # plain decoding's time over the tree's, not a modelled cost
    expected = tree.tree_speculative_generate(micro, micro, IDS, 12, shape, temperature=0.0)
    assert torch.equal(outputs[shape, 0].tokens, expected.tokens)
    assert outputs[None, 1].stats.new_tokens == 12 and outputs[None, 1].stats.target_calls == 12
    monkeypatch.undo()
    steep = plan.Costs(verify_cost=tuple(1.0 + k for k in range(9)), c={"d": 0.05}, t1_ms=1.0)
    assert plan.probe_tree(micro, micro, replace(p, costs=steep), "d", IDS, 0.0, 12) is None
    # in a plan: considered, and chosen only when it beats every chain's expected speedup
    q = plan.make_plan(
        micro, _candidates(micro), IDS, 0.0, max_tokens=9, probe_tokens=12, trees={"itself": micro}
    )
    chains = max(q.best(n)[1] for n in q.alpha)
    if q.tree is not None:
        assert q.drafter == "itself" and q.predicted == q.trees["itself"][1] > chains
        assert q.gamma == len(q.tree) and "token tree" in q.describe()
    elif "itself" in q.trees:
        assert q.trees["itself"][1] <= max(chains, 1.0)


def test_the_dtype_is_the_one_expected_to_decode_fastest() -> None:
    def planned(predicted: float, t1_ms: float) -> plan.Plan:
        costs = plan.Costs(verify_cost=(1.0, 1.1), c={"d": 0.1}, t1_ms=t1_ms)
        return plan.Plan("d", 1, predicted, {"d": 0.6}, costs, 0.0)

    # bfloat16 expects less speedup over a faster forward: 1.5 / 40 ms beats 1.8 / 52 ms
    plans = {torch.bfloat16: planned(1.5, 40.0), torch.float32: planned(1.8, 52.0)}
    assert plan.choose_dtype(plans) == torch.bfloat16  # not the larger speedup
    plans[torch.bfloat16] = planned(1.5, 60.0)  # emulated bfloat16: a slower forward
    assert plan.choose_dtype(plans) == torch.float32  # not the faster forward alone
    plans[torch.float32] = planned(1.0, 70.0)  # nothing gains in float32, and it is slower
    assert plan.choose_dtype(plans) == torch.bfloat16


def test_setups_are_timed_in_the_same_rounds_of_the_one_instrument(micro, monkeypatch) -> None:
    sweeps = []  # the setups of each call of timing.loop_costs
    real = plan.timing.loop_costs

    def spy(setups, *args, **kwargs):
        sweeps.append(set(setups))
        return real(setups, *args, **kwargs)

    monkeypatch.setattr(plan.timing, "loop_costs", spy)
    setups = {"a": (micro, _candidates(micro)), "b": (micro, {"x": _candidates(micro)["itself"]})}
    costs = plan.measure_costs_together(setups, IDS, max_tokens=3, repeats=1)
    assert sweeps[0] == {"a", "b"}  # one sweep: a drift of the machine's speed reaches both
    assert all(s <= {"a", "b"} for s in sweeps[1:])  # any re-timing of a suspect r(k) < 1
    n = len(sweeps)
    assert set(costs["a"].c) == {"itself", "slow"} and set(costs["b"].c) == {"x"}
    assert all(len(c.verify_cost) == 3 and c.verify_cost[0] == 1.0 for c in costs.values())
    assert costs["a"].c["slow"] > 2  # the 30 ms sleep is charged to its own setup's step
    one = plan.measure_costs(micro, _candidates(micro), IDS, max_tokens=3, repeats=1)
    assert set(one.c) == {"itself", "slow"} and len(sweeps) > n


def test_a_measured_r_below_one_is_re_timed_and_said(micro, monkeypatch, capsys) -> None:
    """A k-token forward faster than a one-token one is suspect: the plan times again, says so,
    and says so again when the second reading agrees."""
    calls = []

    def fake(setups, ks, repeats=5, *args, **kwargs):
        calls.append(repeats)
        return {
            key: {
                "t": {k: 1.0 if k == 1 else 0.9 for k in ks},
                "step": dict.fromkeys(s.steps, 0.1),
                "prefill": 2.0,
            }
            for key, s in setups.items()
        }

    monkeypatch.setattr(plan.timing, "loop_costs", fake)
    costs = plan.measure_costs(micro, {"itself": _candidates(micro)["itself"]}, IDS, 3, repeats=2)
    said = capsys.readouterr().out
    assert calls == [2, 5] and "suspect" in said and "again" in said
    assert costs.verify_cost[1] == 0.9


def test_the_dtypes_line_shows_plain_decodings_rate_beside_its_ratios() -> None:
    costs = plan.Costs(verify_cost=(1.0, 0.8, 1.1), c={"d": 0.1}, t1_ms=50.0)
    planned = plan.Plan("d", 1, 1.5, {"d": 0.6}, costs, 0.0)
    said = plan.describe_dtypes({torch.float32: planned}, torch.float32)
    assert "plain decoding 20 tokens/s" in said  # 1000 / 50 ms
    assert "t(k)/t(1) for k = 1..3: 1.00 0.80 1.10" in said


def test_a_fixed_setting_is_said_against_the_plan() -> None:
    costs = plan.Costs(verify_cost=(1.0, 1.1, 1.2, 1.3, 1.5), c={"d": 0.1}, t1_ms=5.0)
    planned = plan.Plan("d", 3, theory.speedup(0.8, 3, 0.1, 1.3), {"d": 0.8}, costs, 0.0)
    fixed = theory.speedup(0.8, 1, 0.1, 1.1)
    line = planned.against("d", 1)
    assert line.startswith(f"the plan would pick d, γ = 3, expected {planned.predicted:.2f}x")
    assert f"the d at the fixed γ = 1 is expected {fixed:.2f}x" in line
    assert line.endswith(f"{fixed / planned.predicted:.0%} of the plan's")
    assert "unmeasured" in planned.against("d", 7)  # beyond the measured r(k)
    plain = replace(planned, drafter=None, gamma=0, predicted=1.0)
    assert plain.against("d", 1).startswith("the plan would pick plain decoding, expected 1.00x")
    tree_plan = replace(planned, tree=(2, 1))
    assert "as the token tree (2, 1)" in tree_plan.against("d", 1)


def test_the_plan_charges_a_rounds_first_drafting_step_once() -> None:
    """`Costs.first`: a round's first drafting step, right after the verify, costs more than the
    others (measured 0.15 against 0.07 on the embedded pair): best γ and every expected speedup
    pay it once per round, and the plan's description says it."""
    r = (1.0, 1.1, 1.12, 1.14, 1.16, 1.18, 1.2)
    warm = plan.Costs(verify_cost=r, c={"d": 0.07}, t1_ms=6.6)
    cold = replace(warm, first={"d": 0.15})
    warm_plan, cold_plan = (plan.Plan("d", 4, 2.0, {"d": 0.7}, c, 0.0) for c in (warm, cold))
    assert cold_plan.best("d") == theory.best_gamma(0.7, 0.07, r, 0.15)
    assert cold_plan.expected("d", 4) == theory.speedup(0.7, 4, 0.07, r[4], 0.15)
    assert cold_plan.expected("d", 4) < warm_plan.expected("d", 4)
    assert "a round's first step 0.150" in cold_plan.describe()
    assert "first step" not in warm_plan.describe()


def test_the_loops_own_work_is_the_wall_time_outside_every_forward(micro) -> None:
    """`loop_share`: wall time less the target's and the drafter's seconds, per round (per token
    of plain decoding), over t(1); the plan charges it (`theory.round_speedup`) and says it."""
    rounds = decoding.GenerationStats(accepted=[1, 0, 2, 4], gammas=[4] * 4, new_tokens=11)
    rounds.wall_time, rounds.target_time, rounds.draft_time = 1.0, 0.6, 0.2
    assert plan.loop_share(rounds, t1_ms=50.0) == pytest.approx(0.2 / 4 / 0.05)
    plain = decoding.GenerationStats(new_tokens=10)
    plain.wall_time, plain.target_time = 1.0, 0.9
    assert plan.loop_share(plain, t1_ms=50.0) == pytest.approx(0.1 / 10 / 0.05)
    rounds.draft_time = float("nan")  # a drafter that does not count its time: unknown, 0
    assert plan.loop_share(rounds, 50.0) == 0.0
    plain.target_time = 1.2  # clocks that disagree never make the loop's work negative
    assert plan.loop_share(plain, 50.0) == 0.0
    r = (1.0, 1.1, 1.12, 1.14, 1.16, 1.18, 1.2)
    costs = plan.Costs(verify_cost=r, c={"d": 0.07}, t1_ms=6.6, first={"d": 0.15})
    free = plan.Plan("d", 4, 2.0, {"d": 0.7}, costs, 0.0)
    paid = replace(free, loop={"d": 0.06}, plain_loop=0.04)
    assert paid.best("d") == theory.best_gamma(0.7, 0.07, r, 0.15, None, 0.06, 0.04)
    want = theory.round_speedup(theory.expected_tokens(0.7, 4), 4, 0.07, r[4], 0.15, 0.06, 0.04)
    assert paid.expected("d", 4) == pytest.approx(want)
    assert replace(free, loop={"d": 0.06}).expected("d", 4) < free.expected("d", 4)
    assert replace(free, plain_loop=0.04).expected("d", 4) > free.expected("d", 4)  # saved too
    assert "loop 0.060 a round" in paid.describe() and "plain decoding 0.040 a token" in (
        paid.describe()
    )
    made = plan.make_plan(micro, _candidates(micro), IDS, 0.0, max_tokens=3, probe_tokens=6)
    assert set(made.loop) == {"itself", "slow"} and made.plain_loop >= 0
    assert all(v >= 0 for v in made.loop.values())


def test_a_probe_too_short_to_draft_is_refused(micro) -> None:
    """A one-token probe drafts nothing (the budget leaves no room): no α, no depth rates."""
    for bad in (1, 0, 2.5):
        with pytest.raises(ValueError, match="probe_tokens must be an integer >= 2"):
            plan.make_plan(micro, _candidates(micro), IDS, 0.0, max_tokens=3, probe_tokens=bad)
