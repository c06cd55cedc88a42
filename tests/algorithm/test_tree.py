"""Multi-draft verification and token trees: the exact law, Monte Carlo against p with the broken
variants rejected, greedy exactness on mocks and on a tiny Llama, and the tree attention mask."""

import math

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specdec_lab import decoding, theory, tree, verify
from specdec_lab.engine.sessions import HFSession, open_session, tree_branch
from specdec_lab.proof import broken, mock, stats
from specdec_lab.sampling import SamplingConfig, sample

DELTA = 1e-6


def _random_probs(g, *shape, peaky=2.0):
    return (peaky * torch.randn(*shape, generator=g)).softmax(-1)


# ------------------------------------------------------------------ layer 1: the exact law
def test_multi_draft_law_equals_p() -> None:
    g = torch.Generator().manual_seed(0)
    cases = [(_random_probs(g, 7), _random_probs(g, k, 7)) for k in [1, 2, 3, 5] for _ in range(50)]
    p = _random_probs(g, 7)
    cases += [
        (p, p.expand(3, -1)),  # q = p: every first candidate is accepted
        (p, torch.eye(7)[[0, 0, 3]]),  # point masses (n-gram or greedy drafts), repeated
        (torch.eye(7)[2], _random_probs(g, 2, 7)),  # a one-hot target
        (torch.tensor([0.5, 0.5, 0, 0, 0, 0, 0]), torch.eye(7)[[5, 6]]),  # disjoint supports
    ]
    for p, q in cases:
        torch.testing.assert_close(verify.multi_draft_law(q, p), p, atol=1e-6, rtol=0)


def test_multi_draft_law_of_the_broken_rule_is_not_p() -> None:
    # Power for the Monte Carlo check below: the stale-residual rule is far from p.
    p = torch.tensor([0.05, 0.1, 0.15, 0.2, 0.2, 0.3])
    q = torch.tensor([0.4, 0.3, 0.1, 0.1, 0.05, 0.05])
    a = torch.minimum(p, q)  # two i.i.d. siblings, both checked against the same p
    stale = a + (1 - a.sum()) * a + (1 - a.sum()) ** 2 * verify.residual_distribution(p, q)
    assert stats.tv_distance(stale, p) > 0.1


@pytest.mark.parametrize(
    "candidates, q, p, message",
    [
        (torch.tensor([[0]]), torch.eye(3)[:1], torch.eye(3)[0], "1-D"),
        (torch.tensor([0, 1]), torch.eye(3)[:1], torch.eye(3)[0], "2 rows"),
        (torch.tensor([0]), torch.eye(4)[:1], torch.eye(3)[0], "V="),
        (torch.tensor([1]), torch.eye(3)[:1], torch.eye(3)[0], "q\\(x\\) = 0"),
        (torch.tensor([0]), torch.eye(3)[:1], torch.tensor([float("nan"), 0, 1]), "NaN"),
    ],
)
def test_multi_draft_bad_input(candidates, q, p, message) -> None:
    with pytest.raises(ValueError, match=message):
        verify.multi_draft_sample(candidates, q, p)


# ------------------------------------------------------------------ layer 3: Monte Carlo
P = torch.tensor([0.05, 0.1, 0.15, 0.2, 0.2, 0.3])
Q = torch.tensor([0.4, 0.3, 0.1, 0.1, 0.05, 0.05])


def _draw_iid(q, k, g):
    return sample(q.expand(k, -1), g), q.expand(k, -1)


SIBLING_SAMPLERS = {"i.i.d.": _draw_iid, "without replacement": tree.draw_siblings}


def _multi_draft_outcomes(n, draw, verifier, g, k=3) -> list[int]:
    out = []
    for _ in range(n):
        candidates, q_rows = draw(Q, k, g)
        out.append(int(verifier(candidates, q_rows, P, g)[1]))
    return out


@pytest.mark.parametrize("name", list(SIBLING_SAMPLERS))
def test_multi_draft_sample_follows_p(name) -> None:
    g = torch.Generator().manual_seed(0)
    n = stats.samples_needed(tol=0.04, delta=DELTA, n_outcomes=6)
    outcomes = _multi_draft_outcomes(n, SIBLING_SAMPLERS[name], verify.multi_draft_sample, g)
    check = stats.check_against_law(outcomes, P, DELTA)
    assert check.passed, check


