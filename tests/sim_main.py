"""`python tests/sim_main.py VERB [ARGS...]`: `python -m specdec_lab VERB ARGS...` with the whole
process on the simulated accelerator (tests/simulated_device.py); `python tests/sim_main.py
SCRIPT.py [ARGS...]` calls that script's `main(ARGS)` instead (gpu_check's bench subprocess goes
through this file too). Either ends with one line,
`simulated accelerator: N host syncs`."""

import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import simulated_device  # noqa: E402

if __name__ == "__main__":
    sim = simulated_device.install()
    if sys.argv[1].endswith(".py"):  # a script with a main(argv)
        script = sys.argv[1]
        sys.path.insert(0, str(Path(script).resolve().parent))
        module = runpy.run_path(script, run_name="simulated")
        if "BENCH_COMMAND" in module:  # gpu_check's bench subprocess: on the simulation too
            module["BENCH_COMMAND"][:] = [sys.executable, __file__, "bench"]
        code = module["main"](sys.argv[2:])
    else:
        from specdec_lab.__main__ import main

        code = main(sys.argv[1:])
    print(f"simulated accelerator: {sim.syncs} host syncs")
    sys.exit(code)
