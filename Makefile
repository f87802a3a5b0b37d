# The README's commands. Bootstrapping is idempotent: packages are installed again only
# when pyproject.toml changes, so a second `make demo` or `make test` starts at once.
# `make demo` installs Ferry and what the example needs; `make test` the whole dev set.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install -q --disable-pip-version-check --config-settings editable_mode=compat
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
# pytest-xdist workers: the suite spawns real supervisors and jobs, so one worker per core.
WORKERS ?= 2

.PHONY: demo test bench lint format venv clean

# The pip that comes with Python 3.11 (23.x) backtracks for over ten minutes on the dev set
# (through moto's releases); a current pip resolves it in under half a minute.
PIP_MIN := pip>=25.1

$(PY):
	$(PYTHON) -m venv $(VENV)

# the dev set holds the example's extras too, so it stands for both
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q --disable-pip-version-check '$(PIP_MIN)'
	$(PIP) -e '.[dev]'
	@# google-cloud-aiplatform's legacy namespace .pth imports google.cloud into every
	@# interpreter as it starts; Python finds those namespace packages without it
	rm -f $(VENV)/lib/python*/site-packages/google_cloud_*-nspkg.pth
	touch $(STAMP) $(DEMO_STAMP)

$(DEMO_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q --disable-pip-version-check '$(PIP_MIN)'
	$(PIP) -e '.[example]'
	touch $(DEMO_STAMP)

# Azurite, Microsoft's Azure Blob emulator (npm), for the az:// tests.
AZURITE := $(VENV)/node/node_modules/.bin/azurite-blob
$(AZURITE): $(STAMP)
	npm install --silent --prefix $(VENV)/node --no-audit --no-fund --no-save azurite@3.35.0
	touch $(AZURITE)

venv: $(STAMP)

demo: $(DEMO_STAMP)
	@$(PY) examples/digits/demo.py

test: $(STAMP) $(AZURITE)
	$(PY) -m pytest -q -n $(WORKERS) --dist loadgroup tests

# Ferry's bytecode first, as a regular install has it (an editable install run with
# PYTHONDONTWRITEBYTECODE set would compile every module in every process)
bench: $(STAMP)
	@$(PY) -m compileall -q ferry
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
