#!/usr/bin/env bash
# One prepared GPU run (< 8 minutes on an H100 or H200, so a rerun fits a 15-minute slot): notebook 05's measurements at realistic shapes
# and the side-by-side bench, recorded with device info in data/results/gpu-*.json.
# The GPU machine already has torch and transformers and no internet; pass --smoke on a CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# The machine's own interpreter: python3 where there is no `python` (PYTHON=... overrides).
PY="${PYTHON:-$(command -v python3 || command -v python)}"
# Wheels carried from a machine with a registry (scripts/gpu_wheels.sh), unpacked in front of the
# machine's own packages: a wheel is a zip of site-packages, so no pip is needed.
if compgen -G ".gpu-wheels/*.whl" >/dev/null; then
  rm -rf .gpu-site && for w in .gpu-wheels/*.whl; do "$PY" -m zipfile -e "$w" .gpu-site; done
  export PYTHONPATH="$PWD/.gpu-site:$PYTHONPATH"
fi
"$PY" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"
timeout "${GPU_CHECK_SECONDS:-470}" "$PY" scripts/gpu_check.py "$@"
