# Quartermaster: `make demo` runs the portal with demo data; `make test` runs the test suite.
# Both install from the lock files, requirements/runtime.txt and requirements/dev.txt: exact versions with
# hashes, as CI and deploy/Dockerfile do. After changing the dependencies in pyproject.toml, run `make lock`
# (it needs the package index) and commit requirements/; `make check` fails until then.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test chaos lint fmt check schema schema-check lock lock-upgrade lock-check ci clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Quartermaster needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)

# The locked pip, the locked packages (the build backend among them), then the project itself, editable,
# built with that pinned backend rather than one fetched at the time. A changed lock installs again.
$(VENV)/.installed-runtime: requirements/pip.txt requirements/runtime.txt pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --require-hashes -r requirements/pip.txt
	$(BIN)/pip install --quiet --require-hashes -r requirements/runtime.txt
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

$(VENV)/.installed-dev: requirements/pip.txt requirements/dev.txt pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --require-hashes -r requirements/pip.txt
	$(BIN)/pip install --quiet --require-hashes -r requirements/dev.txt
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	touch $@ $(VENV)/.installed-runtime

## Install, migrate, seed the demo and run web server, worker, beat and the demo's background work until Ctrl-C;
## PORT picks the web server's port (QM_VAR_DIR where its files live).
PORT ?= 8000
demo: $(VENV)/.installed-runtime
	$(BIN)/python manage.py demo --bind 127.0.0.1:$(PORT)

## Run the tests: PostgreSQL/Redis when DATABASE_URL/REDIS_URL point at them, embedded defaults otherwise. The
## tests of the Slurm labs run on one worker, one after another (tests/conftest.py); the slowest are listed.
## TEST_ARGS picks some (CI runs the tests that differ by database on the embedded defaults too:
## TEST_ARGS='-m each_database'). TEST_WORKERS xdist workers, twice the cores by default: many tests wait on
## what they started (a Slurm lab's jobs, live servers, workers), and with one worker per core the cores sat
## half idle (CI's suite: 19:26 with 2 workers, 15:08 with 4, on 2 cores).
TEST_ARGS ?=
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) * 2 )))
test: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=25 $(TEST_ARGS)

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
	$(BIN)/python -m tools.sizes

## Sort the imports and format the code as `make lint` wants them (ruff's safe fixes of imports, then its formatter).
fmt: $(VENV)/.installed-dev
	$(BIN)/ruff check --fix --select I .
	$(BIN)/ruff format .

check: $(VENV)/.installed-dev schema-check lock-check
	$(BIN)/python manage.py check
	$(BIN)/python manage.py makemigrations --check --dry-run

## Regenerate the committed OpenAPI schema after changing the API.
schema: $(VENV)/.installed-dev
	$(BIN)/python manage.py spectacular --file openapi.yaml --validate --fail-on-warn

schema-check: $(VENV)/.installed-dev
	@$(BIN)/python manage.py spectacular --file $(VENV)/openapi.generated.yaml --validate --fail-on-warn
	@diff -u openapi.yaml $(VENV)/openapi.generated.yaml || (echo "openapi.yaml is stale: run 'make schema' and commit it" >&2; exit 1)

## Make requirements/*.txt again from pyproject.toml's ranges, for CPython 3.11 on x86_64 Linux: `lock` keeps
## the versions they pin where the ranges still admit them, `lock-upgrade` takes the newest the ranges admit.
## Needs the package index; uv, pinned here, resolves in a virtualenv of its own.
UV_VERSION := 0.13.9
LOCK_TOOLS := $(VENV)/lock-tools
$(LOCK_TOOLS)/.installed-$(UV_VERSION):
	$(PYTHON) -m venv $(LOCK_TOOLS)
	$(LOCK_TOOLS)/bin/pip install --quiet uv==$(UV_VERSION) packaging==26.3
	touch $@

lock: $(LOCK_TOOLS)/.installed-$(UV_VERSION)
	$(LOCK_TOOLS)/bin/python requirements/lock.py --uv $(LOCK_TOOLS)/bin/uv

lock-upgrade: $(LOCK_TOOLS)/.installed-$(UV_VERSION)
	$(LOCK_TOOLS)/bin/python requirements/lock.py --uv $(LOCK_TOOLS)/bin/uv --upgrade

## Offline: the locks were made from pyproject.toml's dependencies as they are (a digest in their first line).
lock-check: $(VENV)/.installed-dev
	@$(BIN)/python requirements/lock.py --check

ci: lint check test

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
