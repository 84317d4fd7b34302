# Two entry points a fresh machine needs: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: run test test-cluster faults soak jepsen check format lint bench install install-runtime lock screenshots

# .venv is installed in two layers (and the isolated clients' environment below), each
# recorded by a stamp file inside .venv (removing .venv removes them too). Every package is pinned with its hashes, so pip resolves nothing itself.
#   runtime.stamp: requirements/runtime.lock (svc's runtime dependencies only), then svc
#     itself, editable and without dependencies of its own. All that `make run` needs: no test
#     tool, no Node, no root.
#   test.stamp: requirements/test.lock on top (the same versions plus the test and bench
#     extras), for `make test` and the targets that lint, measure or test.
# A layer is brought up to date when its lock or pyproject.toml changes, and a new runtime layer
# makes the test layer out of date too: `make run` after `make test` installs nothing, `make
# test` after `make run` adds only the test layer. check.py fails when pyproject.toml asks for
# something the lock lacks; the runtime layer skips `pip check`, which would trip over test
# packages an older test layer left behind (check.py covers svc's whole dependency tree).
RUNTIME_STAMP = $(VENV)/runtime.stamp
TEST_STAMP    = $(VENV)/test.stamp

$(RUNTIME_STAMP): pyproject.toml requirements/runtime.lock
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
	  || { echo "svc needs Python >= 3.11: name one, e.g. make run PYTHON=python3.12" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --require-hashes -r requirements/runtime.lock
	$(BIN)/pip install --quiet --no-deps -e .
	$(BIN)/python requirements/check.py svc
	touch $@

$(TEST_STAMP): $(RUNTIME_STAMP) requirements/test.lock
	$(BIN)/pip install --quiet --require-hashes -r requirements/test.lock
	$(BIN)/pip check
	$(BIN)/python requirements/check.py 'svc[test]'
	touch $@

# The Node clients the client tests drive (tests/clients/node/package.json): the openai SDK, the
# Anthropic SDK (@anthropic-ai/sdk), the Vercel AI SDK (ai) with its providers @ai-sdk/openai,
# @ai-sdk/openai-compatible and @ai-sdk/anthropic, Claude Code (@anthropic-ai/claude-code),
# LangChain JS (@langchain/openai, @langchain/core), the OpenAI Agents SDK for JS
# (@openai/agents), the coding agents Codex CLI (@openai/codex) and opencode, and
# zod (the Vercel scripts' schemas) and gpt-tokenizer (token_counts.js). They are installed
# exactly as package-lock.json says, again only when the lock or package.json changes (the
# stamp is inside node_modules, which npm ci deletes and writes anew). Claude Code's install
# downloads a native binary of about 400 MB (its optional package for this platform, such as
# @anthropic-ai/claude-code-linux-x64): a fresh install takes that much time and disk. Codex's
# native binary comes the same way (@openai/codex-linux-x64, about 400 MB unpacked). opencode
# is pinned as its Linux x64 binary package, opencode-linux-x64 (about 180 MB; an optional
# dependency, skipped on other machines), not as opencode-ai: that package's bin/opencode is a
# placeholder its postinstall script replaces, which --ignore-scripts skips, and its optional
# packages for the other platforms cannot all be locked.
NODE_CLIENTS = tests/clients/node
$(NODE_CLIENTS)/node_modules/.installed: $(NODE_CLIENTS)/package.json $(NODE_CLIENTS)/package-lock.json
	bash tests/ensure-node.sh
	cd $(NODE_CLIENTS) && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $@

# The Python clients that cannot be installed beside test.lock (instructor and LlamaIndex's
# OpenAILike, whose openai and jiter conflict with it: requirements/clients.in), in a
# virtualenv of their own inside .venv that tests/e2e/test_client_recipes_isolated.py runs
# tests/clients/python with. It is made anew whenever requirements/clients.lock changes (so
# it holds exactly the lock; `make lock` writes it with the others) and installed by .venv's
# pip, so it has no pip of its own: it needs the runtime layer, but a newer runtime layer
# does not make it out of date (an order-only prerequisite).
CLIENTS_VENV  = $(VENV)/clients
CLIENTS_STAMP = $(CLIENTS_VENV)/clients.stamp

$(CLIENTS_STAMP): requirements/clients.lock | $(RUNTIME_STAMP)
	$(PYTHON) -m venv --clear --without-pip $(CLIENTS_VENV)
	$(BIN)/pip --python $(CLIENTS_VENV)/bin/python install --quiet --require-hashes -r requirements/clients.lock
	$(BIN)/pip --python $(CLIENTS_VENV)/bin/python check
	touch $@

# aider, which pins most of its dependencies exactly (requirements/aider.in), in a virtualenv
# of its own that tests/e2e/test_aider.py runs: made like the clients' one (about 30 s and
# 660 MB from a warm cache).
AIDER_VENV  = $(VENV)/aider
AIDER_STAMP = $(AIDER_VENV)/aider.stamp

$(AIDER_STAMP): requirements/aider.lock | $(RUNTIME_STAMP)
	$(PYTHON) -m venv --clear --without-pip $(AIDER_VENV)
	$(BIN)/pip --python $(AIDER_VENV)/bin/python install --quiet --require-hashes -r requirements/aider.lock
	$(BIN)/pip --python $(AIDER_VENV)/bin/python check
	touch $@

install-runtime: $(RUNTIME_STAMP)

install: $(TEST_STAMP) $(NODE_CLIENTS)/node_modules/.installed $(CLIENTS_STAMP) $(AIDER_STAMP)

# Refreshes requirements/test.lock, runtime.lock, sbom.lock, clients.lock, aider.lock and
# peers.lock from pyproject.toml, requirements/sbom.in, clients.in, aider.in and peers.in
# (needs the package index): after changing a dependency, `make lock` keeps every other pin;
# `make lock UPGRADE=1` moves all of them to the newest allowed versions. Commit the six locks.
# See docs/development.md.
lock:
	PYTHON=$(PYTHON) UPGRADE=$(UPGRADE) bash requirements/lock.sh

# Serves on SVC_HOST:SVC_PORT (127.0.0.1:8000 unless set): `SVC_PORT=8080 make run`.
run: install-runtime
	$(BIN)/svc serve

lint: install
	$(BIN)/ruff check app bench tests
	$(BIN)/ruff format --check app bench tests
	$(BIN)/mypy
	$(BIN)/lint-imports

# Everything `make test` checks before it runs a test: lint, types, the import contracts.
check: lint

# Rewrites the code as `make lint` wants it (formatting, then the fixable lint findings).
format: install
	$(BIN)/ruff format app bench tests
	$(BIN)/ruff check --fix app bench tests

# The console's browser tests (tests/e2e/test_console.py) drive Debian's chromium package,
# installed when missing, like PostgreSQL.
# The store tests run on SQLite and on a throwaway PostgreSQL server (Debian's package,
# installed when missing; SVC_TEST_POSTGRES_URL names a server to use instead).
# The egress-proxy tests start Debian's tinyproxy (installed when missing).
# The container tests (tests/container) build the image and run it and deploy/'s kit with
# Debian's podman (installed when missing), on a Debian base made by debootstrap; the images
# are kept in podman's store and rebuilt only when what goes into them changes.
# The fault suite (tests/faults: Redis, workers and upstreams killed under load) runs as a
# step of its own: `make faults`.
# Both steps measure the coverage of app/ ([tool.coverage] in pyproject.toml), the servers and
# workers the tests start included; the second adds to the first's data, then prints the lines
# and branches missed and fails below fail_under (docs/development.md, Coverage).
test: install lint
	bash tests/ensure-postgresql.sh
	bash tests/ensure-chromium.sh
	bash tests/ensure-tinyproxy.sh
	bash tests/ensure-nginx.sh
	bash tests/ensure-prometheus.sh
	bash tests/ensure-podman.sh
	$(BIN)/pytest -m "not faults" --cov --cov-report= --cov-fail-under=0
	$(BIN)/pytest -m faults tests/faults --cov --cov-append --cov-report=term-missing:skip-covered

faults: install
	$(BIN)/pytest -m faults tests/faults

# The soak (tests/faults/test_soak.py) alone, for SOAK_S seconds (default 10 minutes; the
# fault suite runs it for 2): mixed traffic over two instances under a chaos loop, then
# every money rule, the rollups, the activity log and the memory and descriptors over time.
SOAK_S ?= 600
soak: install
	bash tests/ensure-postgresql.sh
	SVC_SOAK_S=$(SOAK_S) $(BIN)/pytest -m faults tests/faults/test_soak.py -s

# The history-checking fault run (tests/faults/test_history.py, issue 48) at length: the
# three topologies (Sentinel without and with SVC_REDIS_MIN_REPLICAS=1, a Cluster with
# replicas) side by side, each for JEPSEN_S seconds (default 50 minutes: some 200 failovers
# each; the fault suite runs two of them for 25 s), a fault every half second, failovers
# three in four, over 36 accounts; each topology's figures are appended to JEPSEN_REPORT
# (docs/operations.md, Durability), its output to jepsen-<topology>.log.
JEPSEN_S ?= 3000
JEPSEN_REPORT ?= jepsen-report.jsonl
JEPSEN_TOPOLOGIES ?= sentinel sentinel-min-replicas-1 cluster
jepsen: install
	@failed=0; pids=; for t in $(JEPSEN_TOPOLOGIES); do \
	  SVC_HISTORY_S=$(JEPSEN_S) SVC_HISTORY_FAULT_EVERY_S=0.5 SVC_HISTORY_ACCOUNTS=36 \
	    SVC_HISTORY_FAULTS=kill,zombie,kill,zombie,kill,zombie,rollback,worker \
	    SVC_HISTORY_TOPOLOGIES=$$t SVC_HISTORY_REPORT=$(JEPSEN_REPORT) \
	    $(BIN)/pytest -m faults tests/faults/test_history.py -s -p no:cacheprovider \
	      --basetemp=.jepsen/$$t > jepsen-$$t.log 2>&1 & pids="$$pids $$!"; \
	done; \
	for p in $$pids; do wait $$p || failed=1; done; \
	tail -n 3 jepsen-*.log; exit $$failed

# Only the tests on the real 3-primary Valkey Cluster (`make test` runs them too).
test-cluster: install
	$(BIN)/pytest -k cluster

bench: install
	$(BIN)/python -m bench

# The console's screenshots in docs/console/, taken anew by its browser tests.
screenshots: install
	bash tests/ensure-chromium.sh
	SVC_CONSOLE_SCREENSHOTS=docs/console $(BIN)/pytest tests/e2e/test_console.py
