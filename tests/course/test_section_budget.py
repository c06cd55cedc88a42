"""scripts/section_budget.py: the clock of the course (sections, minutes, words, code lines)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parents[2]
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
    one_day = budget.agenda_table(secs, budget.pilots(secs), budget.BREAK_AFTER)
    assert agenda.endswith(one_day)  # the one-day schedule closes the agenda
    times = [line.split("|")[1].strip() for line in syllabus.splitlines()[2:]]
    assert times == [line.split("|")[1].strip() for line in one_day.splitlines()[2:]]
    assert "break" in syllabus and times[-1] == budget.clock(budget.day_minutes(secs))


def toy_sections(minutes: dict[str, int]) -> list:
    """One core exercise section of `minutes[name]` minutes per notebook (no reading, no run)."""
    return [budget.Section(name, "x", "core", m, exercises=["9.9"]) for name, m in minutes.items()]


def toy_record(cpu_s: dict[str, float]) -> dict:
    info = {"cpu": "Toy CPU", "cpu_count": 2, "torch_threads": 1}
    notebooks = {name: {"wall_s": s, "cpu_s": s} for name, s in cpu_s.items()}
    return {
        "device_info": info,
        "created": "2026-12-04T00:00:00+00:00",
        "results": {"notebooks": notebooks},
    }


def test_core_minutes_add_reading_run_and_exercises() -> None:
    """Reading at the linter's rates (words or code, whichever is longer) for the core sections
    without an exercise, the pilot's run time, and the exercise sections' minutes; optional
    sections count for nothing."""
    secs = [
        budget.Section("01_a.ipynb", "prose", "core", 5, words=90, lines=3),  # 2 min of words
        budget.Section("01_a.ipynb", "code", "core", 5, words=10, lines=24),  # 4 min of code
        budget.Section("01_a.ipynb", "exercise", "core", 10, words=500, exercises=["1.1"]),
        budget.Section("01_a.ipynb", "extra", "optional", 30, words=2000),
    ]
    (pilot,) = budget.pilots(secs, toy_record({"01_a.ipynb": 90.0})).values()
    assert (pilot.reading, pilot.run, pilot.exercises, pilot.headings) == (6.0, 1.5, 10, 20)
    assert pilot.minutes == 18  # 17.5, rounded up


def test_a_notebook_the_pilot_never_ran_is_an_error() -> None:
    with pytest.raises(SystemExit, match="notebook_minutes.py --core"):
        budget.pilots(toy_sections({"01_a.ipynb": 5}), toy_record({}))


def test_a_day_that_overflows_opens_with_two_sessions(monkeypatch) -> None:
    monkeypatch.setattr(budget, "notebook_title", lambda name: name)
    names = {"00_a.ipynb": 60, "01_b.ipynb": 100, "02_c.ipynb": 90, "03_d.ipynb": 80}
    secs, record = toy_sections(names), toy_record(dict.fromkeys(names, 0.0))
    assert budget.day_minutes(secs, names) == 340  # 330 + the break: fits 6:00
    agenda = budget.agenda(secs, record)
    assert agenda.startswith("**One day.**") and "Session" not in agenda
    assert "two sessions" not in budget.syllabus(secs, record)
    names["03_d.ipynb"] = 110  # 370 min: one day overflows
    secs = toy_sections(names)
    agenda, syllabus = budget.agenda(secs, record), budget.syllabus(secs, record)
    assert agenda.startswith("**Two sessions.** The core path takes 6:10 with its break")
    first, second, day = (agenda.index(h) for h in ("**Session 1**", "**Session 2**", "**One day"))
    assert first < second < day  # the two-session plan up front, the long day after it
    (one, after_one), (two, after_two) = budget.sessions(secs, names)
    assert [s.notebook for s in one] == ["00_a.ipynb", "01_b.ipynb"]  # 160 and 200 min
    assert [s.notebook for s in two] == ["02_c.ipynb", "03_d.ipynb"]
    assert (after_one, after_two) == ("00", "02")  # each break nearest its session's middle
    assert "| 6:10 | end of the core path (over 6:00: two sessions) | | |" in syllabus


def test_the_pilot_runs_the_core_path_that_the_core_path_test_checks() -> None:
    """scripts/notebook_minutes.py --core times the cells tests/notebooks/test_core_path.py selects."""
    loaded = {}
    for name in ("notebook_minutes", "test_core_path"):
        folder = ROOT / ("scripts" if name == "notebook_minutes" else "tests/notebooks")
        spec_ = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
        loaded[name] = importlib.util.module_from_spec(spec_)
        spec_.loader.exec_module(loaded[name])
    for path in budget.notebooks(None, budget.IN_AGENDA):
        pilot = loaded["notebook_minutes"].core_only(nbformat.read(path, as_version=4))
        core = loaded["test_core_path"].core_only(path)
        assert [c.source for c in pilot.cells] == [c.source for c in core.cells], path.name


def test_the_pilot_record_names_its_cpu_and_covers_every_notebook() -> None:
    record = budget.pilot_record()
    assert record["device_info"]["cpu"] and record["device_info"]["torch_threads"] == 1
    names = {p.name for p in budget.notebooks(None, budget.IN_AGENDA)}
    assert set(record["results"]["notebooks"]) == names
    assert all(r["cpu_s"] > 0 for r in record["results"]["notebooks"].values())


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
