#!/usr/bin/env bash
# Makes sure Debian's nginx is installed: the balancer test (tests/e2e/test_balancer.py) starts
# one of its own, in the foreground, on a free port of 127.0.0.1, with deploy/nginx/svc.conf
# in front of two svc instances. Only the `nginx` package (the server with its built-in
# modules, whose version Debian pins per release), not the `nginx-core`/`nginx-full`
# flavours with their extra modules. No system service is started: Debian's policy-rc.d is
# put in place for the install when none is there, so the package's own nginx does not take
# port 80. Does nothing when nginx is there already, or when SVC_TEST_NGINX names a binary
# to use instead.
set -euo pipefail

have_nginx() { command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]; }

if [ -n "${SVC_TEST_NGINX:-}" ] || have_nginx; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "ensure-nginx: no nginx on PATH or in /usr/sbin." >&2
    echo "  Install it as root (apt-get install --no-install-recommends nginx)," >&2
    echo "  or set SVC_TEST_NGINX=/path/to/nginx." >&2
    exit 1
fi
echo "ensure-nginx: installing Debian's nginx package for the balancer test" >&2
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    # 101: "action forbidden"; invoke-rc.d then starts no service during the install
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 0755 "$policy"
    trap 'rm -f "$policy"' EXIT
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends nginx >/dev/null
have_nginx
