"""Fast tests of the corpus builder, the tokenizer and the training loop, plus the shipped models."""

from __future__ import annotations

import ast
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from specdec_lab import corpus, train

MODELS_DIR = Path(__file__).resolve().parents[1] / "data" / "models"

SOURCE = '''#!/usr/bin/env python3
"""Module docstring: explains the module."""

import os  # trailing comment about os

# A comment paragraph
# spanning two lines.
CONSTANT = 3


class Thing:
    """A class docstring."""

    def method(self, x):
        """Only a docstring here."""


def function(a, b):
    """Add two numbers.

    Longer description.
    """
    text = "# not a comment"
    return a + b  # sum
'''


def _write_tree(root: Path) -> None:
    (root / "pkg").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "site-packages").mkdir()
    (root / "mod.py").write_text(SOURCE)
    (root / "pkg" / "helper.py").write_text(
        'def helper(n):\n    """Return n doubled."""\n    # double it\n    return 2 * n\n'
    )
    (root / "pkg" / "broken.py").write_text("def broken(:\n    pass\n")
    (root / "tests" / "test_mod.py").write_text('"""Should be excluded."""\nx = 1\n')
    (root / "site-packages" / "third.py").write_text('"""Should be excluded."""\ny = 2\n')


def test_split_source_separates_code_and_prose():
    code, prose = corpus.split_source(SOURCE)
    ast.parse(code)  # still valid Python: the docstring-only body became `...`
    for text in ["Module docstring", "A class docstring", "Add two numbers", "sum", "spanning"]:
        assert text not in code
        assert text in prose
    assert "trailing comment about os" in prose
    assert "A comment paragraph\nspanning two lines." in prose  # consecutive comments joined
    assert '"# not a comment"' in code and "not a comment" not in prose
    assert "#!/usr/bin/env" not in prose and "#" not in code.replace('"# not', "")
    assert "def method(self, x):\n        ...\n" in code
    assert "return a + b\n" in code


def test_build_corpus_skips_tests_site_packages_and_broken(tmp_path):
    root = tmp_path / "stdlib"
    _write_tree(root)
    files = [rel for rel, _ in corpus.iter_source_files(root)]
    assert files == ["mod.py", "pkg/broken.py", "pkg/helper.py"]
    sizes = corpus.build_corpus(tmp_path / "out", root=root, heldout_percent=0, progress=False)
    assert sizes["code_train"]["files"] == 2 and sizes["code_heldout"]["files"] == 0
    code = (tmp_path / "out" / "code_train.txt").read_text()
    prose = (tmp_path / "out" / "prose_train.txt").read_text()
    assert "return 2 * n" in code and "Return n doubled." in prose and "double it" in prose
    assert "excluded" not in code + prose and "broken" not in code
    assert len(corpus.read_documents(tmp_path / "out" / "code_train.txt")) == 2


def test_heldout_split_is_deterministic():
    paths = [f"pkg/mod{i}.py" for i in range(400)]
    first = [corpus.is_heldout(p) for p in paths]
    assert first == [corpus.is_heldout(p) for p in paths]
    assert 0 < sum(first) < 60  # about 5 %


@pytest.fixture(scope="module")
def tiny_corpus(tmp_path_factory):
    """A corpus and a 300-token tokenizer built from this repository's own source files."""
    tmp = tmp_path_factory.mktemp("tiny")
    root = tmp / "src"
    root.mkdir()
    pkg = Path(train.__file__).parent
    for name in ["corpus.py", "train.py", "runtime.py"]:
        (root / name).write_text((pkg / name).read_text())
    corpus.build_corpus(tmp / "corpus", root=root, heldout_percent=0, progress=False)
    for domain in corpus.DOMAINS:  # the held-out files must exist; reuse the training text
        text = (tmp / "corpus" / f"{domain}_train.txt").read_text()
        (tmp / "corpus" / f"{domain}_heldout.txt").write_text(text)
    tok = train.train_tokenizer(
        [tmp / "corpus" / f"{d}_train.txt" for d in corpus.DOMAINS], tmp / "tok", vocab_size=300
    )
    return tmp, tok


