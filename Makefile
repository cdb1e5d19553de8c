# The README's two commands: `make run` (build the default MiniLM for QNN HTP) and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: run test plan lint bench clients

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[run]'
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed-run
	$(BIN)/python -m pip install -q -e '.[run,test]'
	touch $@

# The clients that open a deliverable folder (Optimum, sentence-transformers, onnxruntime-genai),
# in their own environment: their pins differ from the build's (pyproject's `clients` extra);
# and transformers.js where Node is installed (its native ONNX Runtime ships in the package;
# --ignore-scripts skips a GPU download).
CLIENTS := .venv-clients

$(CLIENTS)/.installed: pyproject.toml
	$(PYTHON) -m venv $(CLIENTS)
	$(CLIENTS)/bin/python -m pip install -q --upgrade pip
	$(CLIENTS)/bin/python -m pip install -q '.[clients]'
	if command -v npm >/dev/null 2>&1; then \
	  cd tests/clients && npm ci -s --ignore-scripts --no-audit --no-fund; fi
	touch $@

clients: $(CLIENTS)/.installed

run: $(VENV)/.installed-run
	$(BIN)/modelplan run

plan: $(VENV)/.installed-run
	$(BIN)/modelplan plan

# The docs site first (a broken link or a missing page fails), then the sources' bytecode (the
# suite starts hundreds of Python processes, and where PYTHONDONTWRITEBYTECODE is set none of
# them would write it: each would compile every module it imports), then two pytest-xdist workers;
# tests that must share one worker carry xdist_group marks, and the tests of a module that use
# its module-scoped fixture share one (tests/xdist_groups.py). The 25 slowest tests are listed at
# the end; on CI (CI set) a session past pyproject's [tool.modelplan.test_budget] fails.
test: $(VENV)/.installed-test $(CLIENTS)/.installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	$(BIN)/python -m compileall -q planner executors schemas hydra_plugins tests benchmarks >/dev/null
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup --durations=25

lint: $(VENV)/.installed-test
	$(BIN)/python -m pip install -q ruff
	$(BIN)/ruff check planner executors schemas tests benchmarks

bench: $(VENV)/.installed-run
	$(BIN)/python benchmarks/plan_bench.py