@pytest.mark.parametrize(
    "draw, verifier",
    [
        (_draw_iid, broken.stale_residual),
        (tree.draw_siblings, broken.stale_residual),
        (broken.siblings_without_replacement_as_iid, verify.multi_draft_sample),
    ],
    ids=["stale residual, i.i.d.", "stale residual, distinct", "distinct verified as i.i.d."],
)
def test_multi_draft_check_catches_broken_variants(draw, verifier) -> None:
    g = torch.Generator().manual_seed(0)
    n = stats.samples_needed(tol=0.04, delta=DELTA, n_outcomes=6)
    check = stats.check_against_law(_multi_draft_outcomes(n, draw, verifier, g), P, DELTA)
    assert not check.passed, check


def test_without_replacement_q_rows() -> None:
    rows = verify.without_replacement_q(torch.tensor([0.5, 0.3, 0.2]), torch.tensor([1, 0]))
    torch.testing.assert_close(rows, torch.tensor([[0.5, 0.3, 0.2], [5 / 7, 0.0, 2 / 7]]))
    candidates, q = tree.draw_siblings(torch.tensor([0.0, 0.6, 0.4]), 3)
    assert sorted(candidates.tolist()) == [1, 2] and q.shape == (2, 3)  # only 2 tokens have mass


def test_sibling_slots_draw_what_torch_multinomial_draws() -> None:
    q = _random_probs(torch.Generator().manual_seed(3), 4, 50)  # (W, V) full support
    kids, rows, alive = tree.draw_sibling_slots(q, 3, torch.Generator().manual_seed(7))
    g = torch.Generator().manual_seed(7)
    expected = torch.stack([torch.multinomial(row, 3, replacement=False, generator=g) for row in q])
    assert torch.equal(kids, expected) and bool(alive.all())
    for w in range(4):
        torch.testing.assert_close(rows[w], verify.without_replacement_q(q[w], kids[w]))
    # Less support than slots: the tokens with mass first, then empty slots (q row zero).
    q = torch.tensor([[0.0, 0.7, 0.0, 0.3], [0.25, 0.25, 0.25, 0.25]])
    kids, rows, alive = tree.draw_sibling_slots(q, 3, torch.Generator().manual_seed(0))
    assert alive.tolist() == [[True, True, False], [True, True, True]]
    assert sorted(kids[0, :2].tolist()) == [1, 3] and not rows[0, 2].any()


def _level_tree(g, widths, vocab, support=None):
    """A random tree with a fixed layout, as `build_tree` drafts it (empty slots included)."""
    parents, frontier, qs, tokens, alive = [], [-1], [], [], []
    for k in widths:
        q = _random_probs(g, len(frontier), vocab)
        if support is not None:  # only the first `support` tokens of each row have mass
            q[:, support:] = 0
            q = q / q.sum(-1, keepdim=True)
        kids, rows, live = tree.draw_sibling_slots(q, k, g)
        first = len(parents)
        parents += [node for node in frontier for _ in range(kids.shape[1])]
        tokens.append(kids.reshape(-1))
        qs.append(rows.reshape(-1, vocab))
        alive.append(live.reshape(-1))
        frontier = list(range(first, len(parents)))
    return tree.TokenTree(
        torch.cat(tokens), parents, torch.cat(qs), torch.cat(alive), tuple(widths)
    )


@pytest.mark.parametrize("widths", [(1,), (3,), (2, 2), (3, 1, 1), (2, 3, 1)])
def test_tree_walk_on_device_matches_the_reference_walks(widths) -> None:
    """`verify_tree_on_device` against `tree_greedy` and `tree_sample`, run as written by the
    teaching verifier: the same path, next token, branch followed and tokens kept."""
    g = torch.Generator().manual_seed(0)
    reference_walk = tree.teaching_tree_verifier(verify.multi_draft_sample)
    greedy, one_hot = SamplingConfig(0.0), SamplingConfig(1.0)
    for trial in range(30):
        t = _level_tree(g, widths, 6, support=2 if trial % 2 else None)
        n = t.tokens.shape[0]
        logits = torch.randn(1 + n, 6, generator=g)
        logits[:, 0] += 0.5 * trial % 3  # now and then a long accepted path
        # A one-hot target makes sampling deterministic: both walks follow it exactly.
        p_logits = torch.full((1 + n, 6), -1e9).scatter_(1, logits.argmax(-1, keepdim=True), 0.0)
        for scores, cfg in ((logits, greedy), (p_logits, one_hot)):
            on_device = tree.verify_tree_on_device(t, scores, cfg, g)
            reference = reference_walk(t, scores, cfg, g)
            for field in ("path", "next_token", "drafted"):
                assert getattr(on_device, field) == getattr(reference, field), field
            assert on_device.accepted.tolist() == reference.accepted.tolist()
            assert on_device.drafted[: on_device.n] == t.path_tokens(on_device.path)


