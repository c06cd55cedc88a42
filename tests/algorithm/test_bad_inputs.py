"""Bad inputs, as a learner passes them: each fails in one line that names the argument and says
what to do, before any forward runs; and the inputs that used to fail but are fine now work.
One case a line: (call, error type, the words its message must contain)."""

from __future__ import annotations

import functools
import math

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specdec_lab import decoding, drafters, sampling, tree
from specdec_lab.__main__ import main
from specdec_lab.engine import llama, sessions
from specdec_lab.measure import plan, timing
from specdec_lab.models.stand_ins import tiny_tokenizer
from specdec_lab.proof import mock

TARGET = mock.MockLM(vocab_size=8, seed=0)
DRAFT = mock.MockDraft(TARGET, quality=0.7)
IDS = torch.tensor([1, 2, 3])


@functools.cache
def micro() -> LlamaForCausalLM:
    """A 2-layer Llama of vocabulary 32 (conftest's `micro`, as a plain function)."""
    config = LlamaConfig(
        vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
    )  # fmt: skip
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def spec(ids=IDS, n=5, **kw):
    return decoding.speculative_generate(TARGET, DRAFT, ids, n, **kw)


def auto(ids=IDS, n=5, model=TARGET, **kw):
    return decoding.autoregressive_generate(model, ids, n, **kw)


def tree_(ids=IDS, branching=(2, 1), **kw):
    return tree.tree_speculative_generate(TARGET, DRAFT, ids, 5, branching, **kw)


def make_plan(candidates=None, ids=IDS, **kw):
    if candidates is None:
        candidates = {
            "draft": lambda: (TARGET, drafters.ModelDrafter(sessions.open_session(DRAFT)))
        }
    return plan.make_plan(TARGET, candidates, ids, 0.0, **kw)


def encoded() -> dict:
    return tiny_tokenizer("gpt2")("def f():", return_tensors="pt")  # a BatchEncoding


BAD = [
    # numbers that ran silently: no vocabulary, a bool for an int, an infinite temperature
    (lambda: spec(vocab_size=0), ValueError, ("vocab_size", "positive integer", "got 0")),
    (lambda: auto(vocab_size=0), ValueError, ("vocab_size", "positive integer", "got 0")),
    (lambda: spec(vocab_size=-1), ValueError, ("vocab_size", "positive integer", "got -1")),
    (lambda: spec(vocab_size="8"), ValueError, ("vocab_size", "positive integer", "'8'")),
    (lambda: spec(gamma=True), ValueError, ("gamma", "positive integer", "True")),
    (lambda: spec(n=True), ValueError, ("max_new_tokens", "positive integer", "True")),
    (lambda: spec(temperature=math.inf), ValueError, ("temperature", "finite", "inf")),
    (lambda: auto(temperature=math.inf), ValueError, ("temperature", "finite", "inf")),
    (lambda: spec(temperature=True), ValueError, ("temperature", "number", "True")),
    (lambda: tree_(branching=(True,)), ValueError, ("branching", "positive ints", "True")),
    (lambda: tree_(branching=3), ValueError, ("branching", "tuple of positive ints", "got 3")),
    (lambda: make_plan(max_tokens=1), ValueError, ("max_tokens", ">= 2", "got 1")),
    (lambda: make_plan(repeats=0), ValueError, ("repeats", "positive integer", "got 0")),
    # raw errors from deep inside: a string for a number, an int for a generator, no candidates
    (lambda: spec(top_p="0.9"), ValueError, ("top_p", "number in (0, 1]", "'0.9'")),
    (lambda: spec(top_k=True), ValueError, ("top_k", "positive integer", "True")),
    (lambda: spec(generator=0), TypeError, ("generator", "torch.Generator().manual_seed(0)")),
    (lambda: auto(generator=0), TypeError, ("generator", "torch.Generator().manual_seed(0)")),
    (lambda: tree_(generator=0), TypeError, ("generator", "torch.Generator().manual_seed(0)")),
    (lambda: sampling.sample(torch.ones(3), 0), TypeError, ("generator", "torch.Generator()")),
    (lambda: make_plan({}), ValueError, ("candidates", "non-empty", "plan.pair_candidates(pair)")),
    (lambda: make_plan([]), ValueError, ("candidates", "non-empty", "plan.pair_candidates(pair)")),
    (lambda: sampling.logits_to_probs(torch.zeros(4), 1.0, temperature=1.0), TypeError, ("once",)),
    (lambda: spec(on_step=5), TypeError, ("on_step", "a function or None", "5")),
    (lambda: spec(verifier=5), TypeError, ("verifier", "a function or None", "5")),
    (lambda: drafters.HeuristicGamma(DRAFT, initial=True), ValueError, ("initial", "True")),
    (lambda: drafters.PromptLookupDrafter(8, max_ngram=True), ValueError, ("max_ngram", "True")),
    # text, or a tokenizer's output, where token ids belong: say how to encode it
    (lambda: spec(ids="def f():"), TypeError, ("input_ids", "got str", "pair.encode(text)")),
    (lambda: auto(ids="def f():"), TypeError, ("input_ids", "got str", "pair.encode(text)")),
    (lambda: spec(ids=["def", "f"]), TypeError, ("input_ids", "got list", "pair.encode(text)")),
    (lambda: spec(ids=encoded()), TypeError, ("input_ids", "attention_mask", "['input_ids']")),
    (lambda: spec(ids={"input_ids": [1]}), TypeError, ("input_ids is a dict", "['input_ids']")),
    (lambda: make_plan(ids="def f():"), TypeError, ("input_ids", "pair.encode(text)")),
    # token ids outside the vocabulary: an IndexError on the CPU, a device-side assert on CUDA
    (lambda: spec(ids=[1, 8]), ValueError, ("token id 8", "[0, 8)", "tokenizer")),
    (lambda: auto(ids=[-1, 2]), ValueError, ("token id -1", "[0, 8)", "tokenizer")),
    (lambda: tree_(ids=[9]), ValueError, ("token id 9", "[0, 8)", "tokenizer")),
    (lambda: auto(ids=[1, 32], model=micro(), runtime="lean"), ValueError, ("token id 32",)),
    (lambda: auto(ids=[1, 32], model=micro(), runtime="hf"), ValueError, ("token id 32",)),
    (lambda: auto(ids=[-3, 1], model=micro(), runtime="hf"), ValueError, ("token id -3",)),
]


