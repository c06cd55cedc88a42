"""The check functions behind the exercises' check cells: one call per check cell.

A check cell of a course notebook is a line or two, e.g. ``checks.exercise_1_2(my_residual)``.
Each function here runs the learner's answer on cases chosen so that plausible wrong answers fail,
and raises ``AssertionError("Exercise N: <what is wrong>")`` with one sentence saying what is wrong
(`specdec_lab.course.exercises` and tests/wrong_answers/ test exactly that). It prints
``Exercise N: correct!`` when the answer passes.

One module per notebook, each paired with the notebook's wrong answers in
tests/wrong_answers/ (``nbNN_<notebook>.py`` here, ``NN_<notebook>.py`` there):

- `nb00_why_decoding_is_memory_bound`: Exercise 0.1;
- `nb01_draft_and_verify`: Exercises 1.1-1.3;
- `nb02_proving_equivalence`: Exercises 2.1-2.3;
- `nb03_acceptance_rates`: Exercise 3.1;
- `nb04_speedup_theory`: Exercises 4.1-4.3;
- `nb05_memory_vs_compute`: Exercises 5.1-5.2;
- `nb06_beyond_one_draft_model`: Exercises 6.1-6.2;
- `nb07_engines_and_capstone`: Exercises 7.1-7.3 and `check_report`, the capstone report's
  arithmetic (what they check is in `specdec_lab.measure.capstone`).

`harness` holds what they share: the three rules every check follows (no delegation; predict,
then measure; a stub is not an answer) and the tools that enforce them. The notebooks import
this package and call ``checks.exercise_N_M(...)``; every check, and every other name that a
notebook or a wrong answer reads through ``checks.``, is re-exported here (the rest stays in its
module, where the tests find it).
"""

from __future__ import annotations

from specdec_lab.course.checks.nb00_why_decoding_is_memory_bound import exercise_0_1
from specdec_lab.course.checks.nb01_draft_and_verify import (
    ContextFree,
    exercise_1_1,
    exercise_1_2,
    exercise_1_3,
)
from specdec_lab.course.checks.nb02_proving_equivalence import (
    exercise_2_1,
    exercise_2_2,
    exercise_2_3,
)
from specdec_lab.course.checks.nb03_acceptance_rates import exercise_3_1
from specdec_lab.course.checks.nb04_speedup_theory import exercise_4_1, exercise_4_2, exercise_4_3
from specdec_lab.course.checks.nb05_memory_vs_compute import (
    WORKED_KNEE_NAME,
    exercise_5_1,
    exercise_5_2,
)
from specdec_lab.course.checks.nb06_beyond_one_draft_model import exercise_6_1, exercise_6_2
from specdec_lab.course.checks.nb07_engines_and_capstone import (
    LEFT_OUT_OPTIONS,
    PREDICTION_7_1,
    PREDICTION_7_3,
    check_report,
    exercise_7_1,
    exercise_7_2,
    exercise_7_3,
)

__all__ = [
    "LEFT_OUT_OPTIONS",
    "PREDICTION_7_1",
    "PREDICTION_7_3",
    "WORKED_KNEE_NAME",
    "ContextFree",
    "check_report",
    "exercise_0_1",
    "exercise_1_1",
    "exercise_1_2",
    "exercise_1_3",
    "exercise_2_1",
    "exercise_2_2",
    "exercise_2_3",
    "exercise_3_1",
    "exercise_4_1",
    "exercise_4_2",
    "exercise_4_3",
    "exercise_5_1",
    "exercise_5_2",
    "exercise_6_1",
    "exercise_6_2",
    "exercise_7_1",
    "exercise_7_2",
    "exercise_7_3",
]
