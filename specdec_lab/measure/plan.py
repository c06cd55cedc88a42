"""The course's own plan, made on this machine: which drafter, and which γ (notebook 04's rule).

`make_plan(target, drafters, ids, temperature)` does in a few seconds what notebooks 04 and 05
do by hand:

1. **Costs.** t(k), the target's forward over k = 1..K new tokens, and one drafting step of
   every candidate, through the sessions the decoding loop uses, timed by the course's one
   instrument in the order the loop runs them (`timing.loop_costs`, the minimum of its rounds):
   r(k) = t(k) / t(1), c = t(step) / t(1), and c of a round's first step, right after the
   target's verify (`first`: it can run slower, its weights pushed out of the cache); and a
   call's start, the target's forward over the prompt (`prefill`) and a draft model's own
   (`start`), which `Plan.expected(..., new_tokens=n)` charges a whole call of n tokens.
2. **α.** A short probe: `probe_tokens` tokens of speculative decoding with each candidate at
   the run's temperature, on the prompt at hand, or pooled over several (the bench's). It
   keeps α and the acceptance rate at each draft depth (`theory.depth_rates`), which can climb
   with depth, so that α probed at one γ does not mispredict another.
3. **The loops' own work.** What each probe spent outside every forward (sampling, the
   acceptance rule, bookkeeping), per round, and plain decoding's per token from a short run
   of it on the first prompt (`loop_share`), each over t(1).
4. **γ.** `theory.best_gamma(α, c, r, first, rates, loop, plain_loop)` per candidate: the
   expected speedup E(γ)(1 + plain_loop) / (first + (γ − 1)c + r(γ + 1) + loop), E from the
   depth rates, maximised over γ. The plan is the candidate with the best one, or plain
   decoding when none beats 1.
5. **Chain or tree.** Where a candidate is a draft model (`trees`), the token tree that
   notebook 06's `tree.choose_branching` picks at its α, c and r, probed itself
   (`probe_tree`): chosen when its expected speedup beats every chain's.
6. **dtype.** Where a pair may run in two dtypes (bfloat16 on a CPU that computes it natively,
   or float32), `choose_dtype` takes the plan expected to decode fastest: its expected speedup
   over its own t(1), since plain decoding itself runs at one token per t(1).

A candidate is `make() -> (target, drafter)`, fresh objects for `decoding.speculative_generate`
(a draft model's sessions, or a draft head's shared session and drafter).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial

import torch

from specdec_lab import decoding, inputs, theory, tree
from specdec_lab.engine import sessions
from specdec_lab.measure import timing
from specdec_lab.sampling import SamplingConfig

Candidate = Callable[[], tuple[object, object]]  # make() -> (target, drafter)
Prompts = torch.Tensor | list[torch.Tensor]  # one prompt's ids, or several


@dataclass(frozen=True)
class Costs:
    """What the machine charges: r(k) = t(k) / t(1) for k = 1..K, and c per candidate: of any
    drafting step (`c`) and of a round's first, right after the target's verify (`first`;
    a candidate missing there pays c for it too). A generation call's start, over t(1): the
    target's forward over the prompt (`prefill`), and a candidate's own forward over it where
    it reads the prompt itself (`start`: a draft model; a head reads the target's states)."""

    verify_cost: tuple[float, ...]
    c: dict[str, float]
    t1_ms: float  # the target's one-token forward
    first: dict[str, float] = field(default_factory=dict)
    prefill: float = 0.0
    start: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    """What to run, and why. `gamma` 0 means plain decoding (no candidate gains)."""

    drafter: str | None  # the chosen candidate's name; None: plain decoding
    gamma: int
    predicted: float  # expected speedup over plain decoding at `gamma`
    alpha: dict[str, float]  # probed, per candidate
    costs: Costs
    seconds: float  # what planning took
    # {name: (shape, expected speedup)} of the token trees considered; `tree` is the chosen one
    trees: dict[str, tuple[tuple[int, ...], float]] = field(default_factory=dict)
    tree: tuple[int, ...] | None = None
    # {name: acceptance rate at draft depth 1, 2, ...}: the probe's (`theory.depth_rates`)
    rates: dict[str, tuple[float, ...]] = field(default_factory=dict)
    # the loops' own work outside the forwards, over t(1) (`loop_share`): per round of each
    # candidate's probe, and per token of plain decoding's
    loop: dict[str, float] = field(default_factory=dict)
    plain_loop: float = 0.0

    def best(self, name: str) -> tuple[int, float]:
        """(best γ, expected speedup) of candidate `name`: `theory.best_gamma` on its inputs."""
        c, first = self.costs.c[name], self.costs.first.get(name)
        rates, loop = self.rates.get(name), self.loop.get(name, 0.0)
        return theory.best_gamma(
            *(self.alpha[name], c, self.costs.verify_cost, first, rates, loop, self.plain_loop)
        )

    def expected(
        self,
        name: str,
        gamma: int,
        alpha: float | None = None,
        new_tokens: int | None = None,
    ) -> float | None:
        """The expected speedup of candidate `name` at `gamma` (from its probed depth rates, or
        at `alpha`); None beyond the measured r(k). With `new_tokens`, that of a whole call of
        so many tokens, its start included (`theory.run_speedup`: the prompt's forward, and the
        candidate's own where it has one), as a clock around a call measures it."""
        r = self.costs.verify_cost
        if gamma >= len(r):
            return None
        if alpha is None and name in self.rates:
            tokens = theory.expected_tokens_at_depths(self.rates[name], gamma)
        else:
            tokens = theory.expected_tokens(self.alpha[name] if alpha is None else alpha, gamma)
        c, first, loop = self.costs.c[name], self.costs.first.get(name), self.loop.get(name, 0.0)
        if new_tokens is None:
            return theory.round_speedup(tokens, gamma, c, r[gamma], first, loop, self.plain_loop)
        return theory.run_speedup(
            *(tokens, gamma, c, r[gamma], new_tokens, self.costs.prefill),
            *(self.costs.start.get(name), first, loop, self.plain_loop),
        )

    def against(self, name: str, gamma: int) -> str:
        """One line for a notebook that fixes candidate `name` at `gamma` to teach: what the plan
        would pick, its expected speedup, and what the fixed setting is expected to give."""
        pick = (
            "plain decoding"
            if self.drafter is None
            else f"{self.drafter}, "
            + (f"γ = {self.gamma}" if self.tree is None else f"as the token tree {self.tree}")
        )
        fixed = self.expected(name, gamma)
        if fixed is None:
            return f"the plan would pick {pick}, expected {self.predicted:.2f}x (γ = {gamma}: unmeasured)"
        return (
            f"the plan would pick {pick}, expected {self.predicted:.2f}x; the {name} at the fixed "
            f"γ = {gamma} is expected {fixed:.2f}x, {fixed / self.predicted:.0%} of the plan's"
        )

    def describe(self) -> str:
        """The plan and its inputs, in a few lines."""
        r = " ".join(f"{x:.2f}" for x in self.costs.verify_cost[1:6])
        lines = [
            f"  t(1) = {self.costs.t1_ms:.1f} ms; r(k) = t(k)/t(1) for k = 2..6: {r}; "
            f"the prompt's forward {self.costs.prefill:.2f}"
        ]
        if self.loop:
            lines.append(
                f"  the loops' own work, in t(1): plain decoding {self.plain_loop:.3f} a token;"
                " speculative decoding, per round below"
            )
        for name, alpha in self.alpha.items():
            c, first = self.costs.c[name], self.costs.first.get(name)
            gamma, gain = self.best(name)
            cold = "" if first is None else f" (a round's first step {first:.3f})"
            rates = self.rates.get(name, ())
            depths = (
                " [by depth " + " ".join("—" if math.isnan(h) else f"{h:.2f}" for h in rates) + "]"
                if len(rates) > 1
                else ""
            )
            extra = f", loop {self.loop[name]:.3f} a round" if name in self.loop else ""
            if name in self.costs.start:
                extra += f", its forward over the prompt {self.costs.start[name]:.2f}"
            lines.append(
                f"  {name}: α ≈ {alpha:.2f} (probe){depths}, c = {c:.3f}{cold}{extra}"
                f" -> best γ = {gamma}, expected {gain:.2f}x"
            )
        how = f"γ = {self.gamma}" if self.tree is None else f"as the token tree {self.tree}"
        chosen = (
            "plain decoding (no drafter is expected to gain)"
            if self.drafter is None
            else f"{self.drafter}, {how}, expected {self.predicted:.2f}x"
        )
        for name, (shape, gain) in self.trees.items():
            lines.append(
                f"  {name}, as a token tree {shape}: expected {gain:.2f}x (from the tree's own "
                f"probe)"
            )
        lines.append(f"  plan: {chosen}   [planned in {self.seconds:.1f} s]")
        return "\n".join(lines)


def make_plan(
    target_model,
    candidates: dict[str, Candidate],
    ids: Prompts,
    temperature: float,
    vocab_size: int | None = None,
    costs: Costs | None = None,
    max_tokens: int = 9,
    probe_tokens: int = 32,
    probe_gamma: int = 4,
    repeats: int = 5,
    seed: int = 0,
    trees: dict[str, object] | None = None,
) -> Plan:
    """Measure (unless given `costs`, say those of a plan at another temperature), probe and
    choose (see the module's docstring). t(k) is measured for k up to `max_tokens`, so
    γ ≤ max_tokens - 1. `trees` ({candidate name: its draft model}) also weighs a token tree
    drafted by that model (`probe_tree`), chosen when it is expected to beat every chain."""
    if not isinstance(candidates, dict) or not candidates:
        raise ValueError(
            "candidates must be a non-empty dict {name: make() -> (target, drafter)}, got "
            f"{candidates!r:.40}: take a pair's with plan.pair_candidates(pair)"
        )
    if not inputs.is_count(probe_tokens, least=2):
        raise ValueError(
            f"probe_tokens must be an integer >= 2 (a probe of one token drafts nothing, so it "
            f"measures no α), got {probe_tokens!r}"
        )
    start = time.perf_counter()
    if costs is None:  # on the first prompt
        costs = measure_costs(
            target_model, candidates, _prompts(ids)[0], max_tokens, repeats, vocab_size
        )
    probed = {
        name: probe(make, ids, temperature, probe_tokens, probe_gamma, vocab_size, seed)
        for name, make in candidates.items()
    }
    alpha = {name: stats.acceptance_rate for name, stats in probed.items()}
    rates = {
        name: theory.depth_rates(stats.accepted, stats.gammas) for name, stats in probed.items()
    }
    rates = {name: h for name, h in rates.items() if h}  # a probe that drafted nothing: α alone
    plain = decoding.autoregressive_generate(  # plain decoding's own loop work, first prompt
        *(target_model, _prompts(ids)[0], probe_tokens),
        temperature=temperature,
        generator=torch.Generator().manual_seed(seed),
        vocab_size=vocab_size,
    ).stats
    loop = {name: loop_share(stats, costs.t1_ms) for name, stats in probed.items()}
    plan = Plan(
        None,
        0,
        1.0,
        alpha,
        costs,
        0.0,
        rates=rates,
        loop=loop,
        plain_loop=loop_share(plain, costs.t1_ms),
    )
    best = {name: plan.best(name) for name in candidates}
    choice = max(best, key=lambda name: best[name][1])
    gamma, predicted = best[choice] if best[choice][1] > 1.0 else (0, 1.0)
    considered, shape = {}, None
    for name, draft in (trees or {}).items():
        probed = probe_tree(
            target_model, draft, plan, name, ids, temperature, probe_tokens, vocab_size, seed
        )
        if probed is not None:
            considered[name] = probed
            if probed[1] > predicted:
                (shape, predicted), choice, gamma = probed, name, len(probed[0])
    return replace(
        plan,
        drafter=choice if gamma else None,
        gamma=gamma,
        predicted=predicted,
        seconds=time.perf_counter() - start,
        trees=considered,
        tree=shape,
    )


def choose_dtype(plans: dict[torch.dtype, Plan]) -> torch.dtype:
    """The dtype whose plan is expected to decode fastest: tokens per second ∝ speedup / t(1)."""
    return max(plans, key=lambda dtype: plans[dtype].predicted / plans[dtype].costs.t1_ms)


def plan_pairs(
    pairs: dict[object, object],
    ids: Prompts,
    temperatures: list[float],
    runtime: str = sessions.DEFAULT_RUNTIME,
    seed: int = 0,
    probe_tokens: int = 32,
    trees: bool = True,
    costs: dict[object, Costs] | None = None,
) -> dict[object, dict[float, Plan]]:
    """{key: {temperature: plan}} for loaded pairs ({key: pair}, say one pair in two dtypes),
    their costs timed in the same interleaved rounds (unless given) and α probed per
    temperature; `trees` also weighs a token tree of each pair's draft model."""
    setups = {key: (p.target, pair_candidates(p, runtime)) for key, p in pairs.items()}
    vocab_size = next(iter(pairs.values())).vocab_size
    if costs is None:
        costs = measure_costs_together(
            setups, _prompts(ids)[0], vocab_size=vocab_size, runtime=runtime
        )
    return {
        key: {
            t: make_plan(
                *(target, candidates, ids, t, vocab_size, costs[key]),
                probe_tokens=probe_tokens,
                seed=seed,
                trees={"draft model": pairs[key].draft} if trees else None,
            )
            for t in temperatures
        }
        for key, (target, candidates) in setups.items()
    }


def describe_dtypes(plans: dict[torch.dtype, Plan], chosen: torch.dtype) -> str:
    """Per dtype's plan: t(1), the expected speedup and tokens per second, then plain decoding's
    tokens per second beside t(k)/t(1) for k = 1..8 (so that a handicapped baseline shows). The
    chosen dtype is marked where there was a choice."""
    lines = []
    for dtype, planned in plans.items():
        rate = 1e3 * planned.predicted / planned.costs.t1_ms
        lines.append(
            f"  {str(dtype).removeprefix('torch.')}: t(1) = {planned.costs.t1_ms:.1f} ms, "
            f"expected {planned.predicted:.2f}x -> {rate:.0f} tokens/s"
            + ("   <- chosen" if dtype == chosen and len(plans) > 1 else "")
        )
        r = " ".join(f"{x:.2f}" for x in planned.costs.verify_cost[:8])
        lines.append(  # a k-token forward cheaper per call than one token: a handicapped baseline
            f"    plain decoding {1e3 / planned.costs.t1_ms:.0f} tokens/s; "
            f"t(k)/t(1) for k = 1..{min(8, len(planned.costs.verify_cost))}: {r}"
        )
    return "\n".join(lines)


def measure_costs(
    target_model,
    candidates: dict[str, Candidate],
    ids: torch.Tensor,
    max_tokens: int = 9,
    repeats: int = 5,
    vocab_size: int | None = None,
    clock: Callable[[], float] = time.perf_counter,
    runtime: str = sessions.DEFAULT_RUNTIME,
) -> Costs:
    """r(k) and c from one set of interleaved rounds (`measure_costs_together` of one setup)."""
    setups = {None: (target_model, candidates)}
    return measure_costs_together(setups, ids, max_tokens, repeats, vocab_size, clock, runtime)[
        None
    ]


def measure_costs_together(
    setups: dict[object, tuple[object, dict[str, Candidate]]],
    ids: torch.Tensor,
    max_tokens: int = 9,
    repeats: int = 5,
    vocab_size: int | None = None,
    clock: Callable[[], float] = time.perf_counter,
    runtime: str = sessions.DEFAULT_RUNTIME,
) -> dict[object, Costs]:
    """The costs of several setups ({key: (target model, candidates)}, say one pair in two
    dtypes) from the same interleaved rounds, so a change in the machine's speed reaches all;
    seconds on `clock`, the targets run by `runtime` (the candidates by their own)."""
    if not inputs.is_count(max_tokens, least=2):
        raise ValueError(
            f"max_tokens must be an integer >= 2 (t(k) is timed for k = 1 .. max_tokens, and a "
            f"draft of γ tokens needs t(γ + 1)), got {max_tokens!r}"
        )
    if not inputs.is_count(repeats):
        raise ValueError(f"repeats must be a positive integer, got {repeats!r}")
    built = {
        key: _cost_setup(target_model, candidates, ids, max_tokens, vocab_size, runtime)
        for key, (target_model, candidates) in setups.items()
    }
    ks = range(1, max_tokens + 1)
    t = timing.loop_costs(built, ks, repeats, clock)
    suspect = [key for key in built if any(t[key]["t"][k] < t[key]["t"][1] for k in ks)]
    if suspect:  # a k-token forward faster than a one-token one: re-time before planning on it
        print(
            "the plan: a measured r(k) < 1 (a k-token forward faster than one token) is suspect;"
            f" re-timing with {2 * repeats + 1} rounds"
        )
        again = timing.loop_costs({key: built[key] for key in suspect}, ks, 2 * repeats + 1, clock)
        t |= again
        still = [key for key in suspect if any(t[key]["t"][k] < t[key]["t"][1] for k in ks)]
        if still:
            print(
                "the plan: r(k) < 1 again after re-timing: this CPU runs a one-token forward"
                " slower than a k-token one (see the bench's t(k)/t(1))"
            )
    out = {}
    for key in built:
        t1 = t[key]["t"][1]
        r = tuple(t[key]["t"][k] / t1 for k in ks)
        c, first, start = (
            {name: s / t1 for name, s in t[key].get(of, {}).items()}
            for of in ("step", "first", "start")
        )
        out[key] = Costs(r, c, 1e3 * t1, first, t[key]["prefill"] / t1, start)
    return out


def pair_candidates(pair, runtime: str = sessions.DEFAULT_RUNTIME) -> dict[str, Candidate]:
    """The drafters a loaded pair offers (`Pair.drafters`: its draft model, and its draft head
    where it has one), each as `make() -> (target, drafter)`."""
    return {name: partial(pair.speculative, name, runtime) for name in pair.drafters}


def _cost_setup(target_model, candidates, ids, max_tokens, vocab_size, runtime) -> timing.Setup:
    """The `timing.Setup` of one target: its session (run by `runtime`) with `ids` cached, and
    one drafting step of each candidate with its rollback."""
    session = sessions.open_session(target_model, vocab_size, runtime)
    ids = inputs.check_prompt(ids)
    inputs.check_token_ids(ids, session.vocab_size)
    ids = ids.to(session.device)  # where the loop keeps them
    prefix = ids.shape[0]
    decoding.start_call([session], prefix + max_tokens)  # a session handed in starts afresh
    longer = torch.cat([ids, ids.new_zeros(max_tokens)])  # any tokens: the cost does not read them
    session.logits(ids)
    greedy = SamplingConfig(0.0)
    steps, starts = {}, {}
    for name, make in candidates.items():
        target, drafter = make()
        reads_target = getattr(drafter, "target", None) is target  # a head: the session's states
        if reads_target:
            target.logits(ids)
        crop = getattr(drafter, "crop", None)  # a draft model's cache: feed one token each time
        propose = partial(drafter.propose, ids, 1, greedy, None)
        steps[name] = (propose, partial(crop, prefix - 1) if crop else lambda: None)
        if crop and not reads_target:  # its call's first step reads the whole prompt
            starts[name] = (propose, partial(crop, 0))
    return timing.Setup(session, prefix, longer, steps, starts)


def probe(
    make: Candidate,
    ids: Prompts,
    temperature: float,
    tokens: int,
    gamma: int,
    vocab_size: int | None = None,
    seed: int = 0,
) -> decoding.GenerationStats:
    """The pooled counters of `tokens` tokens of speculative decoding after `ids`, over the
    prompts where `ids` is a list (prompt i sampled from a generator seeded seed + i): each
    round's drafts and how many it kept; `.acceptance_rate` is the probed α."""
    runs = []
    for i, prompt in enumerate(_prompts(ids)):
        target, drafter = make()
        gen = torch.Generator().manual_seed(seed + i)
        kw = dict(temperature=temperature, generator=gen, vocab_size=vocab_size)
        runs.append(decoding.speculative_generate(target, drafter, prompt, tokens, gamma, **kw))
    return decoding.GenerationStats.merge([run.stats for run in runs])


def loop_share(stats: decoding.GenerationStats, t1_ms: float) -> float:
    """A loop's own work, outside every forward (the target's and the drafter's): wall time less
    both, per round of speculative decoding (per token of plain decoding, which has no rounds),
    over t(1) = `t1_ms`. Measured, not assumed: on the embedded pair (AMD EPYC) it was 0.06 of
    t(1) a round greedy and 0.12 at T = 1. 0 where a drafter does not count its time (NaN)."""
    inside = stats.target_time + stats.draft_time
    per = len(stats.accepted) or stats.new_tokens
    if not per or not math.isfinite(inside):
        return 0.0
    return max(stats.wall_time - inside, 0.0) / per / (t1_ms / 1e3)


def _prompts(ids: Prompts) -> list[torch.Tensor]:
    """One prompt's ids, or several: a list either way."""
    return ids if isinstance(ids, list) else [ids]


def probe_tree(
    target_model,
    draft_model,
    plan: Plan,
    name: str,
    ids: Prompts,
    temperature: float,
    tokens: int,
    vocab_size: int | None = None,
    seed: int = 0,
) -> tuple[tuple[int, ...], float] | None:
    """(shape, expected speedup) of the token tree that `tree.choose_branching` picks for
    candidate `name` at its probed α and measured costs; None when that shape is a chain.

    The shape's own model treats siblings as independent tries at rate α, which overstates a
    tree's tokens per call (notebook 06), and its modelled cost (depth · c + r(nodes + 1)) leaves
    out the loop's own bookkeeping: on SmolLM2 in float32 it expected 1.96x of a tree (4,) that
    ran 1.60x. So the expected speedup is the probe's own: the tree's run against plain decoding
    of as many tokens, the two timed in the same interleaved round (`timing.interleaved`, one
    round, no warm-up: the candidates' probes ran first)."""
    alpha, c, r = plan.alpha[name], plan.costs.c[name], plan.costs.verify_cost
    shape = tree.choose_branching(alpha, c, r)
    if max(shape) == 1:
        return None
    kw = dict(temperature=temperature, vocab_size=vocab_size)

    def run(tree_shape, prompt, i):  # a token tree, or plain decoding (None), prompt i's seed
        gen = torch.Generator().manual_seed(seed + i)
        if tree_shape is None:
            return decoding.autoregressive_generate(
                target_model, prompt, tokens, generator=gen, **kw
            )
        return tree.tree_speculative_generate(
            target_model, draft_model, prompt, tokens, tree_shape, generator=gen, **kw
        )

    prompts = _prompts(ids)
    calls = {
        (how, i): partial(run, how, p, i) for i, p in enumerate(prompts) for how in (shape, None)
    }
    device = next(target_model.parameters()).device
    t = timing.interleaved(calls, repeats=1, device=device, warmups=0)
    plain, drafted = (sum(t[how, i] for i in range(len(prompts))) for how in (None, shape))
    return shape, plain / drafted
