"""The core path runs on its own: no core cell reads a name that only an optional cell defines.

A workshop follows the agenda's core sections (`scripts/section_budget.py`), skipping the
optional ones. A core cell that uses a name bound only in an optional section then fails with a
`NameError` (it happened in notebooks 00, 02, 03, 04 and 06). This reads every code cell's names
with `symtable`, in order, without running anything: the names a core cell needs must be bound by
the setup or by earlier core cells (or be builtins).
"""

from __future__ import annotations

import builtins
import re
import symtable
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("0[0-9]_*.ipynb"))
MARKER = re.compile(r"\((core|optional), \d+ min\)\**\s*$")
ALWAYS = set(dir(builtins)) | {"display", "get_ipython"}  # what a kernel provides


def python_of(source: str) -> str:
    """A cell as plain Python: `%magic` and `!shell` lines become `pass` at their indentation."""
    lines = []
    for line in source.splitlines():
        code = line.lstrip()
        lines.append(
            line[: len(line) - len(code)] + "pass" if code.startswith(("%", "!")) else line
        )
    return "\n".join(lines)


def names_of(source: str) -> tuple[set[str], set[str]]:
    """(names the cell binds at top level, names it reads from outside itself)."""
    table = symtable.symtable(python_of(source), "cell", "exec")
    bound = {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported()}
    bound |= {s.get_name() for s in table.get_symbols() if s.is_namespace()}  # def, class
    read = {s.get_name() for s in table.get_symbols() if s.is_referenced()}

    def globals_of(t) -> None:  # names functions, lambdas and comprehensions look up globally
        for child in t.get_children():
            read.update(s.get_name() for s in child.get_symbols() if s.is_global())
            globals_of(child)

    globals_of(table)
    return bound, read - bound


def with_kinds(cells: list) -> Iterator[tuple[str, object]]:
    """(kind, cell) for every cell: "core" or "optional", from the last `## ` heading's marker
    (the setup, before any marked heading, is core)."""
    kind = "core"
    for cell in cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("## ") and (m := MARKER.search(line)):
                    kind = m.group(1)
        yield kind, cell


def core_path_gaps(path: Path) -> list[str]:
    """One line per core cell that reads names no setup or earlier core cell bound."""
    core, anywhere, gaps = set(ALWAYS), {}, []
    for i, (kind, cell) in enumerate(with_kinds(nbformat.read(path, as_version=4).cells)):
        if cell.cell_type == "markdown":
            continue
        bound, read = names_of(cell.source)
        if kind == "core" and (missing := read - core):
            where = sorted({anywhere.get(n, "nowhere before") for n in missing})
            gaps.append(f"{path.name} cell {i}: {sorted(missing)} (bound in {', '.join(where)})")
        if kind == "core":
            core |= bound
        for name in bound:
            anywhere.setdefault(name, f"cell {i}, {kind}")
    return gaps


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_every_core_cell_runs_after_the_core_cells_alone(path: Path) -> None:
    assert core_path_gaps(path) == []


def test_the_check_catches_a_core_cell_that_needs_an_optional_one(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    nb.cells = [
        md("# x\n## Setup (core, 1 min)"),
        code("import math\nA = 1"),
        md("## Extra (optional, 2 min)"),
        code("def helper():\n    return A\nB = [math.pi for _ in range(2)]"),
        md("## Main (core, 3 min)"),
        code("print(A, helper(), B)\nf = lambda: C"),
    ]
    path = tmp_path / "00_toy.ipynb"
    nbformat.write(nb, path)
    (gap,) = core_path_gaps(path)
    assert "['B', 'C', 'helper']" in gap and "cell 3, optional" in gap and "nowhere" in gap


# ------------------------------------------------------------------ and it runs
def core_only(path: Path, until_first_stub: bool = False) -> nbformat.NotebookNode:
    """The notebook with only its setup and core sections' cells (a workshop's path through it);
    with `until_first_stub`, cut before the first cell a student has to fill in."""
    nb = nbformat.read(path, as_version=4)
    cells = []
    for kind, cell in with_kinds(nb.cells):
        if (
            until_first_stub
            and cell.cell_type == "code"
            and "raise NotImplementedError" in cell.source
        ):
            break
        if kind == "core":
            cells.append(cell)
    nb.cells = cells
    return nb


WORKSHOP = [p.parents[1] / "workshop" / p.name for p in NOTEBOOKS]


@pytest.mark.corepath
@pytest.mark.parametrize(
    "path", NOTEBOOKS + WORKSHOP, ids=lambda p: f"{p.parent.name}/{p.name[:2]}"
)
def test_the_core_path_runs_alone(path: Path, run_notebook, monkeypatch) -> None:
    """Execute the setup and the core sections only (student notebooks up to their first stub),
    in a fresh kernel: what a workshop that follows the agenda runs."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    nb = core_only(path, until_first_stub=path.parent.name == "workshop")
    assert any(c.cell_type == "code" for c in nb.cells)
    run_notebook(nb)


def test_core_only_keeps_the_setup_and_core_sections_and_stops_at_a_stub(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    nb.cells = [
        code("x = 1"),
        md("## 1. Core (core, 5 min)"),
        code("y = x"),
        md("## 2. Extra (optional, 5 min)"),
        code("z = 3"),
        md("## 3. Again (core, 5 min)"),
        code("raise NotImplementedError('yours')"),
        code("w = y"),
    ]
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    assert [c.source for c in core_only(path).cells if c.cell_type == "code"] == [
        "x = 1",
        "y = x",
        "raise NotImplementedError('yours')",
        "w = y",
    ]
    cut = core_only(path, until_first_stub=True)
    assert [c.source for c in cut.cells if c.cell_type == "code"] == ["x = 1", "y = x"]
