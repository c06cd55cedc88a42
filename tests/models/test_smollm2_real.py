"""The real SmolLM2-135M-Instruct, where `make smollm2` (which `make test` runs first) cached it."""

from __future__ import annotations

import pytest
import torch

from specdec_lab import decoding, drafters, heads
from specdec_lab.engine import llama, sessions
from specdec_lab.models import load_model, load_pair, smollm2

pytestmark = [
    pytest.mark.smollm2,
    pytest.mark.skipif(not smollm2.is_cached(), reason="run `make smollm2` first"),
]


@pytest.fixture(scope="module")
def target():
    return load_model(str(smollm2.MODEL_DIR), device="cpu", dtype=torch.float32)


def test_the_cache_records_the_checked_wheel() -> None:
    source = smollm2.source_of()
    assert (source["version"], source["sha256"]) == (smollm2.VERSION, smollm2.SHA256)
    assert "Apache-2.0" in source["licence"]


def test_lean_logits_equal_transformers_in_float32(target) -> None:
    assert llama.lean_support(target) is None
    ids = torch.randint(0, 49152, (48,), generator=torch.Generator().manual_seed(0))
    lean = sessions.open_session(target, runtime="lean")
    hf = sessions.open_session(target, runtime="hf")
    assert torch.allclose(lean.logits(ids), hf.logits(ids), atol=2e-4, rtol=1e-4)


@pytest.mark.skipif(not smollm2.pair_available(), reason="no smollm2-draft in data/models/")
def test_the_local_pair_loads_with_its_own_draft() -> None:
    pair = load_pair("smollm2-local", device="cpu", dtype="float32")
    assert pair.vocab_size == 49152
    assert "runtime lean" in pair.describe()


@pytest.mark.skipif(not smollm2.pair_available(), reason="no smollm2-draft in data/models/")
def test_the_local_pair_drafts_with_its_head_by_default_and_its_draft_model_on_request() -> None:
    pair = load_pair("smollm2-local", device="cpu", dtype="float32")
    assert pair.drafter == "draft head" and "drafts with its draft head" in pair.describe()
    ids = pair.encode("def add(a, b):")
    outs = {}
    for name, kind in [(None, heads.HeadDrafter), ("draft model", drafters.ModelDrafter)]:
        target, drafter = pair.speculative(name)
        assert isinstance(drafter, kind)
        outs[name] = decoding.speculative_generate(
            target, drafter, ids, 12, 3, temperature=0.0, vocab_size=pair.vocab_size
        )
    # greedy: either drafter gives the target's own tokens; the head is the one that was asked
    assert torch.equal(outs[None].tokens, outs["draft model"].tokens)
    with pytest.raises(ValueError, match="offers the drafters"):
        pair.speculative("draft-large")
