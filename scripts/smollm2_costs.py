"""What a forward costs for SmolLM2-135M on this CPU, and what that allows speculation.

Measures, on one thread, through the lean sessions (minimum of interleaved repeats):

- t(k) for k = 1..16 new tokens after 32 cached ones, side by side in one interleaved sweep:
  float32 through `F.linear` (MKL), float32 with the weights prepacked for oneDNN (the lean
  engine's default on a CPU, `engine/linear.py`), and bfloat16: the verify curve
  r(k) = t(k) / t(1) of each;
- the LM head alone (49,152 x 576, a fifth of the weights), over the full vocabulary and over the
  8,192 most frequent tokens: the floor of an EAGLE-style head's c, which must score with it;
- the draft's one-token forward: c = t_draft / t_target (float32, the default path).

Then the limit: a free draft (c = 0) at acceptance α and γ drafts gains at most
E(α, γ) / r(γ + 1), with E the expected tokens per step. Writes
data/results/smollm2-costs-cpu.json on a CPU with native bfloat16, else
smollm2-costs-cpu-emulated-bf16.json, so that one machine's record does not overwrite the other's.

    python scripts/smollm2_costs.py [--alpha 0.4] [--note "what else ran"]
"""

from __future__ import annotations

import argparse

import torch

from specdec_lab import data, env, models, theory
from specdec_lab.engine import sessions
from specdec_lab.engine.linear import can_pack
from specdec_lab.measure import records, timing

KS = list(range(1, 17))


def head_ms(weight: torch.Tensor, rows: int, repeats: int = 30) -> float:
    """Minimum ms of the LM head over its first `rows` rows for one hidden state."""
    h = torch.randn(1, weight.shape[1], dtype=weight.dtype)
    table = weight[:rows]
    run = timing.time_fn(
        lambda: torch.nn.functional.linear(h, table), device="cpu", repeats=repeats
    )
    return 1e3 * run.min


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--alpha", type=float, nargs="+", default=[0.4, 0.6, 0.8])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--note", help="stored with the record: what else the machine was doing")
    ap.add_argument("--out", help="the record's path (default: by whether bfloat16 is native)")
    args = ap.parse_args()
    env.set_cpu_threads(1)
    out: dict = {"ks": KS, "note": args.note, "dtypes": {}}
    path = models.smollm2.MODEL_DIR
    target = models.load_model(str(path), device="cpu", dtype=torch.float32)
    bf16 = models.load_model(str(path), device="cpu", dtype=torch.bfloat16)
    opened = {"float32": sessions.LeanSession(target, packed=False)}
    if can_pack(target.lm_head.weight):
        opened["float32_packed"] = sessions.LeanSession(target, packed=True)
    opened["bfloat16"] = sessions.LeanSession(bf16)
    sweep = timing.session_sweep(opened, KS, repeats=args.repeats)
    for name, t in sweep.items():
        weight = (bf16 if name == "bfloat16" else target).get_output_embeddings().weight.detach()
        out["dtypes"][name] = {
            "t_ms": [round(1e3 * x, 3) for x in t],
            "r": [round(x / t[0], 3) for x in t],
            "lm_head_ms": round(head_ms(weight, weight.shape[0]), 3),
            "lm_head_8192_ms": round(head_ms(weight, 8192), 3),
        }
        print(name, out["dtypes"][name], flush=True)
    default = "float32_packed" if "float32_packed" in out["dtypes"] else "float32"
    out["default"] = default
    draft = models.load_model(str(data.MODELS_DIR / "smollm2-draft"), "cpu", torch.float32)
    t_target = timing.session_latency(target, 1, "lean", repeats=args.repeats)
    t_draft = timing.session_latency(draft, 1, "lean", repeats=args.repeats)
    r = out["dtypes"][default]["r"]
    out["c"] = round(t_draft / t_target, 4)
    out["limit_free_draft"] = {
        f"alpha={a:g}": {
            f"gamma={g}": round(theory.expected_tokens(a, g) / r[g], 3) for g in (2, 3, 4, 5)
        }
        for a in args.alpha
    }
    out["predicted_with_this_draft"] = {
        f"alpha={a:g}": {
            f"gamma={g}": round(theory.speedup(a, g, out["c"], r[g]), 3) for g in (2, 3, 4, 5)
        }
        for a in args.alpha
    }
    print({k: v for k, v in out.items() if k != "dtypes"})
    name = (
        "smollm2-costs-cpu.json"
        if env.cpu_native_bf16()
        else "smollm2-costs-cpu-emulated-bf16.json"
    )
    path = records.save_results(args.out or data.RESULTS_DIR / name, out, "cpu")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
