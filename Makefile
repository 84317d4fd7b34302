# Two entry points a fresh machine needs: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: run test test-cluster faults check lint bench install

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
	$(BIN)/lint-imports

# The store tests run on SQLite and on a throwaway PostgreSQL server (Debian's package,
# installed when missing; SVC_TEST_POSTGRES_URL names a server to use instead).
# The fault suite (tests/faults: Redis, workers and upstreams killed under load) runs as a
# step of its own: `make faults`.
test: install lint
	bash tests/ensure-postgresql.sh
	$(BIN)/pytest -m "not faults"
	$(BIN)/pytest -m faults tests/faults

faults: install
	$(BIN)/pytest -m faults tests/faults

# Only the tests on the real 3-primary Valkey Cluster (`make test` runs them too).
test-cluster: install
	$(BIN)/pytest -k cluster

bench: install
	$(BIN)/python -m bench
