"""Statistics for proving distribution equivalence: exact laws, frequencies, TV and power.

The Monte Carlo checks compare samples against the *exact* target law (never against a second
sample), with a sample size chosen from the bound P(TV ≥ t) ≤ 2^k · exp(−2 N t²) over k outcomes,
and a goodness-of-fit p-value from scipy.stats.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy import stats as sps

from specdec_lab.engine.sessions import open_session, vocab_size_of
from specdec_lab.sampling import SamplingConfig, logits_to_probs


def samples_needed(tol: float, delta: float, n_outcomes: int) -> int:
    """Smallest N with P(TV(empirical, true) ≥ tol) ≤ delta over `n_outcomes` outcomes.

    From P(TV ≥ t) ≤ 2^k e^{−2Nt²}: N ≥ (k ln 2 + ln(1/δ)) / (2 t²).
    """
    if not 0 < tol <= 1 or not 0 < delta < 1 or n_outcomes < 1:
        raise ValueError("need 0 < tol <= 1, 0 < delta < 1 and n_outcomes >= 1")
    return math.ceil((n_outcomes * math.log(2) + math.log(1 / delta)) / (2 * tol**2))


def tv_tolerance(n_samples: int, delta: float, n_outcomes: int) -> float:
    """The TV distance that N samples stay below with probability ≥ 1 − delta (inverse of above)."""
    return math.sqrt((n_outcomes * math.log(2) + math.log(1 / delta)) / (2 * n_samples))


def tv_distance(p, q) -> float:
    """Total variation ½ Σ |p − q| between two distributions over the same outcomes."""
    p, q = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    if p.shape != q.shape:
        raise ValueError(f"shapes differ: {p.shape} vs {q.shape}")
    return 0.5 * float(np.abs(p - q).sum())


def frequencies(samples, n_outcomes: int) -> np.ndarray:
    """Empirical distribution of integer outcomes in [0, n_outcomes): (N,) -> (n_outcomes,)."""
    counts = np.bincount(np.asarray(samples, dtype=np.int64), minlength=n_outcomes)
    if counts.shape[0] != n_outcomes:
        raise ValueError(f"outcomes must lie in [0, {n_outcomes})")
    return counts / counts.sum()


def gof_pvalue(counts, expected_probs, min_expected: float = 5.0) -> float:
    """Pearson χ² goodness-of-fit p-value of observed `counts` against `expected_probs`.

    Outcomes with zero expected probability that were observed make the p-value 0 (a sampler put
    mass where the target has none). Outcomes with expected count < `min_expected` are pooled
    into one bin so the χ² approximation holds.
    """
    counts = np.asarray(counts, dtype=float)
    probs = np.asarray(expected_probs, dtype=float)
    if counts.shape != probs.shape:
        raise ValueError(f"shapes differ: {counts.shape} vs {probs.shape}")
    if (counts[probs <= 0] > 0).any():
        return 0.0
    expected = probs * counts.sum()
    big = expected >= min_expected
    obs_bins, exp_bins = list(counts[big]), list(expected[big])
    if (~big & (probs > 0)).any():
        obs_bins.append(counts[~big].sum())
        exp_bins.append(expected[~big].sum())
    if len(obs_bins) < 2:
        return 1.0
    exp_bins = np.asarray(exp_bins) * (sum(obs_bins) / sum(exp_bins))  # exact totals for scipy
    return float(sps.chisquare(obs_bins, exp_bins).pvalue)


def homogeneity_pvalue(successes, trials) -> float:
    """χ² p-value of "every group has the same success rate", from each group's successes and
    trials (a 2 x groups contingency table, scipy.stats.chi2_contingency)."""
    successes, trials = np.asarray(successes, dtype=float), np.asarray(trials, dtype=float)
    if successes.shape != trials.shape or successes.ndim != 1 or len(successes) < 2:
        raise ValueError("need one success count and one trial count per group, two groups or more")
    if (successes < 0).any() or (successes > trials).any():
        raise ValueError("need 0 <= successes <= trials in every group")
    table = np.stack([successes, trials - successes])  # (2, groups)
    if (table.sum(axis=1) == 0).any():
        return 1.0  # all successes or all failures: every rate is the same
    return float(sps.chi2_contingency(table, correction=False).pvalue)


def encode_sequences(seqs, vocab_size: int) -> np.ndarray:
    """Map token sequences (N, m) to outcome indices in [0, V^m) (base-V digits, first = most)."""
    seqs = np.asarray(seqs, dtype=np.int64)
    weights = vocab_size ** np.arange(seqs.shape[1] - 1, -1, -1)
    return seqs @ weights


def exact_sequence_law(
    model,
    prompt: torch.Tensor,
    length: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> np.ndarray:
    """The exact law of the next `length` tokens when sampling from `model`.

    `model` is a mock model or a small transformers causal LM. Enumerates all V^length
    continuations (skipping prefixes of probability zero), so keep V and length small.
    Returns (V^length,), indexed like `encode_sequences`. Temperature 0 gives a point mass.
    """
    vocab, cfg = vocab_size_of(model), SamplingConfig(temperature, top_k, top_p)
    if vocab**length > 200_000:
        raise ValueError(f"{vocab}^{length} outcomes is too many to enumerate")
    law = np.zeros(vocab**length)

    def extend(prefix: list[int], mass: float) -> None:  # depth-first over continuations
        if len(prefix) == length:
            law[encode_sequences([prefix], vocab)[0]] = mass
            return
        logits = open_session(model).logits(torch.cat([prompt, torch.tensor(prefix).long()]))
        probs = logits_to_probs(logits[-1], cfg)  # (V,)
        for x in probs.nonzero()[:, 0].tolist():
            extend([*prefix, x], mass * float(probs[x]))

    extend([], 1.0)
    return law


def power_lower_bound(tv_true: float, tol: float, n_samples: int, n_outcomes: int) -> float:
    """A lower bound on P(the check flags a sampler whose true law is `tv_true` away from p).

    The check fails a sampler when its empirical TV reaches `tol`. By the triangle inequality that
    can only be missed if the empirical law strays ≥ tv_true − tol from its own true law, which
    has probability ≤ 2^k e^{−2N(tv_true − tol)²}.
    """
    gap = tv_true - tol
    if gap <= 0:
        return 0.0
    log_miss = n_outcomes * math.log(2) - 2 * n_samples * gap**2
    return 1.0 - math.exp(min(log_miss, 0.0))


@dataclass(frozen=True)
class EquivalenceCheck:
    """The outcome of comparing samples with an exact law at confidence 1 − delta."""

    n_samples: int
    tv: float
    tol: float
    pvalue: float
    delta: float

    @property
    def passed(self) -> bool:
        """Both tests agree with "same law": TV below the bound and χ² not significant."""
        return self.tv < self.tol and self.pvalue > self.delta

    def __str__(self) -> str:
        """One readable line: the verdict and both tests against their thresholds."""
        verdict = "same law" if self.passed else "NOT the same law"
        return (
            f"{verdict}: TV {self.tv:.4f} (bound {self.tol:.4f}), χ² p-value {self.pvalue:.3g} "
            f"(reject below δ = {self.delta:g}), {self.n_samples:,} samples"
        )


def check_against_law(outcomes, law, delta: float = 1e-6) -> EquivalenceCheck:
    """Compare integer outcomes (N,) with the exact law (K,) by TV bound and χ² test."""
    law = np.asarray(law, dtype=float)
    freq, n = frequencies(outcomes, law.shape[0]), len(outcomes)
    tol = tv_tolerance(n, delta, law.shape[0])
    return EquivalenceCheck(n, tv_distance(freq, law), tol, gof_pvalue(freq * n, law), delta)
