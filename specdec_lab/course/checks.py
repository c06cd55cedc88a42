"""The check functions behind the exercises' check cells: one call per check cell.

A check cell of a course notebook is a line or two, e.g. ``checks.exercise_1_2(my_residual)``.
Each function here runs the learner's answer on cases chosen so that plausible wrong answers fail,
and raises ``AssertionError("Exercise N: <what is wrong>")`` with one sentence saying what is wrong
(`specdec_lab.course.exercises` and tests/wrong_answers/ test exactly that). It prints
``Exercise N: correct!`` when the answer passes.

Three rules hold for every check:

- **No delegation.** An exercise that re-implements a library function fails, with a sentence,
  when the answer only calls that function (`refuse_delegation`): its source is read for the name,
  and the library function is replaced by one that raises while the answer runs.
- **Predict, then measure.** Where an exercise asks for a prediction, the learner stores it in a
  variable (``prediction_1_3 = ...``), the check validates its form, then prints it next to the
  measurement. A wrong prediction is not an error: it is what the measurement is for.
- **A stub is not an answer.** A prediction left at ``None`` raises ``NotImplementedError``, as
  the stubs of the student notebooks do, after the answer's function has been checked.
"""

from __future__ import annotations

import ast
import inspect
import math
import re
import textwrap
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from specdec_lab import decoding, drafters, sampling, theory, verify
from specdec_lab.engine import sessions
from specdec_lab.measure import profiling
from specdec_lab.proof import mock, stats

# The library functions some exercises re-implement, captured before any check can patch them.
_REJECTION_SAMPLE = verify.rejection_sample
_RESIDUAL = verify.residual_distribution
_KV_CACHE_BYTES = profiling.kv_cache_bytes
_FIND_KNEE = profiling.find_knee
_TREE_ANCESTRY = sessions.tree_ancestry


# --- shared machinery ----------------------------------------------------------------------------


def source_names(obj: Any) -> set[str]:
    """Every name and attribute that the source of `obj` (a function or class) mentions.

    Strings and comments do not count. Returns an empty set when the source is not available.
    For a class: the names its methods mention, and the names of its base classes (the source
    of a class defined in a notebook cell cannot be read, but its methods' can)."""
    if inspect.isclass(obj):
        names = {base.__name__ for base in obj.__mro__[1:]}
        for member in vars(obj).values():
            if inspect.isfunction(member):
                names |= source_names(member)
        return names
    try:
        source = textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError):
        return set()
    try:
        tree = ast.parse(source)
    except SyntaxError:  # e.g. a lambda cut out of a larger expression: fall back to words
        return set(re.findall(r"[A-Za-z_]\w*", source))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
    return names


