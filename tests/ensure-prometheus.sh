#!/usr/bin/env bash
# Makes sure Debian's prometheus package is installed: it ships both binaries the alerting
# tests need. `promtool` checks deploy/prometheus/rules/ and runs their unit tests
# (deploy/prometheus/tests/, from tests/unit/test_prometheus_rules.py); `prometheus` itself
# is started by tests/e2e/test_prometheus_scrape.py on a free port of 127.0.0.1, with a
# configuration and a storage folder of its own, to scrape a real svc and evaluate the rules.
# Only the package, without its recommended node exporter. No system service is started:
# Debian's policy-rc.d is put in place for the install when none is there, so the package's
# own Prometheus does not take port 9090. Does nothing when both binaries are there already,
# or when SVC_TEST_PROMETHEUS names a folder holding both to use instead.
set -euo pipefail

have_prometheus() {
    { command -v promtool || [ -x /usr/bin/promtool ]; } >/dev/null &&
        { command -v prometheus || [ -x /usr/bin/prometheus ]; } >/dev/null
}

if [ -n "${SVC_TEST_PROMETHEUS:-}" ] || have_prometheus; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "ensure-prometheus: no promtool and prometheus on PATH." >&2
    echo "  Install them as root (apt-get install --no-install-recommends prometheus)," >&2
    echo "  or set SVC_TEST_PROMETHEUS=/folder/holding/both." >&2
    exit 1
fi
echo "ensure-prometheus: installing Debian's prometheus package for the alerting tests" >&2
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    # 101: "action forbidden"; invoke-rc.d then starts no service during the install
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 0755 "$policy"
    trap 'rm -f "$policy"' EXIT
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends prometheus >/dev/null
have_prometheus
