"""GPU dry run: notebooks 03, 04, 05 and 06 end to end with their accelerator branches on the CPU.

With `SPECDEC_LAB_FORCE_GPU_PATHS=1`, `env.gpu_paths()` is True on a CPU, so each notebook
takes the branches a GPU user executes (the hub pair with its memory guard, the ladder's memory
guard, exactness checks chosen by dtype), while `env.dry_run()` keeps the CPU sizes. The plain
CPU branches run under nbval in `make test`; these four runs take minutes, so they run in `make
test-accelerator`, beside the same notebooks on the simulated accelerator
(tests/notebooks/test_accelerator_notebooks.py), which takes these branches with tensors on a device.

In notebook 03 the hub pair loads as a tiny random stand-in of its family, so the whole notebook
runs with a pair that is not the embedded one: every claim it asserts about the embedded pair
must be guarded, and every identity it asserts must hold for any pair. A second, short run sets
`SPECDEC_LAB_STAND_INS=0` and `HF_HUB_OFFLINE=1`, so the hub pair cannot load and the notebook
falls back to the embedded pair, as on a GPU machine without internet; it stops after the pair
is loaded, since from there on it is the plain CPU run that nbval executes.
"""

from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"

# An extra last cell: the dry run really took the GPU branches, with the CPU sizes.
DRY_RUN_CHECK = 'assert GPU and not BIG, f"GPU={GPU}, BIG={BIG}: not a GPU dry run"'


def dry_run_printed(nb: nbformat.NotebookNode, run_notebook) -> str:
    """Run `nb` plus the dry-run check cell; return everything its cells printed."""
    nb.cells.append(new_code_cell(DRY_RUN_CHECK))
    executed = run_notebook(nb)
    return "\n".join(
        o.get("text", "")
        for c in executed.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
    )


@pytest.fixture
def dry_run(monkeypatch):
    monkeypatch.setenv("SPECDEC_LAB_FORCE_GPU_PATHS", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return monkeypatch


@pytest.mark.accelerator  # minutes; make test-accelerator runs it beside the simulated device's
@pytest.mark.parametrize(
    "name",
    [
        "03_acceptance_rates.ipynb",
        "04_speedup_theory.ipynb",
        "05_memory_vs_compute.ipynb",
        "06_beyond_one_draft_model.ipynb",  # bfloat16: trees, the head, inexact greedy asserts
    ],
)
def test_notebook_gpu_branches_run_on_the_cpu(name: str, dry_run, run_notebook) -> None:
    printed = dry_run_printed(nbformat.read(NOTEBOOKS / name, as_version=4), run_notebook)
    if name.startswith("03"):  # the hub pair's tiny stand-in, not the embedded pair
        assert "pair 'qwen2.5' (tiny random qwen2 stand-in" in printed
    if name.startswith("06"):  # the GPU's dtype, so the exactness asserts stood down
        assert "torch.bfloat16" in printed


def test_notebook_03_falls_back_to_the_embedded_pair_offline(dry_run, run_notebook) -> None:
    dry_run.setenv("SPECDEC_LAB_STAND_INS", "0")
    dry_run.setenv("HF_HUB_OFFLINE", "1")
    nb = nbformat.read(NOTEBOOKS / "03_acceptance_rates.ipynb", as_version=4)
    loads = next(i for i, c in enumerate(nb.cells) if "models.load_first_pair(" in c.source)
    nb.cells = nb.cells[: loads + 2]  # up to the pair and the cell that checks its prompts
    printed = dry_run_printed(nb, run_notebook)
    assert "note: pair 'qwen2.5' is not available here" in printed
    assert "pair 'embedded'" in printed
