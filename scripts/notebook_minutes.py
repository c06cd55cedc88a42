"""Each notebook's run time on this machine, in a fresh kernel, one notebook at a time: the
README's "What needs a GPU" minutes, and with `--core` the timed pilot behind the agenda.

Runs every notebook top to bottom with nbclient (one CPU thread, as the notebooks set), and
records its wall time and its kernel's CPU time (`time.process_time` read in a first and a last
cell added for the run, so kernel start-up is not counted), with the machine, in
`data/results/notebook-minutes-cpu.json`.

`--core` is the **timed pilot**: it runs only each notebook's setup and core sections, the cells
a workshop that follows the agenda runs (the selection of tests/notebooks/test_core_path.py: every cell
after a ``## ... (optional, N min)`` heading is left out until the next core heading), solutions
included, and writes `data/results/notebook-core-minutes-cpu.json`. `scripts/section_budget.py`
adds each notebook's measured seconds to its reading and exercise minutes to set the agenda.

    python scripts/notebook_minutes.py [notebooks/03_acceptance_rates.ipynb ...]
    python scripts/notebook_minutes.py --core      # the pilot: setup and core sections only
    python scripts/notebook_minutes.py --core notebooks/07_engines_and_capstone.ipynb

Given notebooks, it reruns only those and keeps the record's other entries (rerun them all on a
new machine: the record names one CPU).
"""

from __future__ import annotations

import argparse
import json
import re
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
# a section's marker, as tests/notebooks/test_core_path.py reads it
MARKER = re.compile(r"\((core|optional), \d+ min\)\**\s*$")
WHOLE = RESULTS_DIR / "notebook-minutes-cpu.json"
CORE = RESULTS_DIR / "notebook-core-minutes-cpu.json"
CORE_WHAT = (
    "the setup and core sections of each solution notebook (tests/notebooks/test_core_path.py's selection), "
    "in a fresh kernel, one CPU thread; cpu_s: the kernel's CPU time over those cells"
)


def core_only(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """`nb` with only its setup and core sections' cells: a cell belongs to the section of the
    last ``## `` heading with a marker above it (the setup, before any, is core)."""
    kind, kept = "core", []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("## ") and (m := MARKER.search(line)):
                    kind = m.group(1)
        if kind == "core":
            kept.append(cell)
    nb.cells = kept
    return nb


def run(path: Path, core: bool = False) -> dict:
    nb = nbformat.read(path, as_version=4)
    if core:
        nb = core_only(nb)
    nb.cells.insert(0, nbformat.v4.new_code_cell(START))
    nb.cells.append(nbformat.v4.new_code_cell(END))
    client = NotebookClient(
        nb,
        timeout=1800,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        skip_cells_with_tag="nbval-skip",  # the live widget, as the tests skip it
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
    ap.add_argument("--core", action="store_true", help="the pilot: setup and core sections only")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    out = args.out or (CORE if args.core else WHOLE)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    results = {}
    if args.notebooks and out.exists():  # a partial run keeps the other notebooks' entries
        results = json.loads(out.read_text(encoding="utf-8"))["results"]["notebooks"]
    for path in paths:
        results[path.name] = run(path, core=args.core)
        print(path.name, json.dumps(results[path.name]), flush=True)
    results = dict(sorted(results.items()))
    total = {k: round(sum(r[k] for r in results.values()), 1) for k in ("wall_s", "cpu_s")}
    print("total", total)
    record = {"notebooks": results, "total": total}
    if args.core:
        record = {"what": CORE_WHAT} | record
    print(f"wrote {records.save_results(out, record, 'cpu')}")


if __name__ == "__main__":
    main()
