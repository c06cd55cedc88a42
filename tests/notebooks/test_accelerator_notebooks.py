"""Every notebook on the simulated accelerator (tests/simulated_device.py), at CPU sizes.

The notebook's kernel is put on the stand-in device before its first cell (`install()`): the
default device is the simulated accelerator, so every notebook takes the branches a GPU user's
takes (`GPU` is True; `BIG` stays False, as in a GPU dry run), its models and tensors live on the
device, and any mix of host and device tensors, any host generator drawing device tensors, or any
float64 on MPS raises as it would on CUDA or Apple's MPS.

What the simulator cannot give is a device's clock: its bookkeeping runs in Python around every
op, so it slows small ops more than large ones. Cells tagged `timing` assert what a clock says
(which draft is faster, where the knee sits); there each `assert` is recorded instead of raised,
and the run prints which ones the simulated clock did not satisfy. Every other assert raises.

These runs take minutes, so `make test` leaves them out (marker `accelerator`) and
`make test-accelerator` runs them; `.ci/run` runs both.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
TESTS = Path(__file__).resolve().parents[1]
TIMING = "timing"

SETUP = f"""import sys
sys.path.insert(0, {str(TESTS)!r})
import simulated_device
SIM = simulated_device.install()
CLOCK_ASSERTS = []  # (cell, line, held?) for the asserts of cells tagged {TIMING!r}


def _clock_assert(held, cell, line):
    CLOCK_ASSERTS.append((cell, line, bool(held)))
"""

REPORT = """import json
print("simulated accelerator:", SIM.syncs, "host syncs")
print("clock asserts:", json.dumps(CLOCK_ASSERTS))
"""


class _RecordAsserts(ast.NodeTransformer):
    """`assert test, msg` -> `_clock_assert(test, cell, line)`: recorded, never raised."""

    def __init__(self, cell: int) -> None:
        self.cell = cell

    def visit_Assert(self, node: ast.Assert) -> ast.Expr:
        call = ast.Call(
            ast.Name("_clock_assert", ast.Load()),
            [node.test, ast.Constant(self.cell), ast.Constant(node.lineno)],
            [],
        )
        return ast.copy_location(ast.Expr(call), node)


def recorded(source: str, cell: int) -> str:
    """A `timing` cell's source with its asserts recorded instead of raised."""
    tree = _RecordAsserts(cell).visit(ast.parse(source))
    return ast.unparse(ast.fix_missing_locations(tree))


def test_recorded_asserts_record_and_never_raise() -> None:
    source = "x = 2\nassert x == 2\nassert x == 3, 'no'\ny = x + 1"
    out = recorded(source, cell=7)
    seen: list = []
    namespace = {"_clock_assert": lambda held, cell, line: seen.append((cell, line, held))}
    exec(out, namespace)  # noqa: S102 - the transformed test source
    assert seen == [(7, 2, True), (7, 3, False)] and namespace["y"] == 3


def on_the_simulated_accelerator(path: Path) -> nbformat.NotebookNode:
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and TIMING in cell.metadata.get("tags", []):
            cell.source = recorded(cell.source, i)
    nb.cells.insert(0, new_code_cell(SETUP))
    nb.cells.append(new_code_cell(REPORT))
    return nb


@pytest.mark.accelerator
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_on_the_simulated_accelerator(path: Path, run_notebook, monkeypatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    executed = run_notebook(on_the_simulated_accelerator(path), timeout=1200)
    printed = "".join(o.get("text", "") for o in executed.cells[-1].get("outputs", []))
    line = next(x for x in printed.splitlines() if x.startswith("clock asserts:"))
    missed = [(cell, at) for cell, at, held in json.loads(line.split(":", 1)[1]) if not held]
    print(printed, f"clock asserts the simulated clock missed (cell, line): {missed}")
    assert "host syncs" in printed
