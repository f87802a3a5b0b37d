# The README's commands. Bootstrapping is idempotent: .venv is rebuilt only when
# pyproject.toml changes, so a second `make test` starts at once.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# pytest-xdist workers: the suite spawns real supervisors and jobs, so one worker per core.
WORKERS ?= 2

.PHONY: demo test bench lint format venv clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]' --config-settings editable_mode=compat
	touch $(STAMP)

# Azurite, Microsoft's Azure Blob emulator (npm), for the az:// tests.
AZURITE := $(VENV)/node/node_modules/.bin/azurite-blob
$(AZURITE): $(STAMP)
	npm install --silent --prefix $(VENV)/node --no-audit --no-fund --no-save azurite@3.35.0
	touch $(AZURITE)

venv: $(STAMP)

demo: $(STAMP)
	@$(PY) examples/digits/demo.py

test: $(STAMP) $(AZURITE)
	$(PY) -m pytest -q -n $(WORKERS) --dist loadgroup tests

bench: $(STAMP)
	@$(PY) benchmarks/run_all.py

lint: $(STAMP)
	$(VENV)/bin/ruff check ferry tests benchmarks examples
	$(VENV)/bin/ruff format --check ferry tests benchmarks examples
	$(VENV)/bin/mypy

format: $(STAMP)
	$(VENV)/bin/ruff format ferry tests benchmarks examples
	$(VENV)/bin/ruff check --fix ferry tests benchmarks examples

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
