#!/usr/bin/env bash
# Makes sure Debian's podman, with runc, and debootstrap are installed: the container tests
# (tests/container) build the image from the Dockerfile on a Debian 12 base that debootstrap
# makes from Debian's archive (no image registry needed), run it, and bring deploy/'s kit up
# with podman-compose (a pinned test package). runc, not crun: crun refuses some machines'
# cgroups; tests/container/containers.conf names runc (and the rest these machines need),
# nothing outside the repository is configured. netavark with aardvark-dns: the kit's bridge
# networks and their name resolution. Does nothing when all of it is there already.
set -euo pipefail

have_all() {
    command -v podman >/dev/null && command -v runc >/dev/null &&
        { command -v debootstrap || [ -x /usr/sbin/debootstrap ]; } >/dev/null &&
        [ -x /usr/lib/podman/netavark ] && [ -x /usr/lib/podman/aardvark-dns ]
}

if have_all; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "ensure-podman: podman, runc, netavark, aardvark-dns or debootstrap is missing." >&2
    echo "  Install them as root: apt-get install --no-install-recommends podman runc" >&2
    echo "  netavark aardvark-dns iptables debootstrap" >&2
    exit 1
fi
echo "ensure-podman: installing Debian's podman, runc and debootstrap for the container tests" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
    podman runc netavark aardvark-dns iptables debootstrap >/dev/null
have_all
