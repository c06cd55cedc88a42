"""Issue 40: one instrument for the costs. Every caller that measures t(1), t(γ + 1) or a draft's
step (notebooks 04 and 07, the capstone, the planner behind the bench and `make demo`) goes
through `timing.loop_costs`; a spy proves it (no timing is asserted)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from specdec_lab import models
from specdec_lab.measure import capstone, plan, timing

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pair():
    return models.load_pair("embedded")


def test_every_cost_caller_goes_through_the_one_instrument(pair, monkeypatch) -> None:
    seen: list[str] = []
    real = timing.loop_costs

    def spy(setups, ks, *args, **kwargs):
        seen.append("loop_costs")
        return real(setups, ks, *args, **kwargs)

    monkeypatch.setattr(timing, "loop_costs", spy)
    callers = {
        "forward_costs": lambda: timing.forward_costs(pair, {"d": pair.draft}, 3, repeats=1),
        "measure_c": lambda: timing.measure_c(pair, 3, repeats=1),
        "arm_costs": lambda: capstone.arm_costs(
            pair, pair.encode("def f(x):\n"), repeats=1, max_tokens=3
        ),
        "measure_arm": lambda: capstone.measure_arm(
            capstone.Arm(("def f(x):\n", "class A:\n")), n_new=4, rounds=1
        ),
        "planner": lambda: plan.measure_costs_together(
            {None: (pair.target, plan.pair_candidates(pair))},
            pair.encode("def f(x):\n    return x + 1\n"),
            max_tokens=3,
            repeats=1,
            vocab_size=pair.vocab_size,
        ),
    }
    for name, call in callers.items():
        before = len(seen)
        call()
        assert len(seen) > before, f"{name} timed its costs outside timing.loop_costs"


@pytest.mark.parametrize("notebook", ["04_speedup_theory", "07_engines_and_capstone"])
def test_the_notebooks_time_costs_only_through_routed_functions(notebook) -> None:
    """Notebooks 04 and 07 read costs only from functions that call `loop_costs`: no second
    sweep of their own (`session_sweep`, `interleaved`, `runtime_sweep`) for r or c."""
    cells = json.loads((ROOT / "notebooks" / f"{notebook}.ipynb").read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    assert re.search(
        r"timing\.forward_costs|capstone\.(arm_costs|measure_arm)|timing\.measure_c", code
    )
    assert not re.search(r"timing\.(session_sweep|interleaved|runtime_sweep)\(", code)
