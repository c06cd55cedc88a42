"""Token-tree speculative decoding: several draft continuations, verified in ONE target forward.

Notation of Leviathan et al. 2023 (arXiv:2211.17192): p = target, q = draft. A chain drafts one
guess per position; a tree drafts several (SpecInfer, Miao et al. 2023, arXiv:2305.09781), so a
wrong first guess need not end the step. One step reads top to bottom in `tree_step`:

    1. the draft grows a tree level by level (`build_tree`): `branching[ℓ]` children under every
       node of level ℓ, siblings drawn WITHOUT replacement from the draft's q;
    2. the target scores the last accepted token and every tree node in ONE forward, with a tree
       attention mask (each node sees the prefix and its own ancestors only);
    3. walk down from the root: at each node verify its children with
       `verify.multi_draft_sample` (recursive rejection sampling), move to the accepted child, or
       stop with the residual sample (or the bonus sample at a leaf);
    4. roll both caches back to the accepted sequence.

Step 3 is a pure function of probabilities (`tree_sample`, `tree_greedy`), tested without models.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from specdec_lab.decoding import Generation, Step, run_steps
from specdec_lab.engine.sessions import Session, open_session
from specdec_lab.inputs import (
    check_gamma,
    check_positions,
    check_prompt,
    check_same_vocab,
    check_vocab_size,
)
from specdec_lab.sampling import SamplingConfig, generator_on, logits_to_probs, sample
from specdec_lab.verify import multi_draft_sample, without_replacement_q


@dataclass
class TokenTree:
    """A token tree below the last accepted token (the root, which is not a node).

    tokens: (N,); parents[i] is the parent node of node i (-1: a child of the root), parents
    before children; q_probs: (N, V), the distribution node i was drawn from, given its parent
    and its earlier siblings.
    """

    tokens: torch.Tensor
    parents: list[int]
    q_probs: torch.Tensor

    def children(self, node: int) -> list[int]:
        """Indices of the children of `node` (-1 for the root), in drawing order."""
        return [i for i, parent in enumerate(self.parents) if parent == node]

    def path_tokens(self, path: list[int]) -> list[int]:
        return [int(self.tokens[i]) for i in path]


# ------------------------------------------------------------------ drafting siblings and trees
def draw_siblings(
    q: torch.Tensor, k: int, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """k distinct candidates drawn from q (V,) without replacement, and the q each came from.

    Returns candidates (k',) and their distributions (k', V): row i is q with the earlier
    candidates removed, renormalised (k' = k, or fewer if q has fewer tokens with mass).
    """
    k = min(k, int((q > 0).sum()))
    candidates = torch.multinomial(q, k, replacement=False, generator=generator)  # (k,)
    return candidates, without_replacement_q(q, candidates)


def build_tree(
    draft: Session,
    ids: torch.Tensor,
    branching: tuple[int, ...],
    cfg: SamplingConfig,
    generator: torch.Generator | None = None,
    siblings: Callable[..., tuple[torch.Tensor, torch.Tensor]] = draw_siblings,
) -> TokenTree:
    """Grow a tree below ids[-1] with one draft forward per level (tree attention again).

    branching[ℓ] children under every node of depth ℓ (the root has depth 0): (3, 1, 1) is three
    first tokens, each followed by a chain of two. Greedy (T = 0) takes the top-k tokens of q.
    """
    vocab = draft.vocab_size
    tokens = torch.empty(0, dtype=torch.long, device=draft.device)
    parents: list[int] = []
    q_rows = torch.empty(0, vocab, device=draft.device)
    frontier = [-1]  # the nodes of the current level; -1 is the root
    for k in branching:
        scores = draft.tree_logits(ids, tokens, parents)  # (1 + N, V) the lean runtime feeds
        # only the nodes it has not seen (the last level); transformers' re-feeds the whole tree
        new_tokens, new_parents, new_q = [], [], []
        for node in frontier:
            logits = scores[node + 1]  # (V,) row 0 is the root
            if cfg.greedy:
                kids = logits.topk(min(k, vocab)).indices  # (k,) distinct, best first
                q = torch.nn.functional.one_hot(kids, vocab).float()  # (k, V) unused by greedy
            else:
                probs = logits_to_probs(logits, cfg.temperature, cfg.top_k, cfg.top_p)  # (V,)
                kids, q = siblings(probs, k, generator)  # (k',), (k', V)
            new_tokens.append(kids)
            new_parents += [node] * kids.shape[0]
            new_q.append(q)
        first_new = tokens.shape[0]
        tokens = torch.cat([tokens, *new_tokens])  # (N,)
        parents += new_parents
        q_rows = torch.cat([q_rows, *new_q])  # (N, V)
        frontier = list(range(first_new, tokens.shape[0]))
    return TokenTree(tokens, parents, q_rows)


# ----------------------------------------------------------------- verification: pure functions
def tree_sample(
    tree: TokenTree,
    p_probs: torch.Tensor,
    generator: torch.Generator | None = None,
    verify_siblings: Callable[..., tuple[int, torch.Tensor]] = multi_draft_sample,
) -> tuple[list[int], torch.Tensor]:
    """Walk down the tree with recursive rejection sampling at every node.

    p_probs: (1 + N, V), row 0 the target after the root, row 1 + i after node i. Returns the
    accepted path (node indices, root to leaf) and the next token: the residual sample where
    all children of a node were rejected, or the bonus sample from p at an accepted leaf.
    """
    path, node = [], -1
    while kids := tree.children(node):
        i, x = verify_siblings(tree.tokens[kids], tree.q_probs[kids], p_probs[node + 1], generator)
        if i == len(kids):
            return path, x
        node = kids[i]
        path.append(node)
    return path, sample(p_probs[node + 1], generator)


def tree_greedy(tree: TokenTree, p_logits: torch.Tensor) -> tuple[list[int], torch.Tensor]:
    """Greedy walk: follow the child equal to the target's argmax. p_logits: (1 + N, V)."""
    path, node = [], -1
    best = p_logits.argmax(-1)  # (1 + N,)
    while True:
        match = [c for c in tree.children(node) if tree.tokens[c] == best[node + 1]]
        if not match:
            return path, best[node + 1]
        node = match[0]
        path.append(node)


# ------------------------------------------------------------------------- choosing a tree shape
def tree_nodes(branching: tuple[int, ...]) -> int:
    """Number of nodes of a tree with `branching[ℓ]` children under every node of level ℓ."""
    total, width = 0, 1
    for k in branching:
        width *= k
        total += width
    return total


def expected_tree_tokens(alpha: float, branching: tuple[int, ...]) -> float:
    """Tokens per step of a tree whose levels accept with probability 1 − (1 − α)^k for k
    siblings: a model (independent tries at rate α), not an exact law; a chain (all k = 1) gives
    Leviathan's (1 − α^(γ+1)) / (1 − α). The +1 is the token the target adds every step."""
    tokens, reach = 1.0, 1.0
    for k in branching:
        reach *= 1 - (1 - alpha) ** k
        tokens += reach
    return tokens


def choose_branching(
    alpha: float,
    c: float,
    verify_cost: Sequence[float],
    max_depth: int = 8,
    widths: tuple[int, ...] = (1, 2, 3, 4),
) -> tuple[int, ...]:
    """The tree shape with the best modelled speedup on THIS device.

    verify_cost[k - 1] = the target's time for one forward over k tokens / over one token,
    measured on the device (`timing.verify_curve`): on a CPU it jumps where the matmul kernels
    switch from matrix-vector to matrix-matrix, on a GPU it stays flat much longer. Candidates:
    a first level of w siblings, then one or two children per node, down to `max_depth` levels,
    as long as the last accepted token and all nodes fit the measured curve. The draft pays one
    forward (cost c) per level: a small draft is overhead-bound, so a wide level costs about
    what a narrow one does.
    """
    best, best_speed = (1,), 0.0
    for depth in range(1, max_depth + 1):
        for w1 in widths:
            for w2 in (1, 2):
                shape = (w1,) + (w2,) * min(depth - 1, 1) + (1,) * max(depth - 2, 0)
                n = tree_nodes(shape)
                if n + 1 > len(verify_cost):
                    continue
                speed = expected_tree_tokens(alpha, shape) / (depth * c + verify_cost[n])
                if speed > best_speed + 1e-12:
                    best, best_speed = shape, speed
    return best


# ------------------------------------------------------------------------------- the decoding loop
def tree_step(
    target: Session,
    draft: Session,
    ids: torch.Tensor,
    branching: tuple[int, ...],
    cfg: SamplingConfig,
    generator: torch.Generator | None = None,
    verify_siblings: Callable[..., tuple[int, torch.Tensor]] = multi_draft_sample,
    siblings: Callable[..., tuple[torch.Tensor, torch.Tensor]] = draw_siblings,
) -> tuple[torch.Tensor, Step]:
    """One token-tree step after the accepted sequence `ids` (L,). Returns (new ids, Step).

    The Step reports the branch that was followed: the accepted nodes, then the first-drawn
    child below the last one (if any), so `n_accepted` and `bonus` mean what they mean in a chain.
    """
    # 1. Draft a tree.
    tree = build_tree(draft, ids, branching, cfg, generator, siblings)
    # 2. One target forward over the last accepted token and every node.
    p_logits = target.tree_logits(ids, tree.tokens, tree.parents)  # (1 + N, V)
    # 3. Walk down the tree.
    if cfg.greedy:
        path, next_token = tree_greedy(tree, p_logits)
    else:
        p_probs = logits_to_probs(p_logits, cfg.temperature, cfg.top_k, cfg.top_p)  # (1 + N, V)
        path, next_token = tree_sample(tree, p_probs, generator, verify_siblings)
    accepted = tree.tokens[path]  # (n,)
    ids = torch.cat([ids, accepted, next_token[None]])
    # 4. Roll back to the accepted sequence. The lean runtime keeps the accepted branch's keys
    #    and values; transformers' sessions dropped the tree and re-feed the branch next step.
    for session in (target, draft):
        session.keep_branch(path)
        session.crop(ids.shape[0] - 1)
    branch, node = list(path), path[-1] if path else -1
    while kids := tree.children(node):
        branch.append(node := kids[0])
    return ids, Step(tree.path_tokens(branch), len(path), int(next_token))


def tree_speculative_generate(
    target,
    draft,
    input_ids,
    max_new_tokens: int,
    branching: tuple[int, ...] = (3, 1, 1, 1),
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    vocab_size: int | None = None,
    on_step: Callable[[Step], None] | None = None,
    verify_siblings: Callable[..., tuple[int, torch.Tensor]] = multi_draft_sample,
    siblings: Callable[..., tuple[torch.Tensor, torch.Tensor]] = draw_siblings,
    runtime: str = "auto",
) -> Generation:
    """Token-tree speculative decoding; same arguments and result type as `speculative_generate`.

    `branching` gives the tree shape per level (its length is the depth γ). `draft` is a mock or
    transformers model (a `Session` for it is opened here). `verify_siblings` and `siblings`
    swap the multi-draft rule and the sibling sampler, for teaching only (`specdec_lab.proof.broken`).
    The output is distributed exactly as autoregressive sampling from the target.
    """
    cfg = SamplingConfig(temperature, top_k, top_p)
    if not branching or any(not isinstance(k, int) or k < 1 for k in branching):
        raise ValueError(f"branching must be a non-empty tuple of positive ints, got {branching!r}")
    check_gamma(len(branching))
    check_positions([target, draft], check_prompt(input_ids).shape[0], max_new_tokens)
    check_vocab_size("target", target, vocab_size)
    check_vocab_size("draft", draft, vocab_size)
    p_model = open_session(target, vocab_size, runtime)
    q_model = open_session(draft, vocab_size, runtime)
    check_same_vocab(p_model.vocab_size, q_model)
    generator = generator_on(generator, p_model.device)  # every draw where the models are

    def step(ids: torch.Tensor, depth: int) -> tuple[torch.Tensor, Step]:
        shape = tuple(branching[:depth])  # the token budget may cut the tree short
        return tree_step(p_model, q_model, ids, shape, cfg, generator, verify_siblings, siblings)

    return run_steps(
        p_model, q_model, step, input_ids, max_new_tokens, len(branching), eos_token_id, on_step
    )


__all__ = [
    "TokenTree",
    "build_tree",
    "choose_branching",
    "draw_siblings",
    "expected_tree_tokens",
    "tree_greedy",
    "tree_sample",
    "tree_speculative_generate",
    "tree_step",
]
