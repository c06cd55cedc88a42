"""Student notebooks: generated from the solutions, up to date, failing exactly at the stubs.

The execution test runs every student notebook once (about as long as nbval takes on its
solution), with a probe after each check cell: the check must also fail on every wrong answer
declared in tests/wrong_answers/<notebook>.py, and on everything the student notebook defines
outside the solution regions (no solution in plain sight). `make test` includes it, so the suite
covers solution and student notebooks.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from specdec_lab.cli import workshop
from specdec_lab.course import exercises

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
WRONG_ANSWERS = ROOT / "tests" / "wrong_answers"
BIN = Path(sys.executable).parent

SOLUTION = '''\
import math


def expected_tokens(alpha: float, gamma: int) -> float:
    """Tokens per target call."""
    ### BEGIN SOLUTION
    if alpha == 1.0:
        return float(gamma + 1)
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)
    ### END SOLUTION


class Drafter:
    def propose(self, k):
        ### BEGIN SOLUTION
        return [0] * k
        ### END SOLUTION
'''

HINT = "<details><summary>Hint</summary>A geometric series.</details>"


def course_notebook() -> nbformat.NotebookNode:
    """A small solution notebook in the course format, with outputs as if it had run."""
    setup = new_code_cell("from specdec_lab import theory", execution_count=1)
    setup.outputs = [new_output("stream", name="stdout", text="ready\n")]
    setup.metadata["scrolled"] = True
    check = new_code_cell(
        'assert expected_tokens(0.5, 1) == 1.5, "Exercise 3: expected_tokens(0.5, 1) is 1.5"',
        metadata={"tags": ["exercise-check"]},
    )
    return new_notebook(
        cells=[
            new_markdown_cell("# 04 · Speedup\n\n## You will learn\n\n- things"),
            setup,
            new_markdown_cell(
                "## 6. Workshop\n\nTwo exercises.\n\n### Exercise 3: tokens per call"
            ),
            new_code_cell(SOLUTION),
            new_markdown_cell(HINT),
            check,
            new_markdown_cell("### Exercise 4: a top-level answer"),
            new_code_cell("x = 1\n### BEGIN SOLUTION\nanswer = 42\n### END SOLUTION\nprint(x)"),
            new_markdown_cell("## Exercises\n\n1. Think about it."),
        ],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}},
    )


def code(nb: nbformat.NotebookNode, index: int) -> str:
    return nb.cells[index].source


def test_regions_become_stubs_at_their_indentation() -> None:
    student = exercises.make_student(course_notebook(), source="notebooks/04_x.ipynb")
    # The note is cell 0, so every source cell moved down by one.
    assert code(student, 4) == SOLUTION.replace(
        """    ### BEGIN SOLUTION
    if alpha == 1.0:
        return float(gamma + 1)
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)
    ### END SOLUTION
""",
        '    raise NotImplementedError("Exercise 3: tokens per call")\n',
    ).replace(
        """        ### BEGIN SOLUTION
        return [0] * k
        ### END SOLUTION
