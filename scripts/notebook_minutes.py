"""Each notebook's run time on this machine, in a fresh kernel, one notebook at a time: the
README's "What needs a GPU" minutes.

Runs every notebook top to bottom with nbclient (one CPU thread, as the notebooks set), and
records its wall time and its kernel's CPU time (`time.process_time` read in a first and a last
cell added for the run, so kernel start-up is not counted), with the machine, in
`data/results/notebook-minutes-cpu.json`.

    python scripts/notebook_minutes.py [notebooks/03_acceptance_rates.ipynb ...]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
import sys  # noqa: E402

sys.path.insert(0, str(ROOT))
from specdec_lab.data import RESULTS_DIR  # noqa: E402
from specdec_lab.measure import records  # noqa: E402

START = "import time as _clock\n_cpu0 = _clock.process_time()"
END = "print('CPU seconds', _clock.process_time() - _cpu0)"


def run(path: Path) -> dict:
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(START))
    nb.cells.append(nbformat.v4.new_code_cell(END))
    client = NotebookClient(
        nb, timeout=1800, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    t0 = time.perf_counter()
    client.execute()
    wall = time.perf_counter() - t0
    out = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    cpu = float(out.split("CPU seconds")[1])
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("notebooks", nargs="*", type=Path)
    ap.add_argument("--out", default=RESULTS_DIR / "notebook-minutes-cpu.json")
    args = ap.parse_args()
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    results = {}
    for path in paths:
        results[path.name] = run(path)
        print(path.name, json.dumps(results[path.name]), flush=True)
    total = {k: round(sum(r[k] for r in results.values()), 1) for k in ("wall_s", "cpu_s")}
    print("total", total)
    print(f"wrote {records.save_results(args.out, {'notebooks': results, 'total': total}, 'cpu')}")


if __name__ == "__main__":
    main()
