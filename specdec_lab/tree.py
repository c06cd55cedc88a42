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
The loop runs their on-device twin, `verify_tree_on_device` (one host sync, the chain's `Verdict`
and checks); `teaching_tree_verifier` runs the reference walks behind the same interface.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from specdec_lab import inputs
from specdec_lab.decoding import Generation, Step, run_steps
from specdec_lab.engine.fused import DeviceOutcome, Verdict, greedy_flags, raise_for, value_flags
from specdec_lab.engine.sessions import DEFAULT_RUNTIME, Session, open_session
from specdec_lab.sampling import (
    SamplingConfig,
    cdf_dtype,
    exponentials,
    generator_on,
    inverse_cdf,
    logits_to_probs,
    rand,
    sample,
    uniforms,
)
from specdec_lab.verify import multi_draft_sample, without_replacement_q


@dataclass
class TokenTree:
    """A token tree below the last accepted token (the root, which is not a node).

    tokens: (N,); parents[i] is the parent node of node i (-1: a child of the root), parents
    before children; q_probs: (N, V), the distribution node i was drawn from, given its parent
    and its earlier siblings. A tree drafted level by level on the device has a fixed layout:
    `widths[ℓ]` children under every node of level ℓ, nodes in level order; siblings beyond the
    tokens q has mass on are empty slots, `alive` (N,) False (q row zero), never walked into.
    """

    tokens: torch.Tensor
    parents: list[int]
    q_probs: torch.Tensor
    alive: torch.Tensor | None = None
    widths: tuple[int, ...] | None = None
    _alive_host: list[bool] | None = field(default=None, init=False, repr=False)

    def children(self, node: int) -> list[int]:
        """Indices of the children of `node` (-1 for the root), in drawing order (drafts only:
        reading `alive` costs one host sync, once)."""
        kids = [i for i, parent in enumerate(self.parents) if parent == node]
        if self.alive is None:
            return kids
        if self._alive_host is None:
            self._alive_host = self.alive.tolist()
        return [i for i in kids if self._alive_host[i]]

    def path_tokens(self, path: list[int]) -> list[int]:
        tokens = self.tokens.tolist()  # one read
        return [tokens[i] for i in path]

    def branch(self, path: list[int]) -> list[int]:
        """The branch a step reports: the accepted `path`, then first-drawn children down to a
        leaf (never an empty slot: a first sibling is drawn from a q with mass). Host only."""
        branch, node = list(path), path[-1] if path else -1
        while node in self.parents:
            node = self.parents.index(node)  # its first child: parents come in drawing order
            branch.append(node)
        return branch


