"""podman for the container tests (tests/container).

Every podman (and podman-compose) they run reads the repository's own
tests/container/containers.conf, nothing of the machine's. Their images are built once and
kept in podman's store under a tag that is a digest of what went into them: a second run
with the same inputs builds nothing. The base of every image is Debian 12 made by
``debootstrap`` from the Debian archive apt uses here (no image registry is needed), kept as
a tarball under ~/.cache/svc-tests as well. podman runs healthchecks from systemd timers;
a machine without systemd runs none, so ``wait_healthy`` runs them itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTAINERS_CONF = ROOT / "tests" / "container" / "containers.conf"
ENV = {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "svc-tests"

# What the base holds: Debian 12 (whose python3 is 3.11, as the locks are written for), the
# smallest variant, and what the Dockerfile needs of it.
BASE_SUITE = "bookworm"
BASE_VARIANT = "minbase"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
# The CA bundle of this machine, and where Debian's ca-certificates (the base's) keeps it.
DEBIAN_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
HOST_CA_BUNDLE = Path(os.environ.get("SSL_CERT_FILE") or DEBIAN_CA_BUNDLE)
# A test that builds the images may take this long when nothing is cached (about six
# minutes on a 2-core machine).
BUILD_TIMEOUT_S = 1800
# An image another build made is removed only once it is this old (and unused): another
# worktree's session may be about to run the image it built.
STALE_S = 2 * 3600


def podman(
    *args: str, timeout: float = 120, check: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run podman with the tests' configuration; its output as text."""
    done = subprocess.run(
        ["podman", *args], env=ENV, capture_output=True, text=True, timeout=timeout
    )
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done


def require_podman() -> None:
    """Skips the test, saying why, when podman cannot run here; fails instead on CI, where
    ``make test`` installs it (tests/ensure-podman.sh)."""
    if shutil.which("podman") is None:
        reason = "no podman on PATH (make test installs it: tests/ensure-podman.sh)"
    elif os.geteuid() != 0:
        reason = "the container tests run podman as root (rootless podman needs subuids)"
    else:
        info = podman("info", timeout=60)
        if info.returncode == 0:
            return
        reason = "podman info failed: " + (info.stderr or info.stdout).strip()[-300:]
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def image_exists(tag: str) -> bool:
    return podman("image", "exists", tag).returncode == 0


def digest(parts: Iterable[bytes]) -> str:
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(hashlib.sha256(part).digest())
    return hasher.hexdigest()[:16]


def files_digest(paths: Iterable[Path], *extra: str) -> str:
    """A digest of the files under ``paths`` (names and contents; bytecode left out, as
    .dockerignore leaves it out of the builds) and of ``extra``."""
    files = sorted(
        f
        for path in paths
        for f in ([path] if path.is_file() else path.rglob("*"))
        if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc"
    )
    return digest(
        [*(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes() for f in files)]
        + [e.encode() for e in extra]
    )


def debian_mirror(suite: str = BASE_SUITE) -> str:
    """The Debian archive apt is set up to read for ``suite`` here."""
    listed = subprocess.run(
        ["apt-get", "indextargets", "--format", "$(REPO_URI) $(RELEASE)"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split("\n")
    for line in listed:
        fields = line.split()
        if len(fields) >= 2 and fields[1] == suite:
            return fields[0]
    raise AssertionError(f"apt reads no archive of Debian {suite} here (apt-get indextargets)")


def base_image() -> str:
    """The tag of the Debian base image (``podman import`` of a debootstrap tree), imported
    from the cached tarball, or made first."""
    key = digest([json.dumps([BASE_SUITE, BASE_VARIANT, BASE_PACKAGES]).encode()])
    tag = f"localhost/svc-test-base:{key}"
    if image_exists(tag):
        return tag
    tarball = CACHE / f"debian-{BASE_SUITE}-{key}.tar"
    if not tarball.exists():
        _debootstrap(tarball)
    podman("import", str(tarball), tag, timeout=300, check=True)
    return tag


def _debootstrap(tarball: Path) -> None:
    tarball.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=tarball.parent) as work:
        tree = Path(work) / "root"
        command = [
            "debootstrap", f"--variant={BASE_VARIANT}", f"--include={','.join(BASE_PACKAGES)}",
            BASE_SUITE, str(tree), debian_mirror(),
        ]  # fmt: skip
        made = subprocess.run(command, capture_output=True, text=True, timeout=1200)
        assert made.returncode == 0, f"{' '.join(command)} failed:\n{made.stdout[-3000:]}"
        # the packages' downloads and the archive's lists: an image's apt-get update fetches
        # its own
        for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (tree / leftover).glob("*"):
                if entry.is_file():
                    entry.unlink()
        partial = Path(work) / "base.tar"
        subprocess.run(["tar", "-C", str(tree), "-cf", str(partial), "."], check=True)
        partial.rename(tarball)


def build(
    repository: str,
    key: str,
    *,
    containerfile: Path,
    context: Path = ROOT,
    build_args: dict[str, str] | None = None,
) -> str:
    """``localhost/REPOSITORY:KEY``, built from ``containerfile`` unless podman's store
    has it; older builds of the repository are removed once stale and unused. The build's
    steps trust the certificate authorities this machine trusts (those of a proxy that
    inspects TLS, say): its CA bundle is mounted over the image's while they run, and
    nothing of it stays in the image."""
    tag = f"localhost/{repository}:{key}"
    if image_exists(tag):
        return tag
    args = [f"--build-arg={name}={value}" for name, value in (build_args or {}).items()]
    if HOST_CA_BUNDLE.is_file():
        args.append(f"--volume={HOST_CA_BUNDLE}:{DEBIAN_CA_BUNDLE}:ro")
    # the Docker format keeps HEALTHCHECK (the OCI format has no field for it)
    podman(
        "build", "--format=docker", "--layers", f"--tag={tag}", f"--file={containerfile}",
        *args, str(context), timeout=BUILD_TIMEOUT_S, check=True,
    )  # fmt: skip
    _remove_stale(repository, keep=tag)
    return tag


def _remove_stale(repository: str, keep: str) -> None:
    listed = podman("images", "--format", "{{.Repository}}:{{.Tag}}", f"localhost/{repository}")
    for tag in set(listed.stdout.split()) - {keep}:
        created = podman("image", "inspect", "--format", "{{.Created.Unix}}", tag).stdout.strip()
        if created.isdigit() and time.time() - int(created) > STALE_S:
            podman("rmi", tag)  # refused while a container uses it


def wait_healthy(containers: Sequence[str], within_s: float) -> None:
    """Run each container's healthcheck until it passes (podman's own runs, from systemd
    timers, do not happen without systemd); each run is recorded in the container's health
    state as the timer's would be. Fails with the last lines of their logs after
    ``within_s``."""
    deadline = time.monotonic() + within_s
    waiting = list(containers)
    while True:
        waiting = [c for c in waiting if podman("healthcheck", "run", c).returncode != 0]
        if not waiting:
            return
        if time.monotonic() > deadline:
            logs = {c: podman("logs", "--tail=20", c).stderr[-2000:] for c in waiting}
            raise AssertionError(f"not healthy within {within_s} s: {logs}")
        time.sleep(0.5)


def health(container: str) -> str:
    """The container's health: starting, healthy or unhealthy ("" without a healthcheck)."""
    return podman("inspect", "--format", "{{.State.Health.Status}}", container).stdout.strip()