def test_tree_verification_on_device_follows_p_with_empty_slots() -> None:
    """One level of 3 slots over a q with 2 tokens of mass: the emitted token follows p."""
    q = torch.tensor([0.6, 0.4, 0.0, 0.0, 0.0, 0.0])
    g = torch.Generator().manual_seed(0)
    n = stats.samples_needed(tol=0.04, delta=DELTA, n_outcomes=6)
    outcomes = []
    for _ in range(n):
        kids, rows, alive = tree.draw_sibling_slots(q[None], 3, g)
        t = tree.TokenTree(kids[0], [-1] * 3, rows[0], alive[0], (3,))
        logits = torch.cat([P.log()[None], torch.zeros(3, 6)])  # row 0: p after the root
        verdict = tree.verify_tree_on_device(t, logits, SamplingConfig(1.0), g)
        outcomes.append(verdict.drafted[0] if verdict.path else verdict.next_token)
    check = stats.check_against_law(outcomes, P, DELTA)
    assert check.passed, check


# ------------------------------------------------------------------ the walk, without models
def test_tree_walks() -> None:
    # Root children a=0 (node 0) and b=1 (node 1); node 0 has child 2 (node 2).
    t = tree.TokenTree(torch.tensor([0, 1, 2]), [-1, -1, 0], torch.eye(4)[[0, 1, 2]])
    assert t.children(-1) == [0, 1] and t.children(0) == [2] and t.children(2) == []
    logits = torch.eye(4)[[1, 3, 3, 0]]  # target argmax: after root 1, after node 1: 3
    path, nxt = tree.tree_greedy(t, logits)
    assert path == [1] and int(nxt) == 3
    # Sampling with a one-hot target: the walk must follow it exactly.
    p = torch.eye(4)[[0, 2, 3, 3]]  # root -> 0 (node 0), node 0 -> 2 (node 2), leaf -> 3
    path, nxt = tree.tree_sample(t, p, torch.Generator().manual_seed(0))
    assert path == [0, 2] and int(nxt) == 3


# ------------------------------------------------------------------ greedy exactness
@pytest.fixture
def pair() -> tuple[mock.MockLM, mock.MockDraft]:
    target = mock.MockLM(vocab_size=11, sharpness=2.0, seed=0)
    return target, mock.MockDraft(target, quality=0.6, seed=1)


@pytest.mark.parametrize("branching", [(1,), (3,), (2, 2), (3, 1, 1, 1), (4, 2, 1)])
@pytest.mark.parametrize("prompt", [[3], [1, 2, 3], [10, 0, 5, 5, 9]])
def test_greedy_tree_equals_greedy_autoregressive(pair, branching, prompt) -> None:
    target, draft = pair
    ar = decoding.autoregressive_generate(target, prompt, 40, temperature=0)
    out = tree.tree_speculative_generate(target, draft, prompt, 40, branching, temperature=0)
    assert torch.equal(ar.tokens, out.tokens)
    s = out.stats
    assert s.new_tokens == 40 == sum(s.accepted) + len(s.accepted)
    assert s.target_calls == len(s.accepted) < 40
    assert s.draft_calls <= len(branching) * len(s.accepted)  # one draft forward per level


def test_wider_tree_accepts_more_per_call(pair) -> None:
    target, draft = pair
    chain = tree.tree_speculative_generate(target, draft, [1], 200, (1, 1, 1), temperature=0)
    wide = tree.tree_speculative_generate(target, draft, [1], 200, (4, 1, 1), temperature=0)
    assert wide.stats.tokens_per_target_call > chain.stats.tokens_per_target_call
    # A (1, 1, ..., 1) tree is the chain: same tokens and steps as speculative_generate.
    spec = decoding.speculative_generate(target, draft, [1], 200, 3, temperature=0)
    assert chain.stats.accepted == spec.stats.accepted


def test_bad_branching(pair) -> None:
    target, draft = pair
    for bad in [(), (2, 0), (1.5,)]:
        with pytest.raises(ValueError, match="branching"):
            tree.tree_speculative_generate(target, draft, [1], 5, bad)