""",
        '        raise NotImplementedError("Exercise 3: tokens per call")\n',
    )
    compile(code(student, 4), "<student>", "exec")  # still valid Python


def test_number_and_title_come_from_the_nearest_preceding_heading() -> None:
    student = exercises.make_student(course_notebook())
    assert code(student, 8) == (
        'x = 1\nraise NotImplementedError("Exercise 4: a top-level answer")\nprint(x)'
    )
    assert "Exercise 3" not in code(student, 8)


def test_other_cells_are_kept_and_outputs_stripped() -> None:
    solution = course_notebook()
    student = exercises.make_student(solution, source="notebooks/04_x.ipynb")
    assert len(student.cells) == len(solution.cells) + 1
    note = student.cells[0]
    assert note.cell_type == "markdown" and "notebooks/04_x.ipynb" in note.source
    assert "make workshop" in note.source
    for before, after in zip(solution.cells, student.cells[1:], strict=True):
        assert after.cell_type == before.cell_type
        if "BEGIN SOLUTION" not in before.source:
            assert after.source == before.source
        assert after.metadata.get("tags") == before.metadata.get("tags")
        if after.cell_type == "code":
            assert after.outputs == [] and after.execution_count is None
    assert "scrolled" not in student.cells[2].metadata
    assert student.cells[5].source == HINT
    assert [c.id for c in student.cells] == [str(i) for i in range(len(student.cells))]
    assert student.metadata["specdec_lab"] == {"generated_from": "notebooks/04_x.ipynb"}
    # The solution notebook itself is untouched.
    assert solution.cells[1].outputs and "BEGIN SOLUTION" in code(solution, 3)


@pytest.mark.parametrize(
    "source, message",
    [
        ("def f():\n    ### BEGIN SOLUTION\n    return 1\n", "never closed"),
        ("def f():\n    return 1\n    ### END SOLUTION\n", "without a"),
        ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n", "inside an open region"),
    ],
)
def test_unbalanced_markers_are_errors(source: str, message: str) -> None:
    nb = new_notebook(cells=[new_markdown_cell("### Exercise 1: f"), new_code_cell(source)])
    with pytest.raises(exercises.ExerciseError, match=message):
        exercises.make_student(nb)


def test_a_region_needs_a_heading_and_headings_need_a_title() -> None:
    nb = new_notebook(cells=[new_code_cell("### BEGIN SOLUTION\nx = 1\n### END SOLUTION")])
    with pytest.raises(exercises.ExerciseError, match="before any exercise heading"):
        exercises.make_student(nb)
    with pytest.raises(exercises.ExerciseError, match="malformed heading"):
        exercises.headings(new_markdown_cell("### Exercise 2 the colon is missing"))
    assert (
        exercises.headings(new_markdown_cell("### Exercises\n\n```\n### Exercise 9: no\n```")) == []
    )


def test_exercise_numbers_may_name_their_notebook() -> None:
    cell = new_markdown_cell("### Exercise 2.3: the loop\n\n### Exercise 7: optimal γ")
    assert exercises.headings(cell) == [("2.3", "the loop"), ("7", "optimal γ")]
    with pytest.raises(exercises.ExerciseError, match="malformed heading"):
        exercises.headings(new_markdown_cell("### Exercise 2.: no"))


def test_answer_names_are_what_the_regions_define() -> None:
    assert exercises.answer_names(SOLUTION) == ["expected_tokens", "Drafter"]  # not `math`
    source = "LIMIT = 3\n### BEGIN SOLUTION\nanswer, (b, c) = 1, (2, 3)\n### END SOLUTION\n"
    assert exercises.answer_names(source) == ["answer", "b", "c"]  # LIMIT is outside the region
    cells = exercises.exercise_cells(course_notebook())
    assert cells == [("3", ["expected_tokens", "Drafter"], 5)]  # Exercise 4 has no check cell


PROBED_CHECK = 'assert f(2) == 4, "Exercise 9: f(2) should be 4"\nSIDE = torch.rand(1)'


def probe_namespace() -> dict:
    """A notebook's variables, as the kernel holds them: defined in module __main__."""
    namespace = {"__name__": "__main__"}
    exec(
        "import torch\n"
        "gen = torch.Generator().manual_seed(0)\n"
        "def f(x):\n    raise NotImplementedError('Exercise 9: square')\n"
        "def square(x):\n    return x * x\n"  # a solution in plain sight
        "def double(x):\n    return 2 * x\n"
        "FOUR = 4\n",
        namespace,
    )
    return namespace