@pytest.mark.parametrize(("call", "error", "words"), BAD)
def test_a_bad_input_fails_in_one_line_that_says_what_to_do(call, error, words) -> None:
    with pytest.raises(error) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message and all(w in message for w in words), message


BAD_CLI = [
    ("demo --pair mock --gamma 0", "argument --gamma: must be a positive integer, got 0"),
    ("demo --pair mock --rounds 0", "argument --rounds: must be a positive integer, got 0"),
    ("demo --pair mock --max-new-tokens 0", "argument --max-new-tokens: must be a positive"),
    ("demo --pair mock --top-k 0", "argument --top-k: must be a positive integer, got 0"),
    ("demo --pair mock --temperatures 0.7 inf", "argument --temperatures: temperature must be"),
    ("bench --gammas 3 0", "argument --gammas: must be a positive integer, got 0"),
    ("bench --repeats 0", "argument --repeats: must be a positive integer, got 0"),
    ("bench --prompts 0", "argument --prompts: must be a positive integer, got 0"),
    ("bench --temperatures -1", "argument --temperatures: temperature must be a finite number"),
]


@pytest.mark.parametrize(("argv", "words"), BAD_CLI)
def test_a_bad_cli_argument_is_refused_before_anything_runs(argv, words, capsys) -> None:
    with pytest.raises(SystemExit) as caught:
        main(argv.split())
    assert caught.value.code == 2 and words in capsys.readouterr().err


# ------------------------------------------------------------------ what used to fail, now works
def test_logits_to_probs_takes_its_temperature_keyword_again() -> None:
    logits = torch.tensor([1.0, 0.5, -2.0])
    expected = sampling.logits_to_probs(logits, sampling.SamplingConfig(0.7, top_k=2))
    assert torch.equal(sampling.logits_to_probs(logits, temperature=0.7, top_k=2), expected)
    assert torch.equal(sampling.logits_to_probs(logits, 0.7, 2), expected)


@pytest.mark.parametrize("runtime", ["lean", "hf"])
def test_autoregressive_generate_resets_a_session_it_is_handed(runtime) -> None:
    session = sessions.open_session(micro(), runtime=runtime)
    first = auto(IDS, 6, session, temperature=0).tokens
    assert torch.equal(auto(IDS, 6, session, temperature=0).tokens, first)
    longer = torch.cat([IDS, first[:2]])  # a second prompt, longer than what the cache holds
    assert torch.equal(auto(longer, 4, session, temperature=0).tokens, first[2:])


def test_a_huge_gamma_reserves_only_what_the_token_budget_needs() -> None:
    """γ = 10**7 once reserved a KV cache for 10**7 positions (123 GB for SmolLM2)."""
    capacity = {}
    for gamma in (4, 10**7):
        target, draft = (sessions.open_session(micro(), runtime="lean") for _ in range(2))
        decoding.speculative_generate(target, draft, IDS, 4, gamma, temperature=0)
        capacity[gamma] = (target.cache.capacity, draft.cache.capacity)
    assert capacity[10**7] == capacity[4] == (llama.CHUNK, llama.CHUNK)


def test_session_sweep_runs_twice_on_the_same_sessions() -> None:
    opened = {"lean": sessions.open_session(micro(), runtime="lean")}
    for _ in range(2):
        times = timing.session_sweep(opened, [1, 2], repeats=1, prefix=4)
        assert list(times) == ["lean"] and len(times["lean"]) == 2
