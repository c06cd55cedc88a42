"""What a forward costs for SmolLM2-135M on this CPU, and what that allows speculation.

Measures, on one thread, through the lean sessions (minimum of interleaved repeats):

- t(k) for k = 1..16 new tokens after 32 cached ones, in float32 and bfloat16: the verify curve
  r(k) = t(k) / t(1), and whether bfloat16 weights lower it (on CPUs with native bf16 matmuls);
- the LM head alone (49,152 x 576, a fifth of the weights), over the full vocabulary and over the
  8,192 most frequent tokens: the floor of an EAGLE-style head's c, which must score with it;
- the draft's one-token forward: c = t_draft / t_target.

Then the limit: a free draft (c = 0) at acceptance α and γ drafts gains at most
E(α, γ) / r(γ + 1), with E the expected tokens per step. Writes
data/results/smollm2-costs-cpu.json.

    python scripts/smollm2_costs.py [--alpha 0.4]
"""

from __future__ import annotations

import argparse

import torch

from specdec_lab import data, env, models, theory
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
    args = ap.parse_args()
    env.set_cpu_threads(1)
    out: dict = {"ks": KS, "dtypes": {}}
    for dtype in (torch.float32, torch.bfloat16):
        target = models.load_model(str(models.smollm2.MODEL_DIR), device="cpu", dtype=dtype)
        t = timing.runtime_sweep(target, KS, ("lean",), repeats=9)["lean"]
        weight = target.get_output_embeddings().weight.detach()
        out["dtypes"][str(dtype).removeprefix("torch.")] = {
            "t_ms": [round(1e3 * x, 3) for x in t],
            "r": [round(x / t[0], 3) for x in t],
            "lm_head_ms": round(head_ms(weight, weight.shape[0]), 3),
            "lm_head_8192_ms": round(head_ms(weight, 8192), 3),
        }
        print(str(dtype), out["dtypes"][str(dtype).removeprefix("torch.")], flush=True)
    target = models.load_model(str(models.smollm2.MODEL_DIR), device="cpu", dtype=torch.float32)
    draft = models.load_model(str(data.MODELS_DIR / "smollm2-draft"), "cpu", torch.float32)
    t_target = timing.session_latency(target, 1, "lean", repeats=9)
    t_draft = timing.session_latency(draft, 1, "lean", repeats=9)
    r = out["dtypes"]["float32"]["r"]
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
    path = records.save_results(data.RESULTS_DIR / "smollm2-costs-cpu.json", out, "cpu")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
