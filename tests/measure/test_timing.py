"""Tests for specdec_lab.measure.timing (notebook 04 §6): the interleaved runs and their summary.

A counting clock stands in for time, so nothing here depends on the machine's speed."""

from __future__ import annotations

import dataclasses
import functools
import itertools
from types import SimpleNamespace

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specdec_lab.measure import timing

VOCAB = 40


def tiny_llama(seed: int, layers: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=layers,
        num_attention_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def setup():
    pair = SimpleNamespace(target=tiny_llama(0, 2), device=torch.device("cpu"), vocab_size=VOCAB)
    drafts = {"small": tiny_llama(1, 1)}
    prompts = {"code": [torch.tensor([1, 2, 3, 4]), torch.tensor([5, 6, 7])]}
    return pair, drafts, prompts


def counting_clock():
    """Each call returns the next integer: every run takes exactly one 'second'."""
    ticks = itertools.count()
    return lambda: float(next(ticks))


def test_greedy_runs_equal_plain_decoding_and_their_summary(setup):
    pair, drafts, prompts = setup
    plan = {"code": [None, "small"]}
    runs, seconds = timing.timed_runs(
        pair, drafts, prompts, plan, 6, 3, rounds=2, clock=counting_clock(), progress=False
    )
    assert set(runs) == {("code", None), ("code", "small")}
    for plain, spec in zip(runs["code", None], runs["code", "small"], strict=True):
        assert torch.equal(plain.tokens, spec.tokens)  # greedy speculative == greedy plain
    assert all(s.tolist() == [1.0, 1.0] for s in seconds.values())  # the fastest of 1 s runs
    speed, gain, alpha = timing.speed_summary(runs, seconds, 6)
    assert speed == {("code", None): 6.0, ("code", "small"): 6.0}
    assert gain == {("code", "small"): 1.0}  # plain decoding has no gain, no α
    assert set(alpha) == {("code", "small")} and 0.0 <= alpha["code", "small"] <= 1.0


def test_sampled_runs_follow_their_seed_and_repeat_across_rounds(setup):
    pair, drafts, prompts = setup
    plan = {"code": [None, "small"]}

    def sampled(seed: int, rounds: int = 1):
        runs, _ = timing.timed_runs(
            pair, drafts, prompts, plan, 8, 3, rounds, counting_clock(),
            temperature=1.0, seed=seed, progress=False,
        )  # fmt: skip
        return [g.tokens.tolist() for key in sorted(runs, key=str) for g in runs[key]]

    greedy, _ = timing.timed_runs(pair, drafts, prompts, plan, 8, 3, 1, counting_clock())
    assert sampled(0) == sampled(0, rounds=3)  # one seed, one set of runs, whatever the rounds
    assert sampled(0) != sampled(1)
    assert sampled(0) != [g.tokens.tolist() for key in sorted(greedy, key=str) for g in greedy[key]]


def test_seconds_are_the_fastest_round(monkeypatch):
    ticks = iter([0.0, 1.0, 0.0, 5.0, 10.0, 12.0, 20.0, 23.0])  # warm-up, then 5 s, 2 s, 3 s

    def run_timed(pair, ids, draft, n_new, gamma, clock, **sampling):
        start = clock()
        return SimpleNamespace(stats=None), clock() - start

    monkeypatch.setattr(timing, "run_timed", run_timed)
    pair = SimpleNamespace(device=torch.device("cpu"), vocab_size=VOCAB)
    prompts, plan = {"code": [torch.tensor([1])]}, {"code": [None]}
    _, seconds = timing.timed_runs(pair, {}, prompts, plan, 4, 2, 3, lambda: next(ticks))
    assert seconds["code", None].tolist() == [2.0]


def test_forward_costs_time_target_verify_and_drafts_in_the_same_rounds(setup, monkeypatch):
    """c and r come from one call of the one instrument (`loop_costs`): every round times the
    target's one-token forward, its verification and each draft (NB04 read c = 0.075 and 0.097
    from one pair when they were timed one after the other)."""
    pair, drafts, _ = setup
    calls: list[tuple] = []
    real = timing.loop_costs

    def spying(setups, ks, *args, **kwargs):
        calls.append(({key: set(s.steps) for key, s in setups.items()}, list(ks)))
        return real(setups, ks, *args, **kwargs)

    monkeypatch.setattr(timing, "loop_costs", spying)
    drafts = drafts | {"itself": pair.target}
    t1, t_verify, t_draft = timing.forward_costs(pair, drafts, 3, repeats=2)
    assert calls == [({None: {"small", "itself"}}, [4])]  # one call: one set of rounds
    assert min(t1, t_verify, *t_draft.values()) > 0
    assert set(t_draft) == {"small", "itself"}


class _Recorder:
    """A session that logs its forwards: (name, new tokens) per call of `logits`."""

    def __init__(self, name: str, log: list, vocab_size: int = VOCAB) -> None:
        self.name, self.log, self.vocab_size, self.cached = name, log, vocab_size, 0
        self.device = torch.device("cpu")

    def logits(self, ids: torch.Tensor, last: int | None = None) -> torch.Tensor:
        self.log.append((self.name, ids.shape[0] - self.cached))
        self.cached = ids.shape[0]
        return torch.zeros(1, self.vocab_size)

    def crop(self, length: int) -> None:
        self.cached = length


def test_loop_costs_runs_the_forwards_in_the_loops_order() -> None:
    """Each round: plain decoding's one-token forwards in a row (t(1) never read right after a
    larger forward), then per k the draft's k - 1 one-token steps and the target's k-token
    verify, as speculative decoding runs them; last, a call's start: the prompt's forward."""
    log: list = []
    target, draft = _Recorder("p", log), _Recorder("q", log)
    built = timing.session_setup(target, {"q": draft}, prefix=4, max_k=3)
    log.clear()
    ticks = itertools.count()
    out = timing.loop_costs(
        {None: built}, [1, 3], repeats=1, warmups=0, plain=3, clock=lambda: next(ticks)
    )
    assert log == [("p", 1), ("p", 1), ("p", 1), ("q", 1), ("q", 1), ("p", 3), ("p", 4)]
    assert set(out[None]["t"]) == {1, 3} and set(out[None]["step"]) == {"q"}
    assert out[None]["prefill"] == 1 and out[None]["start"] == {}  # one tick per forward
    with pytest.raises(ValueError, match="repeats"):
        timing.loop_costs({None: built}, [1], repeats=0)


def test_loop_costs_keeps_a_rounds_first_drafting_step_apart() -> None:
    """A draft step right after a target forward runs cold (here 3 ticks, then 1): "first" is
    the fastest first step of a round, "step" the fastest of any."""
    log: list = []
    elapsed = [0]

    class Costed(_Recorder):  # each forward advances the clock by what it costs
        def logits(self, ids, last=None):
            cold = bool(log) and log[-1][0] == "p"
            out = super().logits(ids, last)
            elapsed[0] += 10 if self.name == "p" else (3 if cold else 1)
            return out

    target, draft = Costed("p", log), Costed("q", log)
    built = timing.session_setup(target, {"q": draft}, prefix=4, max_k=4)
    out = timing.loop_costs({None: built}, [1, 2, 4], repeats=2, clock=lambda: elapsed[0])
    assert out[None]["first"] == {"q": 3} and out[None]["step"] == {"q": 1}
    assert out[None]["t"] == {1: 10, 2: 10, 4: 10}


def test_loop_costs_of_a_target_alone_times_its_forwards() -> None:
    """Without drafters (plain decoding's t(k)/t(1) alone) each round is the one-token forwards,
    then each k-token verify, and no drafting step."""
    log: list = []
    target = _Recorder("p", log)
    built = timing.session_setup(target, {}, prefix=4, max_k=3)
    log.clear()
    ticks = itertools.count()
    out = timing.loop_costs(
        {None: built}, [1, 2, 3], repeats=1, warmups=0, plain=2, clock=lambda: next(ticks)
    )
    assert log == [("p", 1), ("p", 1), ("p", 2), ("p", 3), ("p", 4)]
    assert set(out[None]["t"]) == {1, 2, 3} and out[None]["step"] == {}


def test_loop_costs_times_a_calls_start_from_an_empty_cache() -> None:
    """A call's start: the target's forward over the whole prompt, then each drafter's start
    (`Setup.starts`, a draft model reading the prompt itself) after rolling it back to empty;
    both the fastest of their rounds, on the clock each forward advances by its tokens."""
    log: list = []
    elapsed = [0]

    class Costed(_Recorder):
        def logits(self, ids, last=None):
            before = self.cached
            out = super().logits(ids, last)
            elapsed[0] += (ids.shape[0] - before) * (10 if self.name == "p" else 1)
            return out

    target, draft = Costed("p", log), Costed("q", log)
    built = timing.session_setup(target, {"q": draft}, prefix=4, max_k=3)
    start = (functools.partial(draft.logits, built.longer[:4]), functools.partial(draft.crop, 0))
    built = dataclasses.replace(built, starts={"q": start})
    log.clear()
    out = timing.loop_costs(
        {None: built}, [1, 2], repeats=2, warmups=0, plain=2, clock=lambda: elapsed[0]
    )
    assert log[-2:] == [("p", 4), ("q", 4)]  # the prompt's forward, then the draft's over it
    assert out[None]["prefill"] == 40 and out[None]["start"] == {"q": 4}
    assert out[None]["t"] == {1: 10, 2: 20} and out[None]["step"] == {"q": 1}


@pytest.mark.parametrize(
    ("speedup", "said"),
    [
        (1.2, "faster than plain decoding"),
        (1.04, "within noise of 1x"),
        (0.96, "within noise of 1x"),
        (0.9, "slower than plain decoding"),
    ],
)
def test_verdict_says_within_noise_near_one(speedup, said):
    assert timing.verdict(speedup) == said
