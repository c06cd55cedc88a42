"""The checks of notebooks/01_draft_and_verify.ipynb: Exercises 1.1 (the acceptance rule,
longhand), 1.2 (the residual distribution) and 1.3 (the wasted drafts)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from specdec_lab import decoding, sampling, verify
from specdec_lab.course.checks.harness import call_answer, refuse_delegation, require_prediction

# The library functions Exercises 1.1 and 1.2 re-implement, captured before any check patches them.
_REJECTION_SAMPLE = verify.rejection_sample
_RESIDUAL = verify.residual_distribution
INSTANCE_KINDS = ("random", "q = p", "one-hot q", "truncated p")


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


def exercise_1_1(rejection_sample_longhand: Callable, generator: torch.Generator, n: int = 2000):
    """Exercise 1.1: draw for draw against `verify.rejection_sample` on `n` random instances of
    four kinds, from the same generator state. Returns {kind: mean fraction of drafts kept}."""
    names = ("rejection_sample", "first_rejection", "multi_draft_sample")
    forbidden = {name: (verify, name) for name in names}
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
        mine, theirs = (int(mine[0]), int(mine[1])), (int(theirs[0]), int(theirs[1]))
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
            f"Exercise 1.1: {len(mismatches)}/{n} instances differ from the library; on a '{kind}' "
            f"instance you return (n_accepted, token) = {mine}, the rule gives {theirs}, {why}"
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
        p_model = ContextFree(row)
        q_model = ContextFree(row + noise * torch.randn(16, generator=case))
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
