"""`python tests/sim_main.py VERB [ARGS...]`: `python -m specdec_lab VERB ARGS...` with the whole
process on the simulated accelerator (tests/simulated_device.py), then one last line,
`simulated accelerator: N host syncs`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import simulated_device  # noqa: E402

if __name__ == "__main__":
    sim = simulated_device.install()
    from specdec_lab.__main__ import main

    code = main(sys.argv[1:])
    print(f"simulated accelerator: {sim.syncs} host syncs")
    sys.exit(code)