class refuse_delegation:  # noqa: N801 (used like a function: `with refuse_delegation(...):`)
    """Fail Exercise `exercise` if `answer` calls a library function it is meant to re-implement.

    `forbidden` maps a name to ``(owner, attribute)``. Creating the guard reads the answer's source
    for any of the names. Each ``with guard:`` block then replaces ``owner.attribute`` by a function
    that raises, so an indirect call is caught too; run only the answer inside the block (the
    check's own reference computation may need the library function). ``None`` instead of a pair:
    only the source is read. `task` ends the sentence "write <task> yourself".
    """

    def __init__(
        self,
        exercise: str,
        answer: Any,
        forbidden: dict[str, tuple[Any, str] | None],
        task: str,
    ) -> None:
        self.exercise, self.forbidden, self.task = exercise, forbidden, task
        self.patched: list[tuple[Any, str, Any]] = []
        used = sorted(source_names(answer) & set(forbidden))
        if used:
            raise AssertionError(
                f"Exercise {exercise}: your answer calls {used[0]}, the library's version of what "
                f"this exercise asks for: write {task} yourself"
            )

    def _refuse(self, name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError(
                f"Exercise {self.exercise}: your answer calls {name} (perhaps through another "
                f"function), the library's version of what this exercise asks for: write "
                f"{self.task} yourself"
            )

        return call

    def __enter__(self) -> refuse_delegation:
        for name, target in self.forbidden.items():
            if target is not None:
                owner, attribute = target
                self.patched.append((owner, attribute, getattr(owner, attribute)))
                setattr(owner, attribute, self._refuse(name))
        return self

    def __exit__(self, *exc: Any) -> None:
        for owner, attribute, original in reversed(self.patched):
            setattr(owner, attribute, original)
        self.patched = []


def require_prediction(
    exercise: str, prediction: Any, choices: Iterable[Any] | None = None
) -> None:
    """NotImplementedError while the prediction is None; AssertionError if it is not a choice."""
    if prediction is None or prediction is Ellipsis:
        raise NotImplementedError(
            f"Exercise {exercise}: write your prediction into the prediction variable first"
        )
    if choices is None:
        if not isinstance(prediction, (int, float)) or isinstance(prediction, bool):
            raise AssertionError(f"Exercise {exercise}: your prediction must be a number")
        if not math.isfinite(prediction):
            raise AssertionError(f"Exercise {exercise}: your prediction must be a finite number")
        return
    choices = list(choices)
    if prediction not in choices:
        raise AssertionError(
            f"Exercise {exercise}: your prediction must be one of {choices}, got {prediction!r}"
        )


def call_answer(exercise: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """fn(*args), with any error but AssertionError and NotImplementedError reported as wrong."""
    try:
        return fn(*args, **kwargs)
    except (AssertionError, NotImplementedError):
        raise
    except Exception as err:
        raise AssertionError(
            f"Exercise {exercise}: your answer raised {type(err).__name__}: {err}"
        ) from err


# --- notebook 00 ---------------------------------------------------------------------------------

KV_CHOICES = ("a thousand", "ten thousand", "a hundred thousand")


def exercise_0_1(kv_bytes_per_token: Callable[..., int], shapes: dict, prediction: str) -> float:
    """Exercise 0.1 against `profiling.kv_cache_bytes` on `shapes` ({name: ModelShape}); then the
    context length at which Llama-2 7B's fp16 KV cache weighs as much as its weights."""
    forbidden = {"kv_cache_bytes": (profiling, "kv_cache_bytes")}
    guard = refuse_delegation("0.1", kv_bytes_per_token, forbidden, "the count")
    for name, shape in shapes.items():
        config = shape.config()
        for width in (2, 4):
            with guard:
                got = call_answer("0.1", kv_bytes_per_token, config, width)
            want = _KV_CACHE_BYTES(config, 1, 1, width)
            assert got == want, (
                f"Exercise 0.1: {name} with {width}-byte values stores {want:,} bytes per "
                f"token, you say {got:,}"
            )
    require_prediction("0.1", prediction, KV_CHOICES)
    config = shapes["Llama-2 7B"].config()
    weights = 2 * profiling.param_count(config)  # fp16
    tokens = weights / _KV_CACHE_BYTES(config, 1, 1, 2)
    nearest = min(KV_CHOICES, key=lambda c: abs(math.log10(tokens) - (3 + KV_CHOICES.index(c))))
    print(
        f"Llama-2 7B: {_KV_CACHE_BYTES(config, 1, 1, 2) / 2**20:.2f} MiB of KV cache per token; "
        f"it outweighs the fp16 weights beyond {tokens:,.0f} tokens: about {nearest}. "
        f"You predicted {prediction}."
    )
    print("Exercise 0.1: correct!")
    return tokens


# --- notebook 01 ---------------------------------------------------------------------------------


def _random_instance(kind: str, generator: torch.Generator):
    """A random (draft_tokens, q_probs, p_probs) of one of four kinds (Exercise 1.1)."""
    gamma, vocab = int(torch.randint(1, 6, (), generator=generator)), 6
    p = (2 * torch.randn(gamma + 1, vocab, generator=generator)).softmax(-1)  # (γ+1, V)
    if kind == "truncated p":  # top-2 target: zeros where a draft may still propose
        p = sampling.logits_to_probs(p.log(), top_k=2)
    q = (2 * torch.randn(gamma, vocab, generator=generator)).softmax(-1)  # (γ, V)
    if kind == "q = p":
        q = p[:gamma].clone()
    drafts = sampling.sample(q, generator)  # (γ,) x_i ~ q_i
    if kind == "one-hot q":
        q = torch.nn.functional.one_hot(drafts, vocab).float()  # point-mass draft
    return drafts, q, p


INSTANCE_KINDS = ("random", "q = p", "one-hot q", "truncated p")


def exercise_1_1(rejection_sample_longhand: Callable, generator: torch.Generator, n: int = 2000):
    """Exercise 1.1: draw for draw against `verify.rejection_sample` on `n` random instances of
    four kinds, from the same generator state. Returns {kind: mean fraction of drafts kept}."""
    forbidden = {
        "rejection_sample": (verify, "rejection_sample"),
        "first_rejection": (verify, "first_rejection"),
        "multi_draft_sample": (verify, "multi_draft_sample"),
    }
    kept: dict[str, list[float]] = {kind: [] for kind in INSTANCE_KINDS}
    mismatches = []
    guard = refuse_delegation("1.1", rejection_sample_longhand, forbidden, "the acceptance rule")
    for trial in range(n):
        kind = INSTANCE_KINDS[trial % len(INSTANCE_KINDS)]
        instance = _random_instance(kind, generator)
        state = generator.get_state()
        with guard:
            mine = call_answer("1.1", rejection_sample_longhand, *instance, generator=generator)
        after_mine = generator.get_state()
        generator.set_state(state)  # rewind: the library sees the very same random stream
        theirs = _REJECTION_SAMPLE(*instance, generator=generator)
        same_draws = torch.equal(after_mine, generator.get_state())
        mine = (int(mine[0]), int(mine[1]))
        theirs = (int(theirs[0]), int(theirs[1]))
        if mine != theirs or not same_draws:
            mismatches.append((kind, mine, theirs, same_draws))
        kept[kind].append(theirs[0] / len(instance[0]))
    if mismatches:
        kind, mine, theirs, same_draws = mismatches[0]
        why = (
            "with the same random draws, so the rule itself differs"
            if same_draws
            else "and it drew different random numbers: draw the γ coins up front with "
            "torch.rand(gamma, generator=generator), then one sampling.sample for the last token"
        )
        raise AssertionError(
            f"Exercise 1.1: {len(mismatches)}/{n} instances differ from the library; on a "
            f"'{kind}' instance you return (n_accepted, token) = {mine}, the rule gives {theirs}, "
            f"{why}"
        )
    fractions = {kind: float(np.mean(v)) for kind, v in kept.items()}
    for kind, fraction in fractions.items():
        print(f"{kind:>12}: mean fraction of drafts kept {fraction:.2f}")
    print("Exercise 1.1: correct! Your longhand IS verify.rejection_sample, draw for draw.")
    return fractions


def exercise_1_2(my_residual: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
    """Exercise 1.2 against `verify.residual_distribution`, on q = p and other edge cases."""
    case = torch.Generator().manual_seed(2)
    p8 = torch.randn(8, generator=case).softmax(-1)
    cases = {
        "q = p": (p8, p8.clone()),
        "random": (p8, torch.randn(8, generator=case).softmax(-1)),
        "one-hot q": (p8, torch.nn.functional.one_hot(p8.argmax(), 8).float()),
        "disjoint supports": (torch.tensor([0.5, 0.5, 0, 0]), torch.tensor([0, 0, 0.3, 0.7])),
    }
    for i in range(50):
        vocab = int(torch.randint(2, 50, (), generator=case))
        cases[f"random #{i}"] = tuple(torch.randn(2, vocab, generator=case).mul(3).softmax(-1))
    forbidden = {"residual_distribution": (verify, "residual_distribution")}
    guard = refuse_delegation("1.2", my_residual, forbidden, "the residual and its guard")
    for name, (p, q) in cases.items():
        with guard:
            got = torch.as_tensor(call_answer("1.2", my_residual, p.clone(), q.clone()))
        want = _RESIDUAL(p, q)
        assert not torch.isnan(got).any(), (
            f"Exercise 1.2 ({name}): your residual contains NaN: guard the 0/0 case"
        )
        assert got.shape == want.shape, (
            f"Exercise 1.2 ({name}): shape {tuple(got.shape)}, want (V,) = {tuple(want.shape)}"
        )
        if name == "q = p" and not torch.allclose(got, want, atol=1e-6):
            raise AssertionError(
                f"Exercise 1.2 (q = p): the residual has no mass, and you return "
                f"{[round(x, 3) for x in got.tolist()]}: fall back to p itself"
            )
        assert torch.allclose(got, want, atol=1e-6), (
            f"Exercise 1.2 ({name}): got {[round(x, 4) for x in got.tolist()]}, expected "
            f"{[round(x, 4) for x in want.tolist()]}: is it max(0, p − q), normalised?"
        )
    print("Exercise 1.2: correct!")


class ContextFree:
    """A "model" whose next-token distribution ignores the context: (L,) ids -> (L, V) logits."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.vocab_size = logits.shape[0]
        self.row = logits  # (V,)

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        return self.row.expand(len(ids), -1)  # (L, V): the same row at every position


def exercise_1_3(predicted_discarded: Callable[[float, int], float], prediction: float) -> list:
    """Exercise 1.3: the prediction against discarded drafts measured on three context-free pairs
    (where independent coins hold exactly), within 4 standard errors, plus exact cases."""
    for alpha, gamma in [(0.0, 3), (0.5, 1), (0.5, 4), (0.9, 6), (0.3, 2)]:
        exact = gamma - sum(alpha**i for i in range(1, gamma + 1))
        got = float(call_answer("1.3", predicted_discarded, alpha, gamma))
        why = {
            -1.0: ": one too few, the rejected draft is discarded too",
            1.0: ": one too many, do you count tokens (n + 1) instead of kept drafts (n)?",
        }.get(round(got - exact, 6), "")
        assert abs(got - exact) < 1e-6, (
            f"Exercise 1.3: at α = {alpha}, γ = {gamma} a step discards {exact:.4f} drafts on "
            f"average, you say {got:.4f}{why}"
        )
    rows = []
    case = torch.Generator().manual_seed(13)  # its own stream: the pairs and the runs
    for noise, gamma in [(0.6, 2), (1.2, 4), (2.5, 6)]:
        row = 2 * torch.randn(16, generator=case)
        p_model, q_model = (
            ContextFree(row),
            ContextFree(row + noise * torch.randn(16, generator=case)),
        )
        alpha = float(verify.acceptance_rate(row.softmax(-1), q_model.row.softmax(-1)))  # exact α
        run = decoding.speculative_generate(
            p_model, q_model, torch.tensor([0]), 2000, gamma=gamma, generator=case
        ).stats
        wasted = np.array(
            [g - n for n, g in zip(run.accepted, run.gammas, strict=True) if g == gamma]
        )
        measured, se = wasted.mean(), wasted.std(ddof=1) / np.sqrt(len(wasted))
        predicted = float(call_answer("1.3", predicted_discarded, alpha, gamma))
        rows.append((alpha, gamma, predicted, measured, se))
        print(
            f"α = {alpha:.3f}, γ = {gamma}: you predict {predicted:.3f} discarded drafts per step, "
            f"measured {measured:.3f} ± {se:.3f} over {len(wasted)} steps"
        )
    for alpha, gamma, predicted, measured, se in rows:
        assert abs(predicted - measured) < 4 * se, (
            f"Exercise 1.3: at α = {alpha:.3f}, γ = {gamma} you predict {predicted:.3f} discarded "
            f"drafts per step, but {measured:.3f} ± {se:.3f} were measured"
        )
    require_prediction("1.3", prediction)
    exact = float(predicted_discarded(0.5, 4))
    print(
        f"α = 0.5, γ = 4: your formula gives {exact:.4f}; before writing it you predicted {prediction}"
    )
    print("Exercise 1.3: correct!")
    return rows


# --- notebook 02 ---------------------------------------------------------------------------------

SIZE_CHOICES = ("smaller", "equal", "larger")


def exercise_2_1(
    samples_to_catch: Callable[[float, float, int], int],
    prediction: str,
    p6: torch.Tensor,
    tol: float,
    delta: float,
    n_outcomes: int,
    n_seq: int,
) -> dict[int, float]:
    """Exercise 2.1: the smallest N on five cases, then a measurement at that N and at N/4 on a
    law exactly d = 0.2 away from `p6`. Returns {N: fraction of 200 runs that caught the bug}."""

    def guaranteed(d: float, dl: float, k: int, n: int) -> float:
        return stats.power_lower_bound(d, stats.tv_tolerance(n, dl, k), n, k)

    forbidden = {"samples_needed": (stats, "samples_needed")}
    guard = refuse_delegation("2.1", samples_to_catch, forbidden, "the sizing")
    for d, dl, k in [
        (0.12, 1e-6, 27),
        (0.2, 1e-3, 6),
        (0.05, 1e-6, 8),
        (0.3, 0.01, 2),
        (0.08, 1e-4, 16),
    ]:
        with guard:
            n = int(call_answer("2.1", samples_to_catch, d, dl, k))
        assert guaranteed(d, dl, k, n) >= 1 - dl, (
            f"Exercise 2.1: samples_to_catch({d}, {dl}, {k}) = {n}, but with {n} samples the bound "
            f"only guarantees a catch with probability {guaranteed(d, dl, k, n):.6f}: too few"
        )
        assert guaranteed(d, dl, k, n - 1) < 1 - dl, (
            f"Exercise 2.1: samples_to_catch({d}, {dl}, {k}) = {n} is not the smallest: "
            f"{n - 1} samples already guarantee {guaranteed(d, dl, k, n - 1):.6f}"
        )
    require_prediction("2.1", prediction, SIZE_CHOICES)
    with guard:
        n_catch = int(samples_to_catch(2 * tol, delta, n_outcomes))
    truth = "smaller" if n_catch < n_seq else "equal" if n_catch == n_seq else "larger"
    print(
        f"to surely catch a bug 2t = {2 * tol} away: N = {n_catch}; N_SEQ = {n_seq}: {truth} "
        f"(you predicted {prediction})"
    )
    # Measure: a law exactly d away from p6 (mass d moved from its likeliest to its least likely
    # outcome), sampled N times, 200 times over, at the learner's N and at a quarter of it.
    d, dl = 0.2, 1e-3
    p_law = p6.double().numpy()
    p_law = p_law / p_law.sum()  # exactly 1 in float64, as numpy's sampler requires
    bug_law = p_law.copy()
    bug_law[p_law.argmax()] -= d
    bug_law[p_law.argmin()] += d
    with guard:
        n = int(samples_to_catch(d, dl, len(p_law)))
    rng = np.random.default_rng(21)
    caught = {}
    for size in (n, n // 4):
        runs = [
            stats.check_against_law(rng.choice(len(p_law), size=size, p=bug_law), p_law, dl)
            for _ in range(200)
        ]
        caught[size] = float(np.mean([not r.passed for r in runs]))
        print(f"N = {size:>4}: the check caught the bug in {caught[size]:.0%} of 200 runs")
    assert caught[n] == 1.0, f"Exercise 2.1: at your N = {n} the bug escaped in {1 - caught[n]:.0%}"
    print("Exercise 2.1: correct!")
    return caught


def exercise_2_2(ngram_drafter: type, length: int = 3, tol: float = 0.06, delta: float = 1e-6):
    """Exercise 2.2: proposals against transformers' prompt lookup on hand-made and random
    sequences, then the law of whole outputs with the drafter inside `speculative_generate`."""
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    forbidden = {
        "PromptLookupCandidateGenerator": None,
        "get_candidates": (PromptLookupCandidateGenerator, "get_candidates"),
        "PromptLookupDrafter": None,
        "PromptLookupDrafter.propose": (drafters.PromptLookupDrafter, "propose"),
        "hf_lookup": None,
        "transformers_lookup": None,
    }
    guard = refuse_delegation("2.2", ngram_drafter, forbidden, "the lookup")
    _check_lookup_cases(ngram_drafter, guard)
    _check_lookup_against_transformers(ngram_drafter, guard)
    check = _check_lookup_law(ngram_drafter, length, tol, delta)
    print("Exercise 2.2: correct!")
    return check


def _lookup_proposal(
    drafter: Any, ids: list[int], gamma: int, guard: refuse_delegation
) -> list[int]:
    """The drafter's proposal after `ids` (the answer runs inside `guard`), checked for shape,
    dtype and its one-hot q."""
    cfg = sampling.SamplingConfig(temperature=1.0)
    with guard:
        tokens, q = call_answer("2.2", drafter.propose, torch.tensor(ids), gamma, cfg, None)
    assert isinstance(tokens, torch.Tensor) and tokens.dtype == torch.long, (
        f"Exercise 2.2: tokens must be a LongTensor, got {tokens!r}"
    )
    assert tokens.dim() == 1 and len(tokens) <= gamma, (
        f"Exercise 2.2: at most γ = {gamma} tokens of shape (γ',), got shape {tuple(tokens.shape)}"
    )
    one_hot = torch.nn.functional.one_hot(tokens, drafter.vocab_size).float()  # (γ', V)
    assert isinstance(q, torch.Tensor) and q.shape == one_hot.shape and torch.equal(q, one_hot), (
        f"Exercise 2.2: q_probs must be one-hot on the proposed tokens {tokens.tolist()} "
        f"(shape {tuple(one_hot.shape)}): the drafter is deterministic; got {q!r}"
    )
    return tokens.tolist()


def _check_lookup_cases(ngram_drafter: type, guard: refuse_delegation) -> None:
    """Hand-made sequences, each with the rule it tests; then `calls` counts the proposals."""
    for ids, max_n, want, why in [
        ([2, 4, 0, 1, 2, 3, 9, 0, 1, 2], 3, [3, 9, 0], "the 3-gram (0, 1, 2) occurred before"),
        (
            [2, 4, 0, 1, 2, 3, 9, 0, 1, 2],
            1,
            [4, 0, 1],
            "max_n = 1: the leftmost 2 is at position 0",
        ),
        ([1, 5, 1, 7, 1], 1, [5, 1, 7], "the leftmost earlier 1 is at position 0, not 2"),
        ([5, 1, 6, 2, 1], 2, [6, 2, 1], "(2, 1) never occurred: back off to the 1-gram (1,)"),
        ([0, 1, 2], 2, [], "nothing occurred before: propose nothing"),
    ]:
        got = _lookup_proposal(ngram_drafter(10, max_n=max_n), ids, 3, guard)
        assert got == want, (
            f"Exercise 2.2: after {ids} with max_n = {max_n}, expected {want} ({why}), got {got}"
        )
    counted = ngram_drafter(10, max_n=2)
    _lookup_proposal(counted, [0, 1, 0], 2, guard)
    _lookup_proposal(counted, [0, 1, 0, 1], 2, guard)
    assert counted.calls == 2, f"Exercise 2.2: two calls to propose, but calls = {counted.calls}"


def _check_lookup_against_transformers(ngram_drafter: type, guard: refuse_delegation) -> None:
    """300 random sequences, vocabularies, max_n and γ: the same proposal as transformers'."""
    case = torch.Generator().manual_seed(22)
    for _ in range(300):
        vocab = int(torch.randint(2, 5, (), generator=case))
        size = int(torch.randint(2, 15, (), generator=case))
        ids = torch.randint(vocab, (size,), generator=case).tolist()
        max_n = int(torch.randint(1, 4, (), generator=case))
        gamma = int(torch.randint(1, 5, (), generator=case))
        got, want = (
            _lookup_proposal(ngram_drafter(vocab, max_n=max_n), ids, gamma, guard),
            drafters.transformers_lookup(ids, gamma, max_n),
        )
        assert got == want, (
            f"Exercise 2.2: after {ids} (max_n = {max_n}, γ = {gamma}) transformers proposes "
            f"{want}, you propose {got}"
        )


def _check_lookup_law(ngram_drafter: type, length: int, tol: float, delta: float):
    """The real test: the law of whole outputs, as in §2, with the n-gram table as the draft."""
    target = mock.MockLM(3, sharpness=2.0, seed=0)
    prompt = decoding.autoregressive_generate(target, [0], 9, temperature=0).tokens  # repetitive
    law = stats.exact_sequence_law(target, prompt, length)
    seqs, runs = [], []
    gen = torch.Generator().manual_seed(23)
    for _ in range(stats.samples_needed(tol, delta, 3**length)):
        run = decoding.speculative_generate(
            target, ngram_drafter(3, max_n=2), prompt, length, gamma=2, generator=gen
        )
        seqs.append(run.tokens.tolist())
        runs.append(run.stats)
    check = stats.check_against_law(stats.encode_sequences(seqs, 3), law, delta)
    pooled = decoding.GenerationStats.merge(runs)
    print(
        f"n-gram drafter: {check}; drafted {sum(pooled.gammas)}, accepted {sum(pooled.accepted)} "
        f"(α = {pooled.acceptance_rate:.2f}), {pooled.tokens_per_target_call:.2f} tokens per call"
    )
    assert check.passed, f"Exercise 2.2: the outputs do not follow the target's law: {check}"
    assert sum(pooled.gammas) > 0 and sum(pooled.accepted) > 0, (
        "Exercise 2.2: the drafter never proposed (or never had accepted) a token on a repetitive prompt"
    )
    return check


class AuditedSession:
    """A mock's session that checks, at every call, that its cache is still a prefix of `ids`."""

    def __init__(self, model: Any, role: str) -> None:
        self.inner, self.role = sessions.open_session(model), role
        self.vocab_size = self.inner.vocab_size
        self.seen = torch.empty(0, dtype=torch.long)  # the ids of the previous call
        self.positions = 0  # positions scored in total

    @property
    def calls(self) -> int:
        return self.inner.calls

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        cached = self.inner.cached
        assert torch.equal(ids[:cached], self.seen[:cached]), (
            f"Exercise 2.3: the {self.role} cache holds {self.seen[:cached].tolist()}, which is "
            f"not the start of the sequence {ids.tolist()}: crop it to the accepted tokens"
        )
        self.positions += len(ids) - cached
        self.seen = ids.clone()
        return self.inner.logits(ids)

    def crop(self, length: int) -> None:
        self.inner.crop(length)


def exercise_2_3(
    my_speculative_generate: Callable,
    target: Any,
    draft: Any,
    law: np.ndarray,
    generator: torch.Generator,
    length: int = 3,
    gamma: int = 2,
    delta: float = 1e-6,
    tol: float = 0.06,
) -> stats.EquivalenceCheck:
    """Exercise 2.3 on audited mock sessions: greedy exactness over drafts, γ and budgets, one
    target call per step, no re-scoring, then the law of whole outputs at T = 1 (`law`)."""
    forbidden = {
        "speculative_generate": (decoding, "speculative_generate"),
        "tree_speculative_generate": None,
    }
    guard = refuse_delegation("2.3", my_speculative_generate, forbidden, "the loop")

    def run_mine(draft_model: Any, prompt: torch.Tensor, m: int, g: int, temperature: float):
        p_s, q_s = AuditedSession(target, "target"), AuditedSession(draft_model, "draft")
        with guard:
            out = call_answer(
                "2.3", my_speculative_generate, p_s, q_s, prompt, m, g, temperature, generator
            )
        out = torch.as_tensor(out).long()
        assert out.shape == (m,), (
            f"Exercise 2.3: asked for {m} new tokens, got shape {tuple(out.shape)}"
        )
        return out, p_s, q_s

    for quality in (0.0, 0.5):  # greedy: every draft quality, γ and budget
        greedy_draft = mock.MockDraft(target, quality=quality, seed=3)
        for g in (1, 2, 4):
            for m in (1, 2, 5, 9):
                for start in ([0], [1, 2]):
                    prompt = torch.tensor(start)
                    mine, p_s, q_s = run_mine(greedy_draft, prompt, m, g, 0.0)
                    want = decoding.autoregressive_generate(target, prompt, m, temperature=0).tokens
                    ref = decoding.speculative_generate(
                        target, greedy_draft, prompt, m, g, temperature=0
                    )
                    case = f"(λ = {quality}, γ = {g}, {m} tokens after {start})"
                    assert torch.equal(mine, want), (
                        f"Exercise 2.3: greedy {case}: {mine.tolist()}, but the target alone "
                        f"writes {want.tolist()}"
                    )
                    assert p_s.calls == ref.stats.target_calls, (
                        f"Exercise 2.3: {p_s.calls} target calls {case}, but one per step is "
                        f"{ref.stats.target_calls}"
                    )
                    assert p_s.positions <= len(start) + p_s.calls * (g + 1), (
                        f"Exercise 2.3: the target scored {p_s.positions} positions {case}: do "
                        "not re-score the accepted tokens (crop only what was rejected)"
                    )
                    assert q_s.positions <= len(start) + 2 * q_s.calls, (
                        f"Exercise 2.3: the draft scored {q_s.positions} positions in "
                        f"{q_s.calls} calls {case}: do not re-score the accepted tokens"
                    )
    seqs = [
        run_mine(draft, torch.tensor([0]), length, gamma, 1.0)[0].tolist()
        for _ in range(stats.samples_needed(tol, delta, len(law)))
    ]
    check = stats.check_against_law(stats.encode_sequences(seqs, target.vocab_size), law, delta)
    print(f"your loop, T=1: {check}")
    assert check.passed, (
        f"Exercise 2.3: at T = 1 your outputs do not follow the target's law: {check}"
    )
    print("Exercise 2.3: correct!")
    return check


# --- notebook 03 ---------------------------------------------------------------------------------


def exercise_3_1(
    expected_step_tokens: Callable[[torch.Tensor, int], float],
    prediction: float,
    prompts: list[torch.Tensor],
    greedy_runs: list[Any],
    own_sample_alpha: Callable[..., torch.Tensor],
    gamma: int,
) -> float:
    """Exercise 3.1: hand-worked cases, then every full-γ step of the greedy runs predicted from
    α_t at T = 0 along each output. Returns the fraction of steps matched exactly."""
    toy = [  # (alpha_t, γ, expected tokens, what a wrong answer usually forgot)
        (torch.full((4,), 0.5), 4, 1 + 0.5 + 0.25 + 0.125 + 0.0625, "a geometric sum"),
        (torch.tensor([1.0, 1.0, 0.0, 1.0, 1.0]), 4, 3.0, "drafts after a rejection never count"),
        (
            torch.tensor([0.9, 0.1, 1.0, 1.0, 1.0, 1.0]),
            3,
            1 + 0.9 + 0.09 + 0.09,
            "use γ entries only",
        ),
        (torch.tensor([1.0, 1.0, 1.0]), 3, 4.0, "all accepted: the bonus token too"),
    ]
    for alpha_t, g, want, why in toy:
        got = float(call_answer("3.1", expected_step_tokens, alpha_t.clone(), g))
        assert abs(got - want) < 1e-6, (
            f"Exercise 3.1: for α_t = {alpha_t.tolist()} and γ = {g} expect {want:.4f}, got "
            f"{got:.4f} ({why})"
        )
    matches, checked = 0, 0
    for ids, run in zip(prompts, greedy_runs, strict=True):
        # α_t at T = 0 for a draft at each output position: 1 iff the draft's argmax is the target's
        alpha_out = own_sample_alpha(ids, run, temperature=0.0)  # (n_new,)
        pos = 0
        for step in run.stats.steps:
            g, n = len(step.draft_tokens), step.n_accepted
            if g == gamma:
                matches += abs(float(expected_step_tokens(alpha_out[pos:], g)) - (n + 1)) < 1e-6
                checked += 1
            pos += n + 1
    fraction = matches / checked
    assert fraction >= 0.95, (  # a near-tie may flip an argmax between the two computations
        f"Exercise 3.1: your predictions match only {matches} of {checked} greedy steps"
    )
    require_prediction("3.1", prediction)
    print(
        f"your formula predicts {matches} of {checked} full-γ greedy steps exactly ({fraction:.1%}); "
        f"you predicted {prediction:.0%}"
    )
    print("Exercise 3.1: correct!")
    return fraction


# --- notebook 04 ---------------------------------------------------------------------------------

SPEED_CHOICES = ("faster", "slower")


def exercise_4_1(
    break_even_alpha: Callable[..., float | None],
    prediction: str,
    gamma: int,
    c: float,
    r: float,
    alpha: float,
    measured_gain: float,
) -> float | None:
    """Exercise 4.1 on worked cases, then α* for the measured (γ, c, r) of draft-prose next to
    its α̂ (`alpha`) and its measured speedup on the clock (`measured_gain`)."""
    forbidden = {"alpha_from_tokens_per_call": (theory, "alpha_from_tokens_per_call")}
    guard = refuse_delegation("4.1", break_even_alpha, forbidden, "the inversion")
    for g, cc, rr in [(1, 0.2, 1.0), (4, 0.25, 1.2), (3, 0.1, 1.0), (8, 0.05, 1.5), (2, 0.3, 1.3)]:
        with guard:
            got = call_answer("4.1", break_even_alpha, g, cc, rr)
        assert got is not None and 0 <= got <= 1, (
            f"Exercise 4.1: γ={g}, c={cc}, r={rr} breaks even at some α in [0, 1], got {got}"
        )
        assert abs(theory.speedup(got, g, cc, rr) - 1) < 1e-6, (
            f"Exercise 4.1: at your α* = {got:.4f} (γ={g}, c={cc}, r={rr}) the speedup is "
            f"{theory.speedup(got, g, cc, rr):.4f}, not 1"
        )
    got = call_answer("4.1", break_even_alpha, 1, 0.3)
    assert got is not None and abs(got - 0.3) < 1e-6, (
        f"Exercise 4.1: with γ = 1 and r = 1, α* = c = 0.3; got {got}"
    )
    got = call_answer("4.1", break_even_alpha, 4, 1.0, 1.2)
    assert got is None, f"Exercise 4.1: γc + r = 5.2 > γ + 1 = 5: no α breaks even, got {got}"
    require_prediction("4.1", prediction, SPEED_CHOICES)
    with guard:
        star = break_even_alpha(gamma, c, r)
    verdict = "faster" if star is not None and alpha > star else "slower"
    shown = "none" if star is None else f"{star:.3f}"
    print(
        f"draft-prose on code: α* = {shown}, α̂ = {alpha:.3f}: the formula says {verdict}; you "
        f"predicted {prediction}; the clock measured {measured_gain:.2f}x"
    )
    print("Exercise 4.1: correct!")
    return star


def _acceptable_gammas(alpha: float, se: float, c: float, z: float = 4.0) -> set[int]:
    """Optimal γ for any α within z standard errors of `alpha`."""
    grid = np.linspace(max(alpha - z * se, 1e-3), min(alpha + z * se, 0.999), 200)
    return {theory.optimal_gamma(float(x), c) for x in grid}


def exercise_4_2(
    best_gamma_from_measurements: Callable[[dict, float, float], int],
    logged: dict[int, float],
    t_draft: float,
    t_target: float,
    counts: Any,
) -> int:
    """Exercise 4.2: exact logs on which the plausible wrong fits of α pick another γ, simulated
    noisy logs of a weak draft, and the real logs of §5 (`logged`, with the pooled `counts`).
    Inverting tokens per call is the exercise: `theory.alpha_from_tokens_per_call` is refused."""
    forbidden = {"alpha_from_tokens_per_call": (theory, "alpha_from_tokens_per_call")}
    guard = refuse_delegation(
        "4.2", best_gamma_from_measurements, forbidden, "the inversion of tokens per call"
    )
    cases = []
    for alpha, gammas, c in [(0.72, (1, 3, 8), 0.03), (0.68, (4, 8), 0.02)]:  # exact logs
        exact = {g: theory.expected_tokens(alpha, g) for g in gammas}
        cases.append((exact, c, 1.0, _acceptable_gammas(alpha, 0.005 / 4, c), f"α = {alpha}"))
    weak_steps = {  # α = 0.5, c = 0.25: γ = 1, 2, 3 differ
        g: _simulate_tokens(0.5, g, 400, torch.Generator().manual_seed(g)) for g in (1, 2, 4)
    }
    weak = decoding.GenerationStats(
        accepted=[int(t) - 1 for g in weak_steps for t in weak_steps[g]],
        gammas=[g for g in weak_steps for _ in weak_steps[g]],
    )
    wa = weak.acceptance_rate
    cases.append(
        (
            {g: float(t.double().mean()) for g, t in weak_steps.items()},
            0.25,
            4.0,
            _acceptable_gammas(wa, math.sqrt(wa * (1 - wa) / weak.trials), 0.25),
            "a weak draft, noisy logs",
        )
    )
    a = counts.acceptance_rate
    se = math.sqrt(a * (1 - a) / counts.trials)
    cases.append(
        (
            logged,
            t_draft / t_target,
            t_target,
            _acceptable_gammas(a, se, t_draft / t_target),
            "§5's logs",
        )
    )
    for tokens_per_call, c, t_t, ok, label in cases:
        with guard:
            got = call_answer(
                "4.2", best_gamma_from_measurements, dict(tokens_per_call), c * t_t, t_t
            )
        shown = {g: round(t, 3) for g, t in tokens_per_call.items()}
        assert got in ok, (
            f"Exercise 4.2 ({label}): for tokens per call {shown} and c = {c:.3f} the best γ is "
            f"{' or '.join(map(str, sorted(ok)))}, got {got}: fit α by inverting "
            "(1 − α^(γ+1)) / (1 − α) for each γ"
        )
    with guard:
        best = best_gamma_from_measurements(dict(logged), t_draft, t_target)
    print(f"on the logs of §5 your best γ is {best}")
    print("Exercise 4.2: correct!")
    return best


def _simulate_tokens(alpha: float, gamma: int, steps: int, generator: torch.Generator):
    """Tokens emitted by `steps` simulated steps, each a chain of Bernoulli(α) coins: (steps,)."""
    accept = (torch.rand(steps, gamma, generator=generator) < alpha).long()  # (steps, γ)
    return accept.cumprod(dim=1).sum(dim=1) + 1  # (steps,)


def exercise_4_3(
    choose_draft: Callable[..., tuple[str, int]],
    prediction: str,
    measured: dict[str, tuple[float, float]],
    r: float,
    gains: dict[str, float],
    gamma: int,
) -> tuple[str, int]:
    """Exercise 4.3 on worked cases where each plausible shortcut (highest α, lowest c, α − c,
    r = 1, ranking the drafts at one γ and then tuning γ) picks another answer; then §6's drafts,
    with the learner's `prediction` (a name of `measured`) beside the formula's choice and the
    clock's ranking at `gamma` (`gains`: the measured speedup of each draft)."""
    worked = [  # (candidates {name: (α, c)}, r, the best (name, γ), found by searching by hand)
        ({"small": (0.55, 0.02), "mid": (0.8, 0.1), "big": (0.95, 0.5)}, 1.0, ("mid", 6)),
        ({"cheap": (0.6, 0.01), "good": (0.8, 0.2)}, 1.0, ("cheap", 7)),
        ({"cheap": (0.6, 0.01), "good": (0.8, 0.2)}, 2.0, ("good", 6)),  # dear verification
        ({"cheap": (0.8, 0.01), "sharp": (0.95, 0.1)}, 1.0, ("sharp", 15)),  # γ = 4 ranks cheap
        ({"cheap": (0.75, 0.01), "sharp": (0.85, 0.08)}, 1.3, ("cheap", 12)),  # ... and sharp
    ]
    for candidates, rr, want in worked:
        got = tuple(call_answer("4.3", choose_draft, dict(candidates), rr))
        why = ""
        if got[0] != want[0]:
            why = ": compare every draft at its own best γ, not at one γ chosen in advance"
        assert got == want, (
            f"Exercise 4.3: for {candidates} and r = {rr} the best is {want}, got {got}{why}"
        )
    name, g = choose_draft(dict(measured), r)
    best = max(theory.speedup(a, k, c, r) for a, c in measured.values() for k in range(1, 65))
    assert abs(theory.speedup(measured[name][0], g, measured[name][1], r) - best) < 1e-12, (
        f"Exercise 4.3: ({name}, {g}) is not the best prediction for §6's drafts"
    )
    require_prediction("4.3", prediction, list(measured))
    fastest = max(gains, key=gains.get)
    print(
        f"on code, with r = {r:.2f}: you predicted {prediction}; the formula deploys {name} at "
        f"γ = {g}, predicted {best:.2f}x"
    )
    print(
        f"the clock at γ = {gamma} (§6): fastest {fastest} ({gains[fastest]:.2f}x); "
        + ", ".join(f"{n} {gains[n]:.2f}x" for n in sorted(gains, key=gains.get, reverse=True)[1:])
    )
    print("Exercise 4.3: correct!")
    return name, g


# --- notebook 05 ---------------------------------------------------------------------------------

GAMMA_SHIFT_CHOICES = ("smaller", "the same", "larger")


WORKED_KNEE_NAME = "worked example"
WORKED_KNEE_KS = (1, 2, 4, 8, 16, 32, 64)
WORKED_KNEE_RATIOS = (1.00, 0.96, 1.03, 1.06, 1.14, 1.07, 1.90)
"""Exercise 5.1's made-up curve, t(k) / t(1): its fastest k is 2, it leaves a 10% band at k = 16
and dips back in at 32, so its knee is 8."""
KNEE_READING_MARGIN = 0.02
"""A reading counts when it is the knee for some band edge within this of 1 + tol."""


def _acceptable_knees(ks: list[int], curve: list[float], tol: float) -> set[int]:
    """The knees of `curve` for every band edge 1 + t, t within `KNEE_READING_MARGIN` of tol."""
    edges = np.linspace(tol - KNEE_READING_MARGIN, tol + KNEE_READING_MARGIN, 41)
    return {_FIND_KNEE(ks, curve, float(t)) for t in edges}


def _misreading(ks: list[int], curve: list[float], tol: float, got: int) -> str:
    """What reading `got` off `curve` most likely did wrong, in words."""
    ratios = [t / curve[0] for t in curve]
    out = next((i for i, r in enumerate(ratios) if r > 1 + tol), None)
    if out is not None and got == ks[out]:
        return (
            f"k = {got} is the first k outside the band (t/t(1) = {ratios[out]:.2f}): the knee "
            "is the last k inside it"
        )
    if out is not None and ks.index(got) > out:
        return (
            f"the curve leaves the band at k = {ks[out]}; a later k that dips back in does not "
            "count"
        )
    if got == ks[int(np.argmin(curve))]:
        return f"k = {got} is the fastest k, not the last one inside the band"
    return f"the curve is still inside the band (t/t(1) <= {1 + tol:.2f}) after k = {got}"


def exercise_5_1(
    knees: Any,
    ks: list[int],
    median_ms: dict[str, list[float]],
    tol: float,
    predicted_knee: int,
) -> dict[str, int]:
    """Exercise 5.1: the knees read off the worked curve and off every measured curve.

    The right knee of a measured curve is derived from the same medians the learner read
    (`median_ms`, ms at each k of `ks`), allowing for a reading within `KNEE_READING_MARGIN` of
    the band's edge, so timing noise cannot fail a correct reading. `predicted_knee` is the
    roofline's prediction for the largest (last) model, printed beside its reading."""
    names = [WORKED_KNEE_NAME, *median_ms]
    if not isinstance(knees, dict):
        raise AssertionError(
            f"Exercise 5.1: knees_5_1 must be a dict {{curve name: k}}, got {type(knees).__name__}"
        )
    if set(knees) != set(names):
        raise AssertionError(
            f"Exercise 5.1: knees_5_1 needs exactly the keys {names}, got {sorted(knees)}"
        )
    if any(knees[name] is None for name in names):
        missing = [name for name in names if knees[name] is None]
        raise NotImplementedError(f"Exercise 5.1: read the knee of {missing} into knees_5_1")
    curves = {WORKED_KNEE_NAME: (list(WORKED_KNEE_KS), list(WORKED_KNEE_RATIOS))}
    curves |= {name: (list(ks), list(ms)) for name, ms in median_ms.items()}
    for name in names:
        grid, curve = curves[name]
        got = knees[name]
        if isinstance(got, bool) or not isinstance(got, (int, np.integer)) or got not in grid:
            raise AssertionError(
                f"Exercise 5.1: {name}: {got!r} is not a k of the grid {grid}; the knee is a k "
                "that was measured"
            )
        if int(got) not in _acceptable_knees(grid, curve, tol):
            raise AssertionError(f"Exercise 5.1: {name}: {_misreading(grid, curve, tol, int(got))}")
    largest = list(median_ms)[-1]
    for name in median_ms:
        k = int(knees[name])
        free = f"verifies γ = {k - 1} drafts for free" if k > 1 else "verifies nothing for free"
        print(f"{name:>14}: knee k = {k}, so it {free} (γ drafts are a k = γ + 1 forward)")
    print(f"the roofline predicted k = {predicted_knee} for {largest} (section 2)")
    print("Exercise 5.1: correct!")
    return {name: int(knees[name]) for name in names}


def exercise_5_2(
    best_gamma_on_device: Callable[..., int],
    prediction: str,
    curve: dict[str, list],
    c: float,
    draft_name: str,
    target_name: str,
) -> dict[float, tuple[int, int]]:
    """Exercise 5.2 on worked curves, then on the measured curve of the largest model: the
    learner's γ must be the best on that curve. Returns {α: (γ with the measured r, γ at r = 1)}."""
    ks = [1, 2, 4, 8, 16, 32, 64]
    for a, cc, lat, want in [
        (0.9, 0.02, [1.0, 1.0, 1.0, 1.0, 2.0, 4.0, 8.0], 7),  # free up to k = 8, then linear
        (0.8, 0.1, [1.0, 1.02, 1.05, 1.6, 2.8, 5.5, 11.0], 3),
    ]:
        got = call_answer("5.2", best_gamma_on_device, a, cc, list(ks), list(lat))
        assert got == want, (
            f"Exercise 5.2: with α={a}, c={cc} and latencies {lat}, the best γ is {want}, got {got}"
        )
    ks, lat = curve["ks"], curve["latency_s"]
    out = {}
    for a in (0.6, 0.8):
        got = call_answer("5.2", best_gamma_on_device, a, c, list(ks), list(lat))
        assert got + 1 in ks, f"Exercise 5.2: γ = {got} was not measured (γ + 1 is not in ks)"
        r_got = lat[ks.index(got + 1)] / lat[0]
        for k, t in zip(ks[1:], lat[1:], strict=True):
            assert (
                theory.speedup(a, got, c, r_got) >= theory.speedup(a, k - 1, c, t / lat[0]) - 1e-12
            ), f"Exercise 5.2: at α={a}, γ = {k - 1} beats your γ = {got} on the measured curve"
        free = max((k - 1 for k in ks[1:]), key=lambda g: theory.speedup(a, g, c))
        out[a] = (got, free)
    require_prediction("5.2", prediction, GAMMA_SHIFT_CHOICES)
    for a, (got, free) in out.items():
        print(
            f"α = {a}, c = {c:.3f} (draft {draft_name}, target {target_name}): best γ {got} with "
            f"your r(γ), {free} if verification were free (r = 1)"
        )
    print(f"you predicted: {prediction} than with r = 1")
    print("Exercise 5.2: correct!")
    return out


# --- notebook 06 ---------------------------------------------------------------------------------


def exercise_6_1(accept_any: Callable[[torch.Tensor, torch.Tensor, int], float], prediction: float):
    """Exercise 6.1: exact cases, then Monte Carlo against `verify.multi_draft_sample`."""
    g_check = torch.Generator().manual_seed(2)
    p = torch.tensor([0.05, 0.1, 0.15, 0.2, 0.2, 0.3])
    q = torch.tensor([0.4, 0.3, 0.1, 0.1, 0.05, 0.05])
    alpha = float(torch.minimum(p, q).sum())
    got = float(call_answer("6.1", accept_any, p.clone(), q.clone(), 1))
    assert abs(got - alpha) < 1e-6, f"Exercise 6.1: with k = 1 it is α = {alpha:.3f}, got {got:.3f}"
    got = float(call_answer("6.1", accept_any, p.clone(), p.clone(), 3))
    assert abs(got - 1) < 1e-6, (
        f"Exercise 6.1: with q = p a candidate is always accepted, got {got}"
    )
    # 20,000 trials: P(|error| ≥ 0.02) ≤ 2·exp(−2·20000·0.02²) = 2e^(−16) ≈ 2.25e-7 (Hoeffding)
    trials = 20_000
    assert abs(2 * math.exp(-2 * trials * 0.02**2) - 2.25e-7) < 0.01e-7
    for k in (2, 3):
        hits = sum(
            verify.multi_draft_sample(
                torch.multinomial(q, k, replacement=True, generator=g_check),
                q.expand(k, -1),
                p,
                g_check,
            )[0]
            < k
            for _ in range(trials)
        )
        mine = float(call_answer("6.1", accept_any, p.clone(), q.clone(), k))
        why = ""
        if abs(mine - (1 - (1 - alpha) ** k)) < 1e-6:
            why = ": the rounds are not independent tries, p changes to the residual after each"
        assert abs(mine - hits / trials) < 0.02, (
            f"Exercise 6.1: k = {k}: yours {mine:.3f}, measured {hits / trials:.3f}{why}"
        )
    require_prediction("6.1", prediction)
    if not 0 <= prediction <= 1:
        raise AssertionError("Exercise 6.1: your prediction is a probability, between 0 and 1")
    print(
        f"the check's own pair: α = {alpha:.3f}; one of 2: {accept_any(p, q, 2):.3f}; "
        f"one of 3: {accept_any(p, q, 3):.3f} (the next cell sets your prediction beside the count)"
    )
    print("Exercise 6.1: correct!")


def exercise_6_2(tree_mask: Callable[[list[int]], torch.Tensor]) -> torch.Tensor:
    """Exercise 6.2 on a (3, 1, 1) tree and a bushier one, against `sessions.tree_ancestry`."""
    guard = refuse_delegation(
        "6.2", tree_mask, {"tree_ancestry": (sessions, "tree_ancestry")}, "the ancestry mask"
    )
    example = [-1, -1, -1, 0, 1, 2, 3, 4, 5]  # branching (3, 1, 1): three chains of length 3
    with guard:
        got = torch.as_tensor(call_answer("6.2", tree_mask, list(example)))
    assert got.dtype == torch.bool and got.shape == (9, 9), "Exercise 6.2: an (N, N) boolean tensor"
    assert bool(got.diagonal().all()), "Exercise 6.2: a node attends to itself"
    assert not bool(got[1, 0]) and not bool(got[4, 3]), (
        "Exercise 6.2: siblings and cousins must not see each other (a causal mask is wrong here)"
    )
    assert got[6].tolist() == [True] + [False] * 2 + [True] + [False] * 2 + [True] + [False] * 2, (
        "Exercise 6.2: node 6 sees 0, 3 and itself: its whole ancestry, not only its parent"
    )
    for parents in ([-1, -1, 0, 0, 1, 2, 2], [-1, 0, 1, 2, 0, 4], [-1]):
        with guard:
            mine = torch.as_tensor(call_answer("6.2", tree_mask, list(parents)))
        assert torch.equal(mine, _TREE_ANCESTRY(parents)), (
            f"Exercise 6.2: for parents {parents}, row i must be True exactly at i and its ancestors"
        )
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3, 3))
    ax.imshow(got, cmap="Greys")
    ax.set(title="your tree mask, (3, 1, 1)", xlabel="attends to node j", ylabel="node i")
    plt.show()
    print("Exercise 6.2: correct!")
    return got