def _tiny_llama(seed: int) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=16,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        initializer_range=0.3,
        bos_token_id=0,
        eos_token_id=None,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def llamas():
    target = _tiny_llama(0)
    draft = _tiny_llama(0)
    with torch.no_grad():
        g = torch.Generator().manual_seed(2)
        for w in draft.parameters():
            w.add_(0.1 * w.std() * torch.randn(w.shape, generator=g))
    return target, draft


def test_tree_attention_matches_separate_forwards(llamas) -> None:
    target, _ = llamas
    session = HFSession(target)
    ids = torch.tensor([1, 5, 7, 2, 9])
    session.logits(ids[:3])  # 3 tokens cached, a tail of 2 to feed with the tree
    t = tree.TokenTree(torch.tensor([4, 8, 3, 3, 6]), [-1, -1, 0, 1, 3], torch.zeros(5, 16))
    rows = session.tree_logits(ids, t.tokens, t.parents)  # (6, 16)
    with torch.no_grad():
        expected = [target(ids[None]).logits[0, -1]]
        for node in range(5):
            full = torch.cat([ids, t.tokens[tree_branch(t.parents, node)]])  # ids, root to node
            expected.append(target(full[None]).logits[0, -1])
    torch.testing.assert_close(rows, torch.stack(expected), atol=1e-5, rtol=1e-5)
    assert session.cached == 5 and session.cache.get_seq_length() == 5  # the tree was dropped


@pytest.mark.parametrize("branching", [(3, 1, 1), (2, 2, 2)])
def test_greedy_tree_matches_generate_on_tiny_llama(llamas, branching) -> None:
    target, draft = llamas
    for seed in range(3):
        prompt = torch.randint(0, 16, (5,), generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            expected = target.generate(prompt[None], max_new_tokens=30, do_sample=False)[0, 5:]
        out = tree.tree_speculative_generate(target, draft, prompt, 30, branching, temperature=0)
        assert torch.equal(out.tokens, expected)
        assert out.stats.target_calls < 30


def test_tree_sampling_runs_on_tiny_llama(llamas) -> None:
    target, draft = llamas
    g = torch.Generator().manual_seed(0)
    out = tree.tree_speculative_generate(target, draft, [1, 2], 20, (3, 1), top_k=8, generator=g)
    assert out.tokens.shape == (20,) and out.stats.target_calls < 20
    cfg = SamplingConfig(temperature=1.0)
    built = tree.build_tree(open_session(draft), torch.tensor([1, 2]), (3, 2), cfg, g)
    assert built.parents == [-1, -1, -1, 0, 0, 1, 1, 2, 2] and built.q_probs.shape == (9, 16)


def test_tree_model_reduces_to_leviathan_for_a_chain() -> None:
    for alpha in (0.0, 0.3, 0.83, 0.99):
        for depth in (1, 4, 8):
            chain = tree.expected_tree_tokens(alpha, (1,) * depth)
            assert math.isclose(chain, theory.expected_tokens(alpha, depth), rel_tol=1e-12)
    assert tree.tree_nodes((3, 2, 1)) == 3 + 6 + 6
    assert tree.expected_tree_tokens(0.5, (2, 1)) > tree.expected_tree_tokens(0.5, (1, 1))


def test_tree_shape_follows_the_device_verify_curve() -> None:
    """A flat verify curve (a GPU in its memory-bound regime) affords wide trees; a CPU whose
    verify cost climbs with every token keeps to a short chain; a poor draft stays short."""
    flat = [1.0] * 16
    steep = [1.0 + 0.25 * k for k in range(16)]
    wide = tree.choose_branching(0.7, 0.05, flat)
    narrow = tree.choose_branching(0.7, 0.05, steep)
    assert tree.tree_nodes(wide) > tree.tree_nodes(narrow)
    assert max(wide) > 1 and tree.tree_nodes(wide) + 1 <= 16
    assert tree.tree_nodes(tree.choose_branching(0.2, 0.3, steep)) <= 2
    # the choice is the best of its candidates under the model
    for shape in ((1,) * 4, (2, 1, 1), (3, 2, 1), (1,) * 8):
        best = tree.expected_tree_tokens(0.7, wide) / (
            len(wide) * 0.05 + flat[tree.tree_nodes(wide)]
        )
        other = tree.expected_tree_tokens(0.7, shape) / (
            len(shape) * 0.05 + flat[tree.tree_nodes(shape)]
        )
        assert best >= other - 1e-12
