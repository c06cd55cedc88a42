"""The check functions behind the exercises' check cells: one call per check cell.

A check cell is a line or two, e.g. ``checks.exercise_1_2(my_residual)``. Each function runs the
learner's answer on cases chosen so that plausible wrong answers fail, raising
``AssertionError("Exercise N: <what is wrong>")`` (`specdec_lab.course.exercises` and
tests/wrong_answers/ test exactly that), and prints ``Exercise N: correct!`` when it passes.

One module per notebook, ``nbNN_<notebook>.py``, paired with tests/wrong_answers/NN_<notebook>.py;
`nb07_engines_and_capstone` also holds `check_report`, the capstone report's arithmetic, and
`check_project`, a capstone project's table against a rerun.
`harness` holds what they share: the three rules every check follows and the tools that enforce
them. Every name a notebook or a wrong answer reads through ``checks.`` is re-exported here.
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
from specdec_lab.course.checks.nb04_speedup_theory import (
    exercise_4_1,
    exercise_4_2,
    exercise_4_3,
    exercise_4_4,
)
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
    check_project,
    check_report,
    exercise_7_1,
    exercise_7_2,
    exercise_7_3,
)