def test_run_check_reports_and_restores() -> None:
    import torch

    namespace = probe_namespace()
    before, gen_state, torch_state = (
        dict(namespace),
        namespace["gen"].get_state(),
        torch.get_rng_state(),
    )
    assert exercises.run_check(namespace, PROBED_CHECK, {"f": namespace["square"]}) == "passed"
    outcome = exercises.run_check(namespace, PROBED_CHECK, {"f": lambda x: x + 1})
    assert outcome == "AssertionError: Exercise 9: f(2) should be 4"
    assert exercises.run_check(namespace, "torch.rand(3, generator=gen)\n1 / 0", {}).startswith(
        "ZeroDivisionError"
    )
    assert namespace == before and "SIDE" not in namespace  # variables restored...
    assert torch.equal(namespace["gen"].get_state(), gen_state)  # ...and generators
    assert torch.equal(torch.get_rng_state(), torch_state)
    assert exercises.run_check(namespace, "while True: pass", {}, timeout=0.2).startswith(
        "TimeoutError"
    )


def test_probe_finds_wrong_answers_and_plain_sight_solutions(tmp_path: Path, capsys) -> None:
    wrong = tmp_path / "wrong.py"
    wrong.write_text(
        "def off_by_one(x):\n    return x * x + 1\n\n"
        'WRONG_ANSWERS = {"9": {"off by one": off_by_one, "named": {"f": abs}}}\n'
    )
    report = exercises.probe(probe_namespace(), "9", ["f"], PROBED_CHECK, wrong)
    assert report["wrong"] == {
        "off by one": "AssertionError: Exercise 9: f(2) should be 4",
        "named": "AssertionError: Exercise 9: f(2) should be 4",
    }
    assert report["plain_sight"]["square as f"] == "passed"  # caught: the notebook solves it
    assert report["plain_sight"]["double as f"] == "passed"  # (2 * 2 == 4: a weak check)
    assert set(report["plain_sight"]) == {"square as f", "double as f"}  # not gen, FOUR, torch
    printed = capsys.readouterr().out
    assert printed.startswith(exercises.PROBE_MARK) and json.loads(printed.split(" ", 1)[1])
    # A value answer: the stub leaves it unbound, so the candidates are the notebook's numbers.
    value = exercises.probe(probe_namespace(), "9", ["g"], 'assert g == 4, "Exercise 9"', None)
    assert value["wrong"] == {} and value["plain_sight"] == {"FOUR as g": "passed"}


def test_with_probes_inserts_one_probe_after_each_check(tmp_path: Path) -> None:
    probed = exercises.with_probes(course_notebook(), "notebooks/04_x.ipynb", tmp_path / "w.py")
    plain = exercises.make_student(course_notebook(), "notebooks/04_x.ipynb")
    assert len(probed.cells) == len(plain.cells) + 1
    assert exercises.CHECK_TAG in probed.cells[6].metadata["tags"]
    probe = probed.cells[7].source
    assert "_exercises.probe(globals(), '3', ['expected_tokens', 'Drafter']" in probe
    assert str((tmp_path / "w.py").resolve()) in probe
    compile(probe, "<probe>", "exec")
    assert [c.id for c in probed.cells] == [str(i) for i in range(len(probed.cells))]


def test_stub_messages_are_valid_python_strings() -> None:
    for title in ["plain", "it's", 'say "γ"', "both ' and \"", "back\\slash"]:
        assert eval(exercises.python_string(title)) == title
    assert exercises.python_string("plain γ") == '"plain γ"'


