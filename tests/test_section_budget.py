"""scripts/section_budget.py: the clock of the course (sections, minutes, words, code lines)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "section_budget.py"
spec = importlib.util.spec_from_file_location("section_budget", SCRIPT)
budget = importlib.util.module_from_spec(spec)
sys.modules["section_budget"] = budget  # dataclasses look their module up while it loads
spec.loader.exec_module(budget)


def notebook(
    words: int, lines: int, kind: str = "core", minutes: int = 1, plan: str = ""
) -> object:
    """A notebook with one section of `words` words of markdown and `lines` code lines."""
    plan = plan or f"**Plan:** {minutes if kind == 'core' else 0} min of core sections and " + (
        f"{minutes if kind == 'optional' else 0} min of optional ones."
    )
    return new_notebook(
        cells=[
            new_markdown_cell(f"# 01 · Tiny\n\n{plan}"),
            new_markdown_cell(f"## A section ({kind}, {minutes} min)\n\n" + "word " * words),
            new_code_cell("\n".join(f"x{i} = {i}" for i in range(lines))),
        ]
    )


def run(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, cwd=ROOT
    )


def test_a_core_section_over_budget_fails(tmp_path: Path) -> None:
    path = tmp_path / "01_tiny.ipynb"
    nbformat.write(notebook(words=100, lines=3), path)  # 1 min allows 45 words and 6 lines
    result = run(path)
    assert result.returncode == 1
    assert "words > 45" in result.stderr


def test_too_many_code_lines_fail_but_collapsed_ones_do_not(tmp_path: Path) -> None:
    nb = notebook(words=10, lines=12)
    path = tmp_path / "01_tiny.ipynb"
    nbformat.write(nb, path)
    assert run(path).returncode == 1
    nb.cells[-1].metadata["jupyter"] = {"source_hidden": True}  # an assert-only cell, collapsed
    nbformat.write(nb, path)
    assert run(path).returncode == 0


def test_a_section_that_fits_passes_and_optional_sections_are_free(tmp_path: Path) -> None:
    path = tmp_path / "01_tiny.ipynb"
    nbformat.write(notebook(words=20, lines=6), path)  # + ~18 words of title and plan
    assert run(path).returncode == 0
    nbformat.write(notebook(words=400, lines=60, kind="optional"), path)
    assert run(path).returncode == 0


def test_a_heading_without_marker_or_a_wrong_plan_fails(tmp_path: Path) -> None:
    path = tmp_path / "01_tiny.ipynb"
    nb = notebook(words=10, lines=1)
    nb.cells[1].source = "## A section\n\nsome words"
    nbformat.write(nb, path)
    assert "no (core, N min)" in run(path).stderr
    nbformat.write(
        notebook(
            words=10, lines=1, plan="**Plan:** 9 min of core sections and 0 min of optional ones"
        ),
        path,
    )
    result = run(path)
    assert result.returncode == 1 and "the plan says 9 + 0 min" in result.stderr


def test_solution_regions_count_as_one_line_and_details_are_not_read() -> None:
    cell = new_code_cell(
        "def f():\n    ### BEGIN SOLUTION\n    a = 1\n    b = 2\n    return a + b\n    ### END SOLUTION"
    )
    assert budget.visible_lines(cell) == 2  # `def f():` and the stub that replaces the region
    assert budget.visible_words("one two <details><summary>Hint</summary>three four</details>") == 2


def test_the_course_fits_its_clock() -> None:
    """Every core section of notebooks 00-07 fits its minutes, and the plans add up."""
    result = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr


def test_readme_syllabus_and_agenda_are_generated_from_the_notebooks() -> None:
    secs = budget.agenda_sections()
    assert budget.readme_syllabus() == budget.syllabus(secs), (
        "README.md's syllabus is stale: run `python scripts/section_budget.py --write`"
    )
    assert budget.readme_agenda() == budget.agenda(secs), (
        "docs/instructors.md's workshop agenda is stale: run "
        "`python scripts/section_budget.py --write`"
    )


def test_the_syllabus_links_every_notebook_and_keeps_the_agendas_times() -> None:
    secs = budget.agenda_sections()
    syllabus, agenda = budget.syllabus(secs), budget.agenda(secs)
    for path in budget.notebooks(None, budget.IN_AGENDA):
        assert f"](notebooks/{path.name})" in syllabus
    times = [line.split("|")[1].strip() for line in syllabus.splitlines()[2:]]
    assert times == [line.split("|")[1].strip() for line in agenda.splitlines()[2:]]
    assert "break" in syllabus and times[-1] == agenda.splitlines()[-1].split("|")[1].strip()


def test_write_rewrites_a_stale_table_in_place(tmp_path: Path, monkeypatch) -> None:
    readme, instructors = tmp_path / "README.md", tmp_path / "instructors.md"
    readme.write_text(f"intro\n{budget.SYLLABUS_START}\nold\n{budget.SYLLABUS_END}\nafter\n")
    instructors.write_text(f"{budget.AGENDA_START}\n{budget.AGENDA_END}\n")
    monkeypatch.setattr(budget, "README", readme)
    monkeypatch.setattr(budget, "INSTRUCTORS", instructors)
    assert budget.stale_tables() and sorted(budget.write_tables()) == sorted([readme, instructors])
    assert budget.stale_tables() == [] and budget.write_tables() == []
    text = readme.read_text()
    assert text.startswith("intro\n") and text.endswith("\nafter\n") and "old" not in text
