"""Plausible wrong answers to the exercises of notebooks/02_proving_equivalence.ipynb.

tests/course/test_exercises.py binds each one to the exercise's answer name in the student notebook and
re-runs the check cell, which must fail with an ``AssertionError("Exercise N: ...")``.
See `specdec_lab.course.exercises` for the format.
"""

import functools
import math

import torch

from specdec_lab import drafters, sampling, verify
from specdec_lab.proof import stats

# --- Exercise 2.1: samples to catch a bug d away ---------------------------------------------


def _needed(tolerance, delta, n_outcomes):
    return math.ceil((n_outcomes * math.log(2) + math.log(1 / delta)) / (2 * tolerance**2))


def tolerance_d(distance, delta, n_outcomes):
    """Sizes the check for tolerance d, forgetting that the sample itself strays by up to t."""
    return _needed(distance, delta, n_outcomes)


def rounds_down(distance, delta, n_outcomes):
    """The right formula, rounded down."""
    return math.floor((n_outcomes * math.log(2) + math.log(1 / delta)) / (2 * (distance / 2) ** 2))


def splits_delta(distance, delta, n_outcomes):
    """Spends δ/2 on each side: safe, but not the smallest N."""
    return _needed(distance / 2, delta / 2, n_outcomes)


def library_call(distance, delta, n_outcomes):
    """Right, but by calling the library's own sizing: the exercise is to derive it."""
    return stats.samples_needed(distance / 2, delta, n_outcomes)


# --- Exercise 2.2: prompt lookup ----------------------------------------------------------------


class _Lookup:
    """A prompt-lookup drafter with switchable mistakes."""

    mistake = None

    def __init__(self, vocab_size, max_n=2):
        self.vocab_size, self.max_n, self.calls = vocab_size, max_n, 0

    def propose(self, ids, gamma, cfg, generator=None):
        self.calls += 1
        length, tokens = len(ids), torch.empty(0, dtype=torch.long)
        sizes = range(min(self.max_n, length - 1), 0, -1)
        if self.mistake == "ignores n":
            sizes = [1] if length > 1 else []
        elif self.mistake == "no back-off":
            sizes = [self.max_n] if self.max_n < length else []
        for n in sizes:
            starts = [
                s for s in range(length - n) if torch.equal(ids[s : s + n], ids[length - n :])
            ]
            if starts and gamma > 0:
                s = starts[-1] if self.mistake == "most recent" else starts[0]
                first = s + n - 1 if self.mistake == "off by one" else s + n
                tokens = ids[first : first + gamma].clone()
                break
        q = torch.nn.functional.one_hot(tokens, self.vocab_size).float()
        if self.mistake == "smoothed q":
            q = 0.9 * q + 0.1 / self.vocab_size
        return tokens, q

    def crop(self, length):
        pass


def _lookup_with(mistake):
    return type(f"Lookup_{mistake.replace(' ', '_')}", (_Lookup,), {"mistake": mistake})


class CallsTransformers(_Lookup):
    """Delegates to transformers' own prompt lookup, the thing the exercise asks to write."""

    def propose(self, ids, gamma, cfg, generator=None):
        from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

        self.calls += 1
        lookup = PromptLookupCandidateGenerator(
            num_output_tokens=gamma, max_matching_ngram_size=self.max_n, max_length=10**6
        )
        candidates, _ = lookup.get_candidates(ids[None])
        tokens = candidates[0, len(ids) :]
        return tokens, torch.nn.functional.one_hot(tokens, self.vocab_size).float()


class InheritsTheLibrary(drafters.PromptLookupDrafter):
    """Inherits `drafters.PromptLookupDrafter.propose` instead of writing it."""

    def __init__(self, vocab_size, max_n=2):
        super().__init__(vocab_size, max_ngram=max_n)


# --- Exercise 2.3: the speculative loop ---------------------------------------------------------


def _loop(target, draft, prompt, max_new_tokens, gamma, temperature=1.0, generator=None, bug=None):
    """The speculative loop, with one of several plausible bugs."""
    ids = prompt.clone()
    while (remaining := max_new_tokens - (len(ids) - len(prompt))) > 0:
        g = gamma if bug == "overshoots" else min(gamma, remaining - 1)
        drafted, qs = ids, []
        for _ in range(g):
            q = sampling.logits_to_probs(draft.logits(drafted)[-1], temperature)
            x = q.argmax() if bug == "greedy draft, softmax q" else sampling.sample(q, generator)
            drafted = torch.cat([drafted, x[None]])
            qs.append(q)
        tokens = drafted[len(ids) :]
        if bug == "γ + 1 target calls":
            rows = [target.logits(drafted[: len(ids) + i])[-1] for i in range(g + 1)]
            p_logits = torch.stack(rows)
        else:
            p_logits = target.logits(drafted)[-(g + 1) :]
        p_probs = sampling.logits_to_probs(p_logits, temperature)
        q_probs = torch.stack(qs) if qs else torch.empty(0, p_probs.shape[-1])
        n, next_token = verify.rejection_sample(tokens, q_probs, p_probs, generator)
        if bug == "keeps the rejected draft" and n < g:
            ids = torch.cat([ids, tokens[: n + 1]])
        else:
            ids = torch.cat([ids, tokens[:n], next_token[None]])
        if bug != "no rollback":
            keep = len(ids) if bug == "crops one token too few" else len(ids) - 1
            target.crop(keep)
            draft.crop(keep)
    return ids[len(prompt) :]


LOOP_BUGS = [
    "no rollback",
    "crops one token too few",
    "overshoots",
    "γ + 1 target calls",
    "keeps the rejected draft",
    "greedy draft, softmax q",  # passes greedy exactness: only the T = 1 law test sees it
]

WRONG_ANSWERS = {
    "2.1": {  # two answer names: the prediction stays as the student left it
        "sized for tolerance d": {"samples_to_catch": tolerance_d},
        "rounds down": {"samples_to_catch": rounds_down},
        "splits δ in two (not the smallest)": {"samples_to_catch": splits_delta},
        "calls stats.samples_needed": {"samples_to_catch": library_call},
    },
    "2.2": {
        **{
            mistake: _lookup_with(mistake)
            for mistake in ["ignores n", "no back-off", "most recent", "off by one", "smoothed q"]
        },
        "delegates to transformers' prompt lookup": CallsTransformers,
        "inherits drafters.PromptLookupDrafter": InheritsTheLibrary,
    },
    "2.3": {bug: functools.partial(_loop, bug=bug) for bug in LOOP_BUGS},
}