def write(nb: nbformat.NotebookNode, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def test_generate_check_and_list(tmp_path: Path) -> None:
    src, out = tmp_path / "notebooks", tmp_path / "workshop"
    write(course_notebook(), src / "04_speedup.ipynb")
    write(new_notebook(cells=[new_markdown_cell("# 00 · no exercises")]), src / "00_intro.ipynb")
    assert exercises.differences(src, out) == [f"{out / '04_speedup.ipynb'}: missing"]

    assert exercises.generate(src, out) == [out / "04_speedup.ipynb"]
    assert sorted(p.name for p in out.iterdir()) == ["04_speedup.ipynb"]
    assert exercises.differences(src, out) == []
    assert workshop.main(["--src", str(src), "--out", str(out), "--check"]) == 0
    assert exercises.generate(src, out) == []  # nothing to rewrite: deterministic

    student = out / "04_speedup.ipynb"
    student.write_text(student.read_text().replace("raise NotImplementedError", "return 1 #"))
    (out / "mine.ipynb").write_text(nbformat.writes(new_notebook()))  # a learner's scratch file
    write(exercises.make_student(course_notebook()), out / "03_renamed.ipynb")  # stale
    assert workshop.main(["--src", str(src), "--out", str(out), "--check"]) == 1
    assert len(exercises.differences(src, out)) == 3

    exercises.generate(src, out)  # the instructor's reset
    assert sorted(p.name for p in out.iterdir()) == ["04_speedup.ipynb", "mine.ipynb"]
    assert exercises.differences(src, out) == [
        f"{out / 'mine.ipynb'}: not generated (only student notebooks belong here)"
    ]

    assert exercises.list_exercises(src) == [
        ("3", "tokens per call", "04_speedup.ipynb"),
        ("4", "a top-level answer", "04_speedup.ipynb"),
    ]
    write(course_notebook(), src / "05_copy.ipynb")
    with pytest.raises(exercises.ExerciseError, match="Exercise 3 appears twice"):
        exercises.list_exercises(src)


def test_generated_notebook_is_clean_for_nbstripout(tmp_path: Path) -> None:
    student = write(exercises.make_student(course_notebook()), tmp_path / "s.ipynb")
    subprocess.run([BIN / "nbstripout", "--verify", student], check=True)


# --- the real course --------------------------------------------------------------------------

EXERCISE_NOTEBOOKS = sorted(
    p.name for p in NOTEBOOKS.glob("*.ipynb") if exercises.has_solution(nbformat.read(p, 4))
)


def test_workshop_is_regenerated_from_the_notebooks(tmp_path) -> None:
    """Checked on what git would commit (the index), so a learner's saved outputs don't fail it."""
    root = ROOT
    if (ROOT / ".git").exists():
        tracked = subprocess.run(
            ["git", "ls-files", "notebooks/*.ipynb", "workshop/*.ipynb"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        subprocess.run(
            ["git", "checkout-index", f"--prefix={tmp_path}/", "--", *tracked], cwd=ROOT, check=True
        )
        root = tmp_path
    problems = exercises.differences(root / "notebooks", root / "workshop")
    assert not problems, "\n".join(problems) + "\nrun `make workshop`"


@pytest.mark.parametrize("name", EXERCISE_NOTEBOOKS)
def test_every_exercise_has_a_check_cell(name: str) -> None:
    """Each exercise heading with a solution region is followed, before the next heading, by a
    cell tagged `exercise-check` whose messages name the exercise, or that calls the exercise's
    check function in `specdec_lab.course.checks`."""
    current, regions, checks = None, {}, {}
    for cell in nbformat.read(NOTEBOOKS / name, 4).cells:
        current = (exercises.headings(cell) or [current])[-1]
        if current and cell.cell_type == "code":
            number = current[0]
            if exercises.BEGIN in cell.source:
                regions[number] = True
            elif exercises.CHECK_TAG in cell.metadata.get("tags", []) and regions.get(number):
                by_name = f"exercise_{number.replace('.', '_')}("  # checks.exercise_1_2(...)
                assert f"Exercise {number}" in cell.source or by_name in cell.source, (
                    f"check cell of Exercise {number}"
                )
                checks[number] = True
    assert regions and set(regions) == set(checks), f"exercises without a check cell: {regions}"


def test_python3_kernel_is_this_environment() -> None:
    """nbclient's `kernel_name="python3"` must start this interpreter, not another Python."""
    from jupyter_client.manager import KernelManager

    cmd = KernelManager(kernel_name="python3").format_kernel_cmd()
    assert Path(cmd[0]) == Path(sys.executable), (
        f"the python3 kernelspec runs {cmd[0]}, not {sys.executable}: "
        "a user-level kernelspec shadows the venv's (see `jupyter kernelspec list`)"
    )


def check_cells(nb: nbformat.NotebookNode) -> list:
    return [c for c in nb.cells if exercises.CHECK_TAG in c.metadata.get("tags", [])]


def error_names(cell) -> list[str]:
    return [o.ename for o in cell.get("outputs", []) if o.output_type == "error"]


@pytest.mark.parametrize("name", sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")))
def test_notebook_ends_with_check_your_understanding(name: str) -> None:
    """The recap: the last section is `## Check your understanding`, with at least three
    numbered questions, their answers collapsed in <details> blocks."""
    cells = nbformat.read(NOTEBOOKS / name, 4).cells
    sections = [
        (index, line.strip())
        for index, cell in enumerate(cells)
        if cell.cell_type == "markdown"
        for line in cell.source.splitlines()
        if line.startswith("## ")
    ]
    index, last = sections[-1]
    # the heading may carry its clock marker (scripts/section_budget.py)
    assert re.fullmatch(r"## Check your understanding( \((core|optional), \d+ min\))?", last), (
        f"{name} ends with {last!r}"
    )
    recap = "\n".join(c.source for c in cells[index:] if c.cell_type == "markdown")
    recap = recap[recap.index(last) :]
    answers = re.findall(r"<details>.*?</details>", recap, flags=re.DOTALL)
    for answer in answers:
        recap = recap.replace(answer, "")
    questions = [line for line in recap.splitlines() if re.match(r"\s*\d+\. \S", line)]
    assert len(questions) >= 3 and answers, (
        f"{name}: {len(questions)} numbered questions and {len(answers)} <details> answer blocks"
    )


def wrong_answers_file(name: str) -> Path:
    return WRONG_ANSWERS / f"{Path(name).stem}.py"


@pytest.mark.parametrize("name", EXERCISE_NOTEBOOKS)
def test_wrong_answers_name_real_exercises(name: str) -> None:
    """Every exercise declares wrong answers, and no declared exercise is stale."""
    numbers = {ex.number for ex in exercises.exercise_cells(nbformat.read(NOTEBOOKS / name, 4))}
    declared = exercises.load_wrong_answers(wrong_answers_file(name))
    assert set(declared) == numbers, (
        f"{wrong_answers_file(name).relative_to(ROOT)} must declare WRONG_ANSWERS for exactly "
        f"the exercises {sorted(numbers)}, it declares {sorted(declared)}"
    )
    assert all(declared.values()), "every exercise needs at least one wrong answer"


@pytest.mark.parametrize("name", EXERCISE_NOTEBOOKS)
def test_student_notebook_fails_at_the_stubs_and_on_wrong_answers(name: str, run_notebook) -> None:
    """Run the student notebook: any error but NotImplementedError fails (nbclient raises), and
    every check cell must fail on its stub. (That the same check cells pass on the solution is
    checked by nbval, which runs every solution notebook in `make test`.)

    The probe after each check cell re-runs it on each declared wrong answer, which must fail
    with an AssertionError naming the exercise, and on each function or class (or number) that
    the student notebook defines outside the solution regions, none of which may pass."""
    solution = nbformat.read(NOTEBOOKS / name, 4)
    student = exercises.with_probes(solution, f"notebooks/{name}", wrong_answers_file(name))
    executed = run_notebook(student, allow_error_names=["NotImplementedError"])
    checks = check_cells(executed)
    assert checks
    for cell in checks:
        assert error_names(cell) == ["NotImplementedError"], cell.source

    reports = {r["number"]: r for r in exercises.probe_reports(executed)}
    assert set(reports) == {ex.number for ex in exercises.exercise_cells(solution)}
    for number, report in reports.items():
        assert report["wrong"], f"Exercise {number}: no wrong answers in {wrong_answers_file(name)}"
        for label, outcome in report["wrong"].items():
            assert outcome.startswith("AssertionError") and f"Exercise {number}" in outcome, (
                f"Exercise {number}: the check does not reject the wrong answer {label!r} with "
                f"an 'Exercise {number}: ...' AssertionError; it gave: {outcome}"
            )
        leaks = [label for label, outcome in report["plain_sight"].items() if outcome == "passed"]
        assert not leaks, f"Exercise {number} is solved in plain sight by: {leaks}"
