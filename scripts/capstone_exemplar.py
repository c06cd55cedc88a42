"""The record behind docs/capstone_exemplar.md: notebook 07's capstone, run once as a learner would.

The worked report in docs/capstone_exemplar.md quotes its numbers from this record, so that the
exemplar's interpretation reads real measurements, not invented ones. The run is the notebook's
§6 with its defaults (the embedded pair, the four `MY_PROMPTS`, greedy and T = 1, 40 new tokens
per prompt, γ = 4 for the probe runs, one thread, CPU time), step for step:

1. one speculative run per prompt and temperature (prompt i samples from a generator seeded i):
   α̂ pooled over the prompts, its SE across prompts and the binomial SE;
2. t(k) for k = 1..9 new tokens and the draft's one-token time, in one interleaved sweep
   (`capstone.curve_and_c`): c and the verification curve;
3. the plan (`capstone.best_plan`, Exercise 7.2's answer) at each temperature;
4. plain and speculative decoding of every prompt at the plan's γ, each prompt timed as the
   fastest of `--rounds` rounds (`timing.timed_runs`, the notebook's harness);
5. `capstone.report`, validated by `checks.check_report`.

Writes data/results/capstone-exemplar-cpu-embedded.json (`records.save_results`: the machine, a
timestamp, and the reports). tests/course/test_capstone.py checks that the record's reports pass
`check_report` and that docs/capstone_exemplar.md quotes them as the record says.

    python scripts/capstone_exemplar.py              # about a minute on one core
    python scripts/capstone_exemplar.py --rounds 5   # more rounds per prompt
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from any directory

from specdec_lab import data, decoding, env, models  # noqa: E402
from specdec_lab.course import checks  # noqa: E402
from specdec_lab.measure import capstone, records, timing  # noqa: E402

PAIR = "embedded"
PROMPTS = [  # notebook 07's MY_PROMPTS
    "def fibonacci(n):\n",
    "class Stack:\n    def __init__(self):\n",
    "import os\n\n\ndef list_python_files(root):\n",
    "def merge_sorted(a, b):\n    result = []\n",
]
TEMPERATURES = (0.0, 1.0)
GAMMA = 4  # the probe runs' γ, as in the notebook
OUT = data.RESULTS_DIR / "capstone-exemplar-cpu-embedded.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per prompt")
    parser.add_argument("--n-new", type=int, default=40, help="new tokens per prompt")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)

    env.set_seed(0)
    threads = env.set_cpu_threads(1)
    clock = time.process_time  # CPU time: other jobs on the machine do not inflate it
    pair = models.load_pair(PAIR, device="cpu")
    ids = [pair.encode(text) for text in PROMPTS]
    probes = {
        temp: [
            decoding.speculative_generate(
                *(pair.target, pair.draft, x, args.n_new, GAMMA),
                temperature=temp,
                generator=torch.Generator().manual_seed(i),  # prompt i: seed i
                vocab_size=pair.vocab_size,
            ).stats
            for i, x in enumerate(ids)
        ]
        for temp in TEMPERATURES
    }
    curve, c = capstone.curve_and_c(pair, clock=clock)  # t(k) / t(1) for k = 1..9, and c
    info = env.device_info("cpu")
    device = f"{info['device']} ({info['cpu']})"
    reports = {}
    for temp, per_prompt in probes.items():
        alpha = decoding.GenerationStats.merge(per_prompt).acceptance_rate
        plan = capstone.best_plan(alpha, capstone.prompt_se(per_prompt), c, curve)
        _, secs = timing.timed_runs(
            *(pair, {"draft": pair.draft}, {"mine": ids}, {"mine": [None, "draft"]}),
            n_new=args.n_new,
            gamma=plan["gamma"],
            rounds=args.rounds,
            clock=clock,
            temperature=temp,
            seed=0,  # prompt i samples from a generator seeded i
            progress=False,
        )
        rep = capstone.report(
            *(PAIR, per_prompt, c, curve, plan),
            *(secs["mine", None], secs["mine", "draft"], args.rounds, device, temp),
        )
        print(checks.check_report(rep))
        print(capstone.per_prompt_table(rep))
        reports[f"{temp:g}"] = rep
    results = {
        "pair": PAIR,
        "prompts": PROMPTS,
        "n_new": args.n_new,
        "probe_gamma": GAMMA,
        "rounds": args.rounds,
        "threads": threads,
        "clock": "process_time",
        "reports": reports,
    }
    path = records.save_results(args.out, results, "cpu")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
