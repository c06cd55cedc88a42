"""The checks of notebooks/02_proving_equivalence.ipynb: Exercises 2.1 (how many samples to catch
a bug), 2.2 (a prompt-lookup drafter) and 2.3 (the speculative loop)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from specdec_lab import decoding, drafters, sampling
from specdec_lab.course.checks.harness import call_answer, refuse_delegation, require_prediction
from specdec_lab.engine import sessions
from specdec_lab.proof import mock, stats

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
    cases = [(0.12, 1e-6, 27), (0.2, 1e-3, 6), (0.05, 1e-6, 8), (0.3, 0.01, 2), (0.08, 1e-4, 16)]
    for d, dl, k in cases:
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
        got = _lookup_proposal(ngram_drafter(vocab, max_n=max_n), ids, gamma, guard)
        want = drafters.transformers_lookup(ids, gamma, max_n)
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
        for g, m, start in itertools.product((1, 2, 4), (1, 2, 5, 9), ([0], [1, 2])):
            prompt = torch.tensor(start)
            mine, p_s, q_s = run_mine(greedy_draft, prompt, m, g, 0.0)
            want = decoding.autoregressive_generate(target, prompt, m, temperature=0).tokens
            ref = decoding.speculative_generate(target, greedy_draft, prompt, m, g, temperature=0)
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
