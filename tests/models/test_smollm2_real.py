"""The real SmolLM2-135M-Instruct, where `make smollm2` (which `make test` runs first) cached it."""

from __future__ import annotations

import pytest
import torch

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
