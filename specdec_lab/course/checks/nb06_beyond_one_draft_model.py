"""The checks of notebooks/06_beyond_one_draft_model.ipynb: Exercises 6.1 (one of k candidates
surviving) and 6.2 (the tree attention mask)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from specdec_lab import verify
from specdec_lab.course.checks.harness import call_answer, refuse_delegation, require_prediction
from specdec_lab.engine import sessions

# The library function Exercise 6.2 re-implements, captured before any check can patch it.
_TREE_ANCESTRY = sessions.tree_ancestry


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
        hits = 0
        for _ in range(trials):
            drafts = torch.multinomial(q, k, replacement=True, generator=g_check)  # (k,) x ~ q
            hits += verify.multi_draft_sample(drafts, q.expand(k, -1), p, g_check)[0] < k
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