def test_tokenizer_round_trip_and_autotokenizer(tiny_corpus):
    from transformers import AutoTokenizer

    tmp, _ = tiny_corpus
    tok = AutoTokenizer.from_pretrained(str(tmp / "tok"))
    text = "def f(x):\n\tif x:\n        return  x  # two  spaces\n\n\n    y = 'é ✓'\n"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    assert tok.eos_token == tok.bos_token == tok.pad_token == corpus.EOT
    assert tok.convert_tokens_to_ids(corpus.EOT) == tok.eos_token_id
    assert tok(f"a{corpus.EOT}b", add_special_tokens=False)["input_ids"][1] == tok.eos_token_id


def test_micro_training_decreases_loss_and_reloads(tiny_corpus):
    tmp, tok = tiny_corpus
    tokens = train.encode_corpus_file(tok, tmp / "corpus" / "code_train.txt")
    model = train.build_model(train.PRESETS["micro"], tok, seed=0)
    before = train.heldout_loss(model, tokens, context=32, n=8)
    cfg = replace(train.RECIPES["micro"], minutes=0.0, tokens=4 * 32 * 40, threads=1)
    log = train.train_model(model, tok, tokens, cfg, out_dir=tmp / "micro", progress=False)
    after = train.heldout_loss(model, tokens, context=32, n=8)
    assert log["steps"] == 40 and log["tokens_seen"] == 4 * 32 * 40
    assert after < before - 0.5

    reloaded = train.load_model(tmp / "micro")
    config = json.loads((tmp / "micro" / "config.json").read_text())
    assert config["dtype"] == "float16" and config["eos_token_id"] == tok.eos_token_id
    x = tokens[:33].unsqueeze(0)  # (1, 33)
    with torch.no_grad():
        ref = model(input_ids=x).logits
        got = reloaded(input_ids=x).logits
    assert torch.allclose(ref, got, atol=0.05)  # equal up to the float16 round trip


def test_cli_trains_saves_and_logs(tiny_corpus):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp, _ = tiny_corpus
    out = tmp / "models" / "micro-cli"
    args = ["--model", "micro", "--tokens", "1024", "--out", str(out), "--no-progress"]
    args += ["--corpus-dir", str(tmp / "corpus"), "--tokenizer", str(tmp / "tok")]
    assert train.main(args) == 0
    args2 = ["--model", "micro", "--tokens", "512", "--out", str(tmp / "models" / "d")]
    args2 += ["--corpus-dir", str(tmp / "corpus"), "--distill-from", str(out), "--no-progress"]
    args2 += ["--init-from", str(out)]
    assert train.main(args2) == 0
    args3 = ["--model", "micro", "--eval-only", "--out", str(out), "--alpha-against", str(out)]
    assert train.main(args3 + ["--corpus-dir", str(tmp / "corpus")]) == 0
    log = json.loads((tmp / "models" / "training.json").read_text())["models"]
    assert log["micro-cli"]["tokens_seen"] == 1024 and log["d"]["distilled_from"] == str(out)
    assert 0.0 < log["d"]["alpha"]["code"]["alpha"] <= 1.0
    assert log["micro-cli"]["alpha"]["code"]["alpha"] == pytest.approx(1.0)  # p against itself
    AutoTokenizer.from_pretrained(str(out))
    AutoModelForCausalLM.from_pretrained(str(out))


def test_lr_schedule_warms_up_and_decays():
    cfg = train.TrainConfig(lr=1.0, min_lr_ratio=0.1, warmup_fraction=0.1)
    assert train.lr_at(0.05, cfg) == pytest.approx(0.5)
    assert train.lr_at(0.1, cfg) == pytest.approx(1.0)
    assert train.lr_at(1.0, cfg) == pytest.approx(0.1)


SHIPPED = sorted(p.parent for p in MODELS_DIR.glob("*/config.json"))


@pytest.mark.skipif(not SHIPPED, reason="no trained checkpoints in data/models")
@pytest.mark.parametrize("model_dir", SHIPPED, ids=[p.name for p in SHIPPED])
def test_shipped_checkpoint_loads_and_gives_finite_logits(model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    assert model.config.max_position_embeddings >= 512
    assert model.config.eos_token_id == tok.eos_token_id == model.generation_config.eos_token_id
    text = "def add(a, b):\n    return a + b\n"
    ids = tok(text, return_tensors="pt")["input_ids"]  # (1, T)
    assert tok.decode(ids[0]) == text
    with torch.no_grad():
        logits = model(input_ids=ids).logits  # (1, T, V)
    assert logits.shape == (1, ids.shape[1], len(tok))
    assert torch.isfinite(logits).all()
