#!/usr/bin/env bash
# Makes sure a headless Chromium is installed for the console's browser tests
# (tests/e2e/test_console.py drives it with Playwright's Python driver): Debian's `chromium`
# package, whose version Debian pins per release (Playwright cannot download browsers on
# machines without the internet). Does nothing when it is there already, or when
# SVC_TEST_CHROMIUM names a Chromium binary to use instead.
set -euo pipefail

if [ -n "${SVC_TEST_CHROMIUM:-}" ] || command -v chromium >/dev/null; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "ensure-chromium: no chromium on PATH." >&2
    echo "  Install it as root (apt-get install --no-install-recommends chromium)," >&2
    echo "  or set SVC_TEST_CHROMIUM=/path/to/chromium." >&2
    exit 1
fi
echo "ensure-chromium: installing Debian's chromium package for the console's browser tests" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
command -v chromium >/dev/null
