"""The bench's plan: its configuration and every method it times, as data (`Method`).

`plan(pair, cfg, plans)` lists the methods in the order `bench.run_methods` times them, which is
the rows' order: our greedy methods (autoregressive and every γ per runtime, the other drafters,
the tree and the course's own plan, `measure.plan`), transformers' generate, assisted generation
and prompt lookup, then ours at each sampling temperature. A drafted method carries its maker, `make(pair, runtime) -> (target,
drafter)`, called afresh for every run, which opens the method's sessions on its runtime.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specdec_lab import drafters, heads
from specdec_lab.engine import llama, sessions
from specdec_lab.measure.plan import Plan
from specdec_lab.models import Pair


@dataclass(frozen=True)
class BenchConfig:
    gammas: tuple[int, ...] = (2, 3, 4, 5, 6, 8)
    max_new_tokens: int = 64
    repeats: int = 3
    n_prompts: int = 4
    domain: str = "code"
    hf: bool = True  # include transformers' own generate, assisted generation and prompt lookup
    temperatures: tuple[float, ...] = (0.7, 1.0)  # sampled rows, every γ
    runtimes: tuple[str, ...] = ("lean", "hf")  # the first is the reference for speedups
    seed: int = 0  # prompt i samples with torch.Generator().manual_seed(seed + i)
    methods: bool = True  # rows for prompt lookup, the heuristic γ schedule and the draft head

    @property
    def statistic(self) -> str:
        """What a row's tokens/s is, in words, for the record and the CLI's header."""
        return f"fastest of {self.repeats} repeat{'' if self.repeats == 1 else 's'}"


QUICK = BenchConfig(gammas=(3,), max_new_tokens=16, repeats=1, n_prompts=1)


class Kind(str, enum.Enum):
    """What a method is; `Row.kind` holds the value."""

    AUTOREGRESSIVE = "ours autoregressive"
    SPECULATIVE = "ours speculative"  # a chain of γ drafts from the draft model
    DRAFTER = "ours other drafter"  # prompt lookup, heuristic γ, lookup-else-draft, draft head
    TREE = "tree"  # ours too: a token tree from the draft model
    PLANNED = "ours planned"  # what `measure.plan` chose: a drafter's chain at its γ, or a tree
    TRANSFORMERS = "transformers"  # transformers' own generate

    @property
    def ours(self) -> bool:
        return self is not Kind.TRANSFORMERS


# A maker returns the (target, drafter) one of our drafted runs decodes with, fresh per run.
Maker = Callable[[Pair, str], tuple[Any, Any]]


@dataclass(frozen=True)
class Method:
    """One row of the bench, as data: what runs, at which temperature, on which runtime.

    `name` is the display name (the README's table and the tests read it); nothing is parsed
    back from it. `make(pair, runtime)` builds the (target, drafter) of our drafted methods.
    A tree's `branching` is None in the plan: `bench.run_methods` chooses it once the chains
    ran.
    """

    name: str
    kind: Kind
    temperature: float = 0.0
    gamma: int | None = None  # drafts per step (the heuristic schedule's ceiling)
    branching: tuple[int, ...] | None = None  # tree shape: children per node, level by level
    runtime: str = "lean"
    make: Maker | None = None
    hf_settings: Mapping[str, Any] = field(default_factory=dict, hash=False)
    hf_assisted: Mapping[str, Any] = field(default_factory=dict, hash=False)  # generate() kwargs
    skip: str | None = None  # why it cannot run here (then it is reported, not timed)
    predicted: float | None = None  # the plan's expected speedup (planned methods)

    @property
    def ours(self) -> bool:
        return self.kind.ours


def bench_runtimes(pair: Pair, cfg: BenchConfig) -> list[str]:
    """`cfg.runtimes` that can run the pair: lean only where it covers both models."""
    lean_ok = all(llama.lean_support(m) is None for m in (pair.target, pair.draft))
    return [r for r in cfg.runtimes if r == "hf" or lean_ok]


def display_name(base: str, temperature: float, runtime: str) -> str:
    """The display name of one of our rows, e.g. "speculative γ=4 T=1 (ours, lean)"."""
    t = "" if temperature == 0 else f" T={temperature:g}"
    return f"{base}{t} (ours, {runtime})"


def _chain_pair(pair: Pair, runtime: str) -> tuple[Any, Any]:
    """Fresh sessions of the target and the draft model on `runtime` (a chain's or a tree's)."""
    vocab = pair.vocab_size
    return (
        sessions.open_session(pair.target, vocab, runtime),
        sessions.open_session(pair.draft, vocab, runtime),
    )


def _prompt_lookup_pair(pair: Pair, runtime: str) -> tuple[Any, Any]:
    """Drafts copied from the prompt and the text so far (no draft model)."""
    target = sessions.open_session(pair.target, pair.vocab_size, runtime)
    return target, drafters.PromptLookupDrafter(pair.vocab_size)


def _heuristic_gamma_pair(pair: Pair, runtime: str) -> tuple[Any, Any]:
    """The draft model with γ grown after full acceptance and shrunk after a rejection."""
    target, draft = _chain_pair(pair, runtime)
    return target, drafters.HeuristicGamma(drafters.ModelDrafter(draft))


def _lookup_then_model_pair(pair: Pair, runtime: str) -> tuple[Any, Any]:
    """Prompt lookup where it finds a match, the draft model elsewhere."""
    target, draft = _chain_pair(pair, runtime)
    return target, drafters.LookupThenModel(drafters.ModelDrafter(draft))


def _head_pair(pair: Pair, runtime: str, head: heads.DraftHead) -> tuple[Any, Any]:
    """The EAGLE-style draft head on the target's hidden states (a shared session)."""
    return heads.head_drafter(pair.target, head, pair.vocab_size, runtime)


def _other_drafters(pair: Pair) -> list[tuple[str, int, Maker]]:
    """(name, γ, maker) of the drafting methods beside the draft model's chain. A draft head
    belongs to its target, so it runs where the registry's pair has one saved here."""
    out: list[tuple[str, int, Maker]] = [
        ("prompt lookup γ=4", 4, _prompt_lookup_pair),
        ("heuristic γ≤10", 10, _heuristic_gamma_pair),
        ("lookup, else draft γ=6", 6, _lookup_then_model_pair),
    ]
    if pair.head_dir is not None:
        out.append(("draft head γ=4", 4, _head_maker(pair)))
    return out


def _head_maker(pair: Pair) -> Maker:
    head = heads.load_head(pair.head_dir, pair.device, pair.dtype)
    return functools.partial(_head_pair, head=head)


def planned_method(
    pair: Pair, planned: Plan, temperature: float, runtime: str, new_tokens: int | None = None
) -> Method:
    """The plan's choice at `temperature` as a method: its drafter's chain at its γ, the draft
    model's token tree, or plain decoding where no drafter is expected to gain. A chain's
    predicted speedup is that of a whole call of `new_tokens` (`Plan.expected`: the prompt's
    forward and the drafter's start included, as the bench's clock sees a call); a tree's is
    its probe's, per round."""
    if planned.drafter is None:
        name = display_name("planned: plain decoding", temperature, runtime)
        return Method(name, Kind.PLANNED, temperature, runtime=runtime, predicted=1.0)
    make = _head_maker(pair) if planned.drafter == "draft head" else _chain_pair
    how = (
        f"γ={planned.gamma}" if planned.tree is None else "tree " + "-".join(map(str, planned.tree))
    )
    name = display_name(f"planned: {planned.drafter} {how}", temperature, runtime)
    predicted = planned.predicted
    if planned.tree is None and new_tokens is not None:
        predicted = planned.expected(planned.drafter, planned.gamma, new_tokens=new_tokens)
    return Method(
        *(name, Kind.PLANNED, temperature, planned.gamma, planned.tree, runtime, make),
        predicted=predicted,
    )


def _ours_at(
    temperature: float,
    runtimes: Sequence[str],
    gammas: Sequence[int],
    others: Sequence[tuple[str, int, Maker]],
    tree_row: bool,
) -> list[Method]:
    """Our methods at one temperature: per runtime autoregressive and every γ; then, greedy and
    at T = 1 only, the `others` and the tree on the first runtime."""
    out = []
    for rt in runtimes:
        name = display_name("autoregressive", temperature, rt)
        out.append(Method(name, Kind.AUTOREGRESSIVE, temperature, runtime=rt))
        for g in gammas:
            name = display_name(f"speculative γ={g}", temperature, rt)
            out.append(Method(name, Kind.SPECULATIVE, temperature, g, runtime=rt, make=_chain_pair))
    if temperature not in (0.0, 1.0):
        return out
    default = runtimes[0]
    for base, g, make in others:
        name = display_name(base, temperature, default)
        out.append(Method(name, Kind.DRAFTER, temperature, g, runtime=default, make=make))
    if tree_row:
        name = display_name("tree", temperature, default)  # named again once it has a shape
        out.append(Method(name, Kind.TREE, temperature, runtime=default, make=_chain_pair))
    return out


def _transformers_methods(pair: Pair) -> list[Method]:
    """transformers' generate, assisted generation (skipped, with the reason, where it cannot
    take the pair's draft) and prompt lookup; all greedy."""
    assisted = _hf_assisted_kwargs(pair)
    skip, assisted = (assisted, {}) if isinstance(assisted, str) else (None, assisted)
    hf = functools.partial(Method, kind=Kind.TRANSFORMERS, runtime="hf")
    return [
        hf("HF generate (greedy)"),
        hf("HF assisted (default schedule)", hf_assisted=assisted, skip=skip),
        hf("HF prompt lookup", hf_settings={"prompt_lookup_num_tokens": 10}),
    ]


def plan(pair: Pair, cfg: BenchConfig, plans: Mapping[float, Plan] | None = None) -> list[Method]:
    """Every method the bench times, in the order it times them (and the rows' order): our
    greedy methods, transformers' (if `cfg.hf`), then ours at each of `cfg.temperatures`; at each
    temperature in `plans` ({temperature: `measure.plan.Plan`}) also the plan's choice, last."""
    runtimes = bench_runtimes(pair, cfg)
    others = _other_drafters(pair) if cfg.methods else []
    plans = plans or {}

    def ours_at(t: float) -> list[Method]:
        out = _ours_at(t, runtimes, cfg.gammas, others, cfg.methods)
        if t not in plans:
            return out
        return [*out, planned_method(pair, plans[t], t, runtimes[0], cfg.max_new_tokens)]

    methods = ours_at(0.0)
    if cfg.hf:
        methods += _transformers_methods(pair)
    for t in cfg.temperatures:
        methods += ours_at(t)
    return methods


def _hf_assisted_kwargs(pair: Pair) -> dict[str, Any] | str:
    """generate() keywords for transformers' assisted generation with `pair.draft`, or the
    reason it cannot run. transformers refuses an assistant whose config.vocab_size differs
    (Qwen2.5-0.5B vs -7B pad to 151936 vs 152064) unless it gets both tokenizers: its universal
    assisted decoding then re-tokenizes the draft's text for the target."""
    same = pair.target.config.get_text_config().vocab_size == (
        pair.draft.config.get_text_config().vocab_size
    )
    if same:
        return {"assistant_model": pair.draft}
    if pair.tokenizer is None:
        return "the vocabulary sizes differ and the pair has no tokenizer to re-tokenize with"
    return {
        "assistant_model": pair.draft,
        "tokenizer": pair.tokenizer,
        "assistant_tokenizer": pair.tokenizer,
    }
