#!/usr/bin/env bash
# Download the pure-Python wheels a GPU machine without internet may lack into .gpu-wheels/
# (git-ignored), to carry there with the working tree: transformers at the version this suite runs
# on (the machine may have an older one), huggingface_hub, accelerate (weights straight to the
# device) and ipywidgets with its pure-Python parts (notebook 04 imports it).
# scripts/gpu_check.sh unpacks them in front of the machine's own packages.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
version() { "$PY" -c "import importlib.metadata as m; print(m.version('$1'))"; }
rm -rf .gpu-wheels && mkdir -p .gpu-wheels
"$PY" -m pip download --quiet --no-deps --only-binary=:all: -d .gpu-wheels \
  "transformers==$(version transformers)" "huggingface_hub==$(version huggingface_hub)" \
  "accelerate==$(version accelerate)" "ipywidgets==$(version ipywidgets)" \
  "widgetsnbextension==$(version widgetsnbextension)" \
  "jupyterlab_widgets==$(version jupyterlab_widgets)" "comm==$(version comm)"
ls -l .gpu-wheels
