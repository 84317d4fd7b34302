#!/usr/bin/env bash
# Makes sure `node` and `npm` are installed: the client tests (tests/e2e/test_clients.py) run
# the Node clients in tests/clients/node with them. Does nothing when both are there (CI's
# machines have Node 20); otherwise installs Debian's `nodejs` and `npm` packages (Node 18 on
# bookworm, which the pinned clients accept too).
set -euo pipefail

if command -v node >/dev/null && command -v npm >/dev/null; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "ensure-node: no node/npm on PATH." >&2
    echo "  Install Node.js 20 or later, or as root: apt-get install nodejs npm" >&2
    exit 1
fi
echo "ensure-node: installing Debian's nodejs and npm packages for the client tests" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
node --version >&2