# ------------------------------------------------------------------ drafting siblings and trees
def draw_sibling_slots(
    q: torch.Tensor, k: int, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """k siblings drawn from each row of q (W, V) without replacement, with no host sync:
    `torch.multinomial(replacement=False)`'s exponential race (the same draws): the k largest
    keys q(x) / E_x, E_x ~ Exp(1), in order (Plackett–Luce). Returns candidates (W, k'), their
    distributions (W, k', V) (q less the earlier candidates, renormalised) and alive (W, k'),
    k' = min(k, V): slots past a row's tokens of mass are alive False, q row zero.
    """
    k = min(k, q.shape[-1])
    e = exponentials(*q.shape, generator=generator, device=q.device)  # (W, V)
    keys = torch.where(q > 0, q / e, -1.0)  # tokens of no mass last, whatever e drew
    top = keys.topk(k, dim=-1)  # (W, k) largest first
    alive = top.values > 0  # (W, k)
    rows = without_replacement_q(q, top.indices)  # (W, k, V)
    return top.indices, torch.where(alive[..., None], rows, 0.0), alive


def draw_siblings(
    q: torch.Tensor, k: int, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """k distinct candidates (k',) drawn from q (V,) and their distributions (k', V), as in
    `draw_sibling_slots`; k' < k if q has fewer tokens with mass (one host read)."""
    candidates, rows, alive = draw_sibling_slots(q[None], k, generator)
    k = int(alive.sum())  # the slots with a draft come first
    return candidates[0, :k], rows[0, :k]


def build_tree(
    draft: Session,
    ids: torch.Tensor,
    branching: tuple[int, ...],
    cfg: SamplingConfig,
    generator: torch.Generator | None = None,
    siblings: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> TokenTree:
    """Grow a tree below ids[-1] with one draft forward per level (tree attention again):
    branching[ℓ] children under every node of depth ℓ (the root has depth 0): (3, 1, 1) is three
    first tokens, each followed by a chain of two. Greedy (T = 0) takes the top-k tokens of q.
    With no `siblings` each level is drawn at once on the device, no host sync; a sampler passed
    in (`draw_siblings`, or one of `proof.broken`) runs node by node and may return fewer.
    """
    vocab, device = draft.vocab_size, draft.device
    tokens = torch.empty(0, dtype=torch.long, device=device)
    parents: list[int] = []
    q_rows = torch.empty(0, vocab, device=device)
    alive = [] if not cfg.greedy and siblings is None else None  # (n_ℓ,) per level
    widths: list[int] | None = [] if cfg.greedy or siblings is None else None
    frontier = [-1]  # the nodes of the current level, contiguous; -1 is the root
    for k in branching:
        scores = draft.tree_logits(ids, tokens, parents)  # (1 + N, V) the lean runtime feeds
        # only the nodes it has not seen (the last level); transformers' re-feeds the whole tree
        logits = scores[frontier[0] + 1 : frontier[-1] + 2]  # (W, V) row 0 is the root
        width = len(frontier)
        if cfg.greedy:
            k = min(k, vocab)
            kids = logits.topk(k, dim=-1).indices.reshape(-1)  # (W k,) distinct, best first
            q = torch.nn.functional.one_hot(kids, vocab).float()  # (W k, V) unused by greedy
        elif widths is not None:  # the whole level at once, on the device
            probs = logits_to_probs(logits, cfg, check=False)  # (W, V)
            kids, q, live = draw_sibling_slots(probs, k, generator)  # (W, k'), (W, k', V)
            k = kids.shape[1]
            kids, q = kids.reshape(-1), q.reshape(width * k, vocab)
            alive.append(live.reshape(-1))
        else:  # a learner's sampler, node by node (host syncs: for teaching only)
            new_tokens, new_parents, new_q = [], [], []
            for node, row in zip(frontier, logits, strict=True):
                probs = logits_to_probs(row, cfg)  # (V,)
                node_kids, node_q = siblings(probs, k, generator)  # (k',), (k', V)
                new_tokens.append(node_kids)
                new_parents += [node] * node_kids.shape[0]
                new_q.append(node_q)
            kids, q = torch.cat(new_tokens), torch.cat(new_q)
        if widths is not None:  # a fixed layout: k children under every node of the frontier
            widths.append(k)
            new_parents = [node for node in frontier for _ in range(k)]
        first_new = tokens.shape[0]
        tokens = torch.cat([tokens, kids])  # (N,)
        parents += new_parents
        q_rows = torch.cat([q_rows, q])  # (N, V)
        frontier = list(range(first_new, tokens.shape[0]))
    if alive is not None:  # (N,) the levels' slots, none if the tree has no level
        alive = torch.cat([torch.ones(0, dtype=torch.bool, device=device), *alive])
    return TokenTree(tokens, parents, q_rows, alive, None if widths is None else tuple(widths))


# ----------------------------------------------------------------- verification: pure functions
def tree_sample(
    tree: TokenTree,
    p_probs: torch.Tensor,
    generator: torch.Generator | None = None,
    verify_siblings: Callable[..., tuple[int, torch.Tensor]] = multi_draft_sample,
) -> tuple[list[int], torch.Tensor]:
    """Walk down the tree with recursive rejection sampling at every node. p_probs: (1 + N, V),
    row 0 the target after the root, row 1 + i after node i. Returns the accepted path (nodes,
    root to leaf) and the next token: the residual sample, or the bonus sample at a leaf."""
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


# What `tree_step` calls: (tree, the target's raw p_logits (1 + N, V), cfg, generator) -> Verdict.
TreeVerifier = Callable[[TokenTree, torch.Tensor, SamplingConfig, torch.Generator | None], Verdict]


def teaching_tree_verifier(rule: Callable[..., tuple[int, torch.Tensor]]) -> TreeVerifier:
    """Wrap a multi-draft rule `rule(candidates, q_probs, p_probs, generator) -> (i, token)`
    (`verify.multi_draft_sample`, or a broken one) as a `TreeVerifier`: `tree_sample` with it
    (`tree_greedy` when greedy), run as written, with its own host syncs: for teaching."""

    def verifier(tree, p_logits, cfg, generator=None) -> Verdict:
        if cfg.greedy:
            path, token = tree_greedy(tree, p_logits)
        else:
            path, token = tree_sample(tree, logits_to_probs(p_logits, cfg), generator, rule)
        token = torch.as_tensor(token, device=p_logits.device)
        drafted = tree.path_tokens(tree.branch(path))
        return Verdict(path, int(token), drafted, tree.tokens[path], token)

    return verifier


def verify_tree_on_device(
    tree: TokenTree,
    p_logits: torch.Tensor,
    cfg: SamplingConfig,
    generator: torch.Generator | None = None,
) -> Verdict:
    """`tree_greedy` or `tree_sample` (with `multi_draft_sample`) on the device, read by ONE
    host sync, for a tree with a fixed layout (`tree.widths`). Every node of a level is verified
    at once: greedy, its first child equal to the target's argmax; sampling, recursive rejection
    over its children (empty slots never accepted), then one token per node from what is left
    (the last residual, or p at a leaf: the bonus). The walk from the root only reads these
    outcomes; nodes off it spend coins nobody reads, so the output law is `tree_sample`'s (the
    draws are not). Raises ValueError, after the sync, for bad inputs."""
    widths = tree.widths
    if widths is None:
        raise ValueError("verify_tree_on_device needs a tree drafted level by level (widths)")
    levels = _levels(widths)
    tokens = tree.tokens.to(p_logits.device)  # (N,)
    if cfg.greedy:
        out = _greedy_levels(tree, tokens, p_logits, levels)
    else:
        out = _sampled_levels(tree, tokens, p_logits, cfg, generator, levels)
    n, row, path_rows = _walk_levels(out.stop, widths, levels, tokens)
    token = out.token.index_select(0, row[None])[0]  # 0-d
    accepted = tokens.index_select(0, (path_rows - 1).clamp_min(0))  # (depth,)
    outcome = torch.cat([n[None], token[None], path_rows, tokens, out.flags.long()])
    n_host, token_host, *rest = outcome.tolist()  # THE host sync of the verification
    raise_for(rest[-4:], tokens, p_logits.shape[-1])
    path, host_tokens = [r - 1 for r in rest[:n_host]], rest[len(widths) : -4]
    drafted = [host_tokens[i] for i in tree.branch(path)]
    return Verdict(path, token_host, drafted, accepted[:n_host], token)


_Levels = list[tuple[int, int, slice]]  # per level: (first row, W nodes, their children)


def _levels(widths: tuple[int, ...]) -> _Levels:
    """Per level ℓ of a fixed-layout tree: (lo, W, children): its W nodes are rows lo .. lo + W − 1
    of the target's (1 + N, V) scores, their W·k children the tree nodes `children`."""
    levels, lo, width = [], 0, 1
    for k in widths:
        levels.append((lo, width, slice(lo + width - 1, lo + width - 1 + width * k)))
        lo, width = lo + width, width * k
    levels.append((lo, width, slice(0)))  # the leaves, which have no children
    return levels


def _greedy_levels(
    tree: TokenTree, tokens: torch.Tensor, p_logits: torch.Tensor, levels: _Levels
) -> DeviceOutcome:
    """Per level, (W,) the first child equal to the target's argmax (k if none); the argmax
    after every row (1 + N,); the input flags (only NaN can be wrong when greedy)."""
    best, next_tokens = p_logits.max(-1)  # (1 + N,) argmax's first-maximum rule
    choices = []
    for (lo, width, nodes), k in zip(levels, tree.widths, strict=False):
        match = tokens[nodes].view(width, k) == next_tokens[lo : lo + width, None]  # (W, k)
        if tree.alive is not None:  # (a greedy draft has no empty slots)
            match &= tree.alive.to(tokens.device)[nodes].view(width, k)
        choices.append(_first_true(match))
    return DeviceOutcome(choices, next_tokens, greedy_flags(best))


def _sampled_levels(
    tree: TokenTree,
    tokens: torch.Tensor,
    p_logits: torch.Tensor,
    cfg: SamplingConfig,
    generator: torch.Generator | None,
    levels: _Levels,
) -> DeviceOutcome:
    """Per level, (W,) the child accepted by recursive rejection sampling (k if none); one token
    per row (1 + N,) from what is left there (the last residual; p at a leaf, the bonus); the
    input flags (`value_flags`, empty slots exempt)."""
    device, vocab = tokens.device, p_logits.shape[-1]
    p_probs = logits_to_probs(p_logits, cfg, check=False)  # (1 + N, V)
    q_probs = tree.q_probs.to(device)  # (N, V)
    alive = tree.alive.to(device) if tree.alive is not None else None
    choices, left = [], []  # left, per level: (W, V) what each node samples from at the end
    for (lo, width, nodes), k in zip(levels, tree.widths, strict=False):
        x = tokens[nodes].view(width, k, 1)
        q = q_probs[nodes].view(width, k, vocab)
        live = alive[nodes].view(width, k) if alive is not None else None
        coins = rand(width, k, generator=generator, device=device)  # (W, k)
        p, accepted = p_probs[lo : lo + width], []  # (W, V) normalised
        for i in range(k):  # multi_draft_sample, for every node of the level at once
            q_i = q[:, i]  # (W, V)
            take = coins[:, i] * q_i.gather(1, x[:, i])[:, 0] < p.gather(1, x[:, i])[:, 0]
            residual = (p - q_i).clamp_min(0)  # residual_distribution, its guard included
            mass = residual.sum(-1, keepdim=True)
            after = torch.where(mass > 0, residual / mass, p / p.sum(-1, keepdim=True))
            if live is not None:
                take &= live[:, i]
                after = torch.where(live[:, i, None], after, p)  # an empty slot: no round
            accepted.append(take)
            p = after
        choices.append(_first_true(torch.stack(accepted, 1)))
        left.append(p)
    left.append(p_probs[levels[-1][0] :])  # the leaves: the bonus sample from p
    weights = torch.cat(left)  # (1 + N, V)
    u = uniforms(weights.shape[0], generator, device)  # (1 + N, 1)
    next_tokens = inverse_cdf(weights.cumsum(-1, dtype=cdf_dtype(device)), u)  # (1 + N,)
    return DeviceOutcome(choices, next_tokens, value_flags(tokens, q_probs, p_probs, alive))


def _walk_levels(
    choices: list[torch.Tensor], widths: tuple[int, ...], levels: _Levels, tokens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The walk from the root, still on the device: a fixed number of levels, no branch on a
    device value. Returns n (0-d, the accepted path's length), the row it stops at (0-d) and
    the rows it went through (depth,), of which the first n are the accepted path."""
    device = tokens.device
    choice = torch.cat([*choices, torch.zeros(levels[-1][1], dtype=torch.long, device=device)])
    row = torch.zeros((), dtype=torch.long, device=device)  # the root
    going = torch.ones((), dtype=torch.bool, device=device)
    rows, steps = [], []
    for (lo, _, _), (next_lo, _, _), k in zip(levels, levels[1:], widths, strict=False):
        a = choice.index_select(0, row[None])[0]  # 0-d, no sync (index_select, not choice[row])
        going = going & (a < k)
        row = torch.where(going, next_lo + (row - lo) * k + a.clamp_max(k - 1), row)
        rows.append(row)
        steps.append(going)
    path_rows = torch.stack(rows) if rows else tokens.new_zeros(0)  # (depth,)
    n = torch.stack(steps).sum() if steps else tokens.new_zeros(())
    return n, row, path_rows


def _first_true(flags: torch.Tensor) -> torch.Tensor:
    """(W, k) bool -> (W,) the index of the first True per row, k if none (no sync)."""
    stop = torch.cat([flags, flags.new_ones(flags.shape[0], 1)], 1)  # (W, k + 1)
    return stop.to(torch.uint8).argmax(1)  # the first maximum


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
    """The tree shape with the best modelled speedup on THIS device. verify_cost[k - 1] = the
    target's time for one forward over k tokens / over one token (`timing.verify_curve`).
    Candidates: a first level of w siblings, then one or two children per node, down to
    `max_depth` levels, while all nodes + 1 fit the curve. The draft pays one forward (cost c)
    per level, whatever its width (a small draft is overhead-bound)."""
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
    verifier: TreeVerifier = verify_tree_on_device,
    siblings: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> tuple[torch.Tensor, Step]:
    """One token-tree step after the accepted sequence `ids` (L,). Returns (new ids, Step).

    The Step reports the branch followed: the accepted nodes, then first-drawn children below,
    so `n_accepted` and `bonus` mean what they mean in a chain. Host syncs on an accelerator:
    **one** per step (the verdict), whatever the shape or temperature; the sessions copy tree
    masks built on the host without waiting (tests/engine/test_simulated_device.py pins it). A
    `teaching_tree_verifier` or a learner's `siblings` runs node by node, with its own syncs.
    """
    # 1. Draft a tree.
    tree = build_tree(draft, ids, branching, cfg, generator, siblings)
    # 2. One target forward over the last accepted token and every node.
    p_logits = target.tree_logits(ids, tree.tokens, tree.parents)  # (1 + N, V)
    # 3. Walk down the tree: accept a path, then add one target token (residual or bonus sample).
    verdict = verifier(tree, p_logits, cfg, generator)
    ids = torch.cat([ids, verdict.accepted, verdict.token[None]])
    # 4. Roll back to the accepted sequence (the lean runtime keeps the branch's cache entries).
    for session in (target, draft):
        session.keep_branch(verdict.path)
        session.crop(ids.shape[0] - 1)
    return ids, Step(verdict.drafted, verdict.n, verdict.next_token)


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
    verify_siblings: Callable[..., tuple[int, torch.Tensor]] | None = None,
    siblings: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None,
    runtime: str = DEFAULT_RUNTIME,
) -> Generation:
    """Token-tree speculative decoding; same arguments and result type as `speculative_generate`.
    `branching` gives the tree shape per level (its length is the depth γ). `verify_siblings`
    and `siblings` swap the multi-draft rule and the sibling sampler (`proof.broken`), for
    teaching only; greedy decoding uses neither. The output law is the target's own."""
    cfg = SamplingConfig(temperature, top_k, top_p)
    shaped = isinstance(branching, (tuple, list)) and len(branching) > 0
    if not (shaped and all(inputs.is_count(k) for k in branching)):
        raise ValueError(f"branching must be a non-empty tuple of positive ints, got {branching!r}")
    inputs.check_gamma(len(branching))
    inputs.check_positions([target, draft], inputs.check_prompt(input_ids).shape[0], max_new_tokens)
    inputs.check_vocab_size("target", target, vocab_size)
    inputs.check_vocab_size("draft", draft, vocab_size)
    p_model = open_session(target, vocab_size, runtime)
    q_model = open_session(draft, vocab_size, runtime)
    inputs.check_same_vocab(p_model.vocab_size, q_model)
    generator = generator_on(generator, p_model.device)  # every draw where the models are
    verifier = verify_tree_on_device  # greedy, or the multi-draft rule on a level-wide tree
    if not cfg.greedy and (verify_siblings is not None or siblings is not None):
        verifier = teaching_tree_verifier(verify_siblings or multi_draft_sample)

    def step(ids: torch.Tensor, depth: int) -> tuple[torch.Tensor, Step]:
        shape = tuple(branching[:depth])  # the token budget may cut the tree short
        return tree_step(p_model, q_model, ids, shape, cfg, generator, verifier, siblings)

    return run_steps(
        p_model, q_model, step, input_ids, max_new_tokens, len(branching), eos_token_id, on_step
    )


__all__ = [
    "TokenTree",
    "build_tree",
    "choose_branching",
    "draw_sibling_slots",
    "draw_siblings",
    "expected_tree_tokens",
    "teaching_tree_verifier",
    "tree_greedy",
    "tree_sample",
    "tree_speculative_generate",
    "tree_step",
    "verify_tree_on_device",
]
