#!/usr/bin/env bash
# Makes sure Debian's tinyproxy is installed: the egress-proxy tests (the upstream client's
# CONNECT tunnels, webhook deliveries, a real server behind HTTPS_PROXY) start one of their
# own on a free port of 127.0.0.1 (see tests/support/forward_proxy.py). Only the binary package
# (`tinyproxy-bin`): no system service is set up. Does nothing when it is there already.
set -euo pipefail

if command -v tinyproxy >/dev/null || [ -x /usr/bin/tinyproxy ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "ensure-tinyproxy: no tinyproxy on PATH." >&2
    echo "  Install it as root (apt-get install --no-install-recommends tinyproxy-bin)." >&2
    exit 1
fi
echo "ensure-tinyproxy: installing Debian's tinyproxy-bin package for the egress-proxy tests" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends tinyproxy-bin >/dev/null
command -v tinyproxy >/dev/null || [ -x /usr/bin/tinyproxy ]
