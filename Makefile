# specdec-lab: every command a learner, an instructor or CI needs.
# Only requirement: Python >= 3.10 (as `python3`, or PYTHON=...) and make.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
export PYTHONHASHSEED := 0

.PHONY: help lab test lint demo bench clean workshop site

help:  ## list the commands
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e ".[course,test]"
	$(BIN)/python -m ipykernel install --sys-prefix --name specdec-lab --display-name "Python (specdec-lab)" >/dev/null
	@touch $(STAMP)

lab: $(STAMP)  ## create .venv if needed, then open the course in JupyterLab
	$(BIN)/jupyter lab notebooks/ $(if $(filter 0,$(shell id -u)),--allow-root)

test: $(STAMP) lint  ## the whole suite: lint, pytest and every notebook under nbval
	$(BIN)/python -m pytest -n 2 --dist loadscope --nbval-lax --nbval-current-env tests notebooks

lint: $(STAMP)  ## ruff (code and notebooks), stripped notebooks, student notebooks up to date
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/nbstripout --verify notebooks/*.ipynb $(wildcard workshop/*.ipynb)
	$(BIN)/python -m specdec_lab.exercises --check

demo: $(STAMP)  ## speculative decoding in the terminal, with accepted and corrected tokens colored
	$(BIN)/python -m specdec_lab demo

bench: $(STAMP)  ## side-by-side speed benchmark; writes data/results/
	$(BIN)/python -m specdec_lab bench

workshop: $(STAMP)  ## regenerate workshop/ from notebooks/ (resets the student notebooks)
	$(BIN)/python -m specdec_lab.exercises

site: $(STAMP)  ## run the notebooks on the CPU and build the HTML course into _site/
	$(BIN)/python scripts/build_site.py

clean:  ## remove the virtual environment, caches and the built site
	rm -rf $(VENV) .pytest_cache .ruff_cache _site
