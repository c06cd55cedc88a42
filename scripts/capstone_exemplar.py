"""The record behind docs/capstone_exemplar.md: notebook 07's capstone project, run once on a CPU.

The worked report in docs/capstone_exemplar.md quotes its numbers from this record, so that its
interpretation reads real measurements. The run is the notebook's §6 with its CPU defaults: the
embedded target with the `draft-large` draft on the four `MY_PROMPTS`, greedy, 40 new tokens per
prompt, 2 timed rounds per prompt, one torch thread, CPU time (`time.process_time`). The project
changes one setting, γ = 4 (fixed, as an engine is set) -> "planned":

1. each arm measured by `capstone.measure_arm` (α̂ from one probe run per prompt, c, a round's
   first drafting step and the verification curve, the plan, the clock), each report checked by `checks.check_report`;
2. the table (`capstone.project`, printed by `capstone.project_table`);
3. `checks.check_project`, which runs both arms again and compares;
4. what each prompt's timed run examined, accepted and cost in target calls at its arm's γ
   (`measure_arm`'s "timed_counts"; an arm's α̂ comes from its probe at γ = 4, which drafts
   other positions than a run at γ = 8 does).

Writes data/results/capstone-exemplar-cpu-embedded.json (`records.save_results`: the machine, a
timestamp, and the table, its printout and the check's lines). tests/course/test_capstone.py
checks the record's table arithmetic and that docs/capstone_exemplar.md quotes it verbatim.

    python scripts/capstone_exemplar.py    # 35-50 s (wall) on one core of a 2-core EPYC

The recorded run took 31 s wall, about half of it `check_project`'s reruns; earlier runs on the
same machine took 36-46 s.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from any directory

from specdec_lab import data, env  # noqa: E402
from specdec_lab.course import checks  # noqa: E402
from specdec_lab.measure import capstone, records  # noqa: E402

MY_PROMPTS = [  # notebook 07's MY_PROMPTS
    "def fibonacci(n):\n",
    "class Stack:\n    def __init__(self):\n",
    "import os\n\n\ndef list_python_files(root):\n",
    "def merge_sorted(a, b):\n    result = []\n",
]
GAMMA = 4  # the notebook's GAMMA: the before arm's fixed γ
BEFORE = capstone.Arm(MY_PROMPTS, pair="embedded", draft="draft-large", gamma=GAMMA)
CHANGE = {"gamma": "planned"}
OUT = data.RESULTS_DIR / "capstone-exemplar-cpu-embedded.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-new", type=int, default=40, help="new tokens per prompt (N_NEW)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per prompt (CAP_ROUNDS)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)

    start = time.perf_counter()
    env.set_seed(0)
    threads = env.set_cpu_threads(1)
    clock = time.process_time  # CPU time: other jobs on the machine do not inflate it
    arms = {"before": BEFORE, "after": BEFORE.changed(CHANGE)}
    reports = {
        side: capstone.measure_arm(arm, args.n_new, args.rounds, clock)
        for side, arm in arms.items()
    }
    report_lines = {side: checks.check_report(rep) for side, rep in reports.items()}
    for side, rep in reports.items():
        print(f"{side}: {report_lines[side]}")
        print(capstone.per_prompt_table(rep))
    table = capstone.project(reports["before"], reports["after"])
    printed = capstone.project_table(table)
    print(printed)
    measured_s = time.perf_counter() - start
    check_line = checks.check_project(table, clock)  # runs both arms again
    checked_s = time.perf_counter() - start - measured_s
    print(check_line)
    steps = {side: rep["timed_counts"] for side, rep in reports.items()}  # at the timed γ
    print(steps)
    results = {
        "prompts": MY_PROMPTS,
        "change": CHANGE,
        "n_new": args.n_new,
        "rounds": args.rounds,
        "threads": threads,
        "clock": "process_time",
        "table": table,
        "project_table": printed,
        "check_report": report_lines,
        "check_project": check_line,
        "timed_gamma_steps": steps,
        "wall_seconds": {"arms": measured_s, "check": checked_s},
    }
    path = records.save_results(args.out, results, "cpu")
    print(f"wrote {path} ({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
