# Two entry points a fresh machine needs: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: run test test-cluster check lint bench install

$(BIN)/svc: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(BIN)/svc

install: $(BIN)/svc

run: install
	$(BIN)/svc serve

lint: install
	$(BIN)/ruff check app bench tests
	$(BIN)/ruff format --check app bench tests
	$(BIN)/mypy

# The store tests run on SQLite and on a throwaway PostgreSQL server (Debian's package,
# installed when missing; SVC_TEST_POSTGRES_URL names a server to use instead).
test: install lint
	bash tests/ensure-postgresql.sh
	$(BIN)/pytest

# Only the tests on the real 3-primary Valkey Cluster (`make test` runs them too).
test-cluster: install
	$(BIN)/pytest -k cluster

bench: install
	$(BIN)/python -m bench
