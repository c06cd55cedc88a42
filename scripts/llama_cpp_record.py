"""llama.cpp beside the course's loop, on this CPU: the record behind notebook 07 §5.

A C++ engine removes Python's per-call overhead; it cannot remove the verification floor. This
script measures both on the embedded pair, side by side in one run, one thread each:

1. converts data/models/target and data/models/draft to GGUF float32 with the llama.cpp tree's
   own `convert_hf_to_gguf.py` (same weights, same arithmetic as ours);
2. `llama-bench` at a 64-token depth: t(k) for a forward over k = 1, 2, 3, 5, 8 new tokens
   (prompt processing, so r(k) = t(k) / t(1) is llama.cpp's verify curve) and one-token
   generation of each model (c = t_draft / t_target);
3. `llama-speculative-simple`, greedy, γ = 4 drafts per step, on the code prompts: its tokens
   per second and its counters (n_drafted, n_accept, "accept %");
4. the course's lean loop on the same prompts and the same 64-token depth: t(k), c, plain and
   speculative tokens per second (`timing.timed_runs`, fastest of the rounds).

Every time is the fastest of its repeats (the course's statistic: load only adds time).
Writes data/results/llama-cpp-cpu-embedded.json with the machine it ran on.

    python scripts/llama_cpp_record.py --llama-cpp PATH   # a llama.cpp source tree, built with
        # cmake --build build --target llama-bench llama-speculative-simple
    python scripts/llama_cpp_record.py --llama-cpp PATH --gguf-out DIR   # only the GGUF files

llama.cpp's converter does not know the embedded tokenizer's hash, and tries SentencePiece first
for a Llama. The tokenizer is a byte-level BPE tokenizer.json whose pre-tokenizer is GPT-2's regex
(ByteLevel, use_regex), so the conversion writes it as llama.cpp's "gpt-2" pre-tokenizer.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from specdec_lab import data, env, models
from specdec_lab.measure import capstone, records, timing

KS = [1, 2, 3, 5, 8]  # tokens per forward; k = γ + 1 = 5 is the verification of γ = 4
GAMMA = 4
DEPTH = 64  # tokens already in the KV cache when a forward is timed
N_NEW = 48
N_PROMPTS = 4
REPEATS = 5
OUT = data.RESULTS_DIR / "llama-cpp-cpu-embedded.json"

CONVERT = """
import sys
sys.path[:0] = [{tree!r}, {tree!r} + "/gguf-py"]
import convert_hf_to_gguf
from conversion import base, llama
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"  # GPT-2's byte-level regex
llama.LlamaModel.set_vocab = base.TextModel._set_vocab_gpt2  # a BPE tokenizer.json, no SentencePiece
sys.argv = ["convert", {src!r}, "--outtype", "f32", "--outfile", {dst!r}]
convert_hf_to_gguf.main()
"""


def to_gguf(tree: Path, src: Path, dst: Path) -> Path:
    """`src` (a transformers checkpoint) as a float32 GGUF file at `dst`."""
    code = CONVERT.format(tree=str(tree), src=str(src), dst=str(dst))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"converting {src} failed:\n{done.stderr[-3000:]}")
    return dst


def bench(binary: Path, gguf: Path) -> dict[str, float]:
    """llama-bench on one thread at DEPTH: {"t_k": seconds per forward for each k of KS,
    "t_gen": seconds per generated token}, each the fastest of REPEATS."""
    ks = ",".join(map(str, KS))
    command = [binary, "-m", gguf, "-t", "1", "-d", str(DEPTH), "-p", ks, "-n", "16"]
    command += ["-r", str(REPEATS), "-o", "json"]
    rows = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    fastest = {(r["n_prompt"], r["n_gen"]): max(r["samples_ts"]) for r in rows}  # tokens/s
    return {
        "t_k": [k / fastest[k, 0] for k in KS],
        "t_gen": 1 / fastest[0, 16],
        "build": f"{rows[0]['build_commit']} (build {rows[0]['build_number']})",
    }


def speculate(binary: Path, target: Path, draft: Path, prompt: str) -> dict[str, float]:
    """One greedy llama-speculative-simple run: its counters and decoding tokens per second."""
    command = [binary, "-m", target, "-md", draft, "-p", prompt, "-n", str(N_NEW), "-t", "1"]
    command += ["--spec-draft-n-max", str(GAMMA), "--spec-type", "draft-simple", "--temp", "0"]
    return capstone.run_speculative_simple([str(part) for part in command])


def ours(pair, prompts: list[torch.Tensor]) -> dict[str, object]:
    """The course's lean loop, one thread: t(k) at DEPTH, c, and plain and speculative tokens
    per second on `prompts` (fastest of 3 interleaved rounds)."""
    sweep = {
        role: timing.runtime_sweep(getattr(pair, role), KS, ("lean",), REPEATS, DEPTH)["lean"]
        for role in ("target", "draft")
    }
    plan = {"code": [None, "draft"]}
    runs, secs = timing.timed_runs(
        pair,
        {"draft": pair.draft},
        {"code": prompts},
        plan,
        n_new=N_NEW,
        gamma=GAMMA,
        rounds=3,
        clock=time.perf_counter,  # wall-clock seconds, as llama.cpp reports
        progress=False,
    )
    speed, _, alpha = timing.speed_summary(runs, secs, N_NEW)
    return {
        "t_k": sweep["target"],
        "t_draft_1": sweep["draft"][0],
        "c": sweep["draft"][0] / sweep["target"][0],
        "ar_tokens_per_s": speed["code", None],
        "spec_tokens_per_s": speed["code", "draft"],
        "alpha": alpha["code", "draft"],
    }


def pooled_tokens_per_s(runs: list[dict[str, float]]) -> float:
    """Tokens per second over all of llama-speculative-simple's runs: all their tokens over all
    their decoding seconds (as `timing.speed_summary` pools ours)."""
    seconds = sum(run["n_predict"] / run["tokens_per_s"] for run in runs)
    return sum(run["n_predict"] for run in runs) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-cpp", type=Path, required=True, help="llama.cpp source tree")
    parser.add_argument("--build", default="build", help="its cmake build folder")
    parser.add_argument("--source", default="", help="where the tree came from, for the record")
    parser.add_argument("--gguf-out", type=Path, help="only write the pair's GGUF files here")
    args = parser.parse_args()
    tree = args.llama_cpp.resolve()
    if args.gguf_out:  # for notebook 07 §5's own run
        args.gguf_out.mkdir(parents=True, exist_ok=True)
        for role, var in (("target", "TARGET"), ("draft", "DRAFT")):
            path = to_gguf(tree, data.MODELS_DIR / role, args.gguf_out.resolve() / f"{role}.gguf")
            print(f"export SPECDEC_LAB_GGUF_{var}={path}")
        return
    bins = tree / args.build / "bin"
    env.set_cpu_threads(1)

    pair = models.load_pair("embedded", "cpu", torch.float32)
    texts = [p["text"] for p in data.load_prompts("code", N_PROMPTS)]
    with tempfile.TemporaryDirectory() as tmp:
        gguf = {
            role: to_gguf(tree, data.MODELS_DIR / role, Path(tmp) / f"{role}.gguf")
            for role in ("target", "draft")
        }
        cpp = {role: bench(bins / "llama-bench", path) for role, path in gguf.items()}
        spec = [
            speculate(bins / "llama-speculative-simple", gguf["target"], gguf["draft"], text)
            for text in texts
        ]
    mine = ours(pair, [pair.encode(t) for t in texts])

    llama_cpp = {
        "t_k": cpp["target"]["t_k"],
        "t_gen": cpp["target"]["t_gen"],
        "ar_tokens_per_s": 1 / cpp["target"]["t_gen"],
        "draft_tokens_per_s": 1 / cpp["draft"]["t_gen"],
        "c": cpp["draft"]["t_gen"] / cpp["target"]["t_gen"],
        "speculative_runs": spec,
        "spec_tokens_per_s": pooled_tokens_per_s(spec),
    }
    results = {
        "what": "llama.cpp and the course's lean loop on the embedded pair, float32, one thread",
        "llama_cpp_build": cpp["target"]["build"],
        "llama_cpp_source": args.source,
        "ks": KS,
        "gamma": GAMMA,
        "depth": DEPTH,
        "n_new": N_NEW,
        "prompts": f"data/prompts code, first {N_PROMPTS}",
        "llama_cpp": llama_cpp,
        "ours": mine,
    }
    path = records.save_results(OUT, results, "cpu")
    print(json.dumps(results, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
