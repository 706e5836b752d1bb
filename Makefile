# Quartermaster: `make demo` runs the portal with demo data; `make test` runs the test suite.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test chaos lint check schema schema-check ci clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Quartermaster needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed-runtime: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed-runtime

## Install, migrate, seed the demo and run web server, worker and beat until Ctrl-C.
demo: $(VENV)/.installed-runtime
	$(BIN)/python manage.py demo

## Run the tests: PostgreSQL/Redis when DATABASE_URL/REDIS_URL point at them, embedded defaults otherwise.
test: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -n auto

## The chaos test at scale (CI's own step): CHAOS_KILLS worker kills, PostgreSQL and Redis restarted in the
## middle, on servers of its own; needs DATABASE_URL on PostgreSQL. Prints its figures; a skip fails it.
CHAOS_KILLS ?= 200
CHAOS_SEED ?= 7
chaos: $(VENV)/.installed-dev
	@rm -f $(VENV)/chaos.json
	QM_CHAOS_KILLS=$(CHAOS_KILLS) QM_CHAOS_SEED=$(CHAOS_SEED) QM_CHAOS_REPORT=$(VENV)/chaos.json \
		$(BIN)/python -m pytest tests/scheduler/test_chaos.py -n 0 -p no:cacheprovider -q -s
	@test -s $(VENV)/chaos.json || (echo "the chaos test did not run (it needs DATABASE_URL on PostgreSQL)" >&2; exit 1)
	@cat $(VENV)/chaos.json

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .
	$(BIN)/lint-imports --no-cache

check: $(VENV)/.installed-dev schema-check
	$(BIN)/python manage.py check
	$(BIN)/python manage.py makemigrations --check --dry-run

## Regenerate the committed OpenAPI schema after changing the API.
schema: $(VENV)/.installed-dev
	$(BIN)/python manage.py spectacular --file openapi.yaml --validate --fail-on-warn

schema-check: $(VENV)/.installed-dev
	@$(BIN)/python manage.py spectacular --file $(VENV)/openapi.generated.yaml --validate --fail-on-warn
	@diff -u openapi.yaml $(VENV)/openapi.generated.yaml || (echo "openapi.yaml is stale: run 'make schema' and commit it" >&2; exit 1)

ci: lint check test

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
