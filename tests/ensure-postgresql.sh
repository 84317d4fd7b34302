#!/usr/bin/env bash
# Makes sure the PostgreSQL server binaries (initdb, pg_ctl) from Debian's `postgresql`
# package are installed: the store tests start a throwaway server with them (see
# tests/support/postgres.py). Does nothing when they are there already, or when
# SVC_TEST_POSTGRES_URL names a server for the tests to use instead.
set -euo pipefail

have_initdb() { compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; }

if [ -n "${SVC_TEST_POSTGRES_URL:-}" ] || have_initdb; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "ensure-postgresql: no PostgreSQL server under /usr/lib/postgresql/*/bin." >&2
    echo "  Install it as root (apt-get install --no-install-recommends postgresql)," >&2
    echo "  or set SVC_TEST_POSTGRES_URL=postgresql://user:pass@host:5432/db (CREATEDB role)." >&2
    exit 1
fi
echo "ensure-postgresql: installing Debian's postgresql package for the store tests" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends postgresql >/dev/null
if ! have_initdb; then
    echo "ensure-postgresql: postgresql installed, but no initdb under /usr/lib/postgresql" >&2
    exit 1
fi
