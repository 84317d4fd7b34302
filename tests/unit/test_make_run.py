"""`make run` installs only what serving needs, `make test` the rest on top.

The Makefile installs .venv in two layers (requirements/runtime.lock and svc, then
requirements/test.lock): these tests read what make would do (`make -n`, nothing is installed)
on a fresh machine and after each kind of change, and check that runtime.lock holds exactly
svc's runtime dependencies. tests/e2e/test_make_run.py builds the runtime layer for real.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from importlib.metadata import PackageNotFoundError, requires
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_LOCK = ROOT / "requirements" / "runtime.lock"
TEST_LOCK = ROOT / "requirements" / "test.lock"
NODE_CLIENTS = Path("tests/clients/node")

# What the Makefile reads to decide what is out of date.
INPUTS = [
    Path("Makefile"),
    Path("pyproject.toml"),
    Path("requirements/runtime.lock"),
    Path("requirements/test.lock"),
    Path("requirements/clients.lock"),
    Path("requirements/aider.lock"),
    NODE_CLIENTS / "package.json",
    NODE_CLIENTS / "package-lock.json",
]
# Only test tooling: none of it may reach `make run`'s steps.
TEST_ONLY = ("test.lock", "npm", "node", "ensure-", "apt-get", "pytest", "ruff", "mypy")

# The platform the locks are written for (requirements/lock.sh): CPython 3.11 on Linux x86_64.
# uv resolves `--python-version 3.11` for 3.11.0, so a marker such as
# python_full_version < "3.11.3" holds.
LOCK_PLATFORM = {
    "python_version": "3.11",
    "python_full_version": "3.11.0",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
}


def make(*args: str, cwd: Path = ROOT) -> list[str]:
    """The commands `make -n ARGS` would run in CWD, one per line (continuations joined), with
    a VENV=path argument written as "$VENV"."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    text = done.stdout.replace("\\\n", " ")
    for arg in args:
        if arg.startswith("VENV="):
            text = text.replace(arg.removeprefix("VENV="), "$VENV")
    return text.splitlines()


def installs(steps: list[str]) -> list[str]:
    """Which locks the steps install from, in order: "runtime", "test", "node", "clients",
    "aider"."""
    found = []
    for step in steps:
        if m := re.search(r"-r requirements/(runtime|test|clients|aider)\.lock", step):
            found.append(m.group(1))
        elif "npm ci" in step:
            found.append("node")
    return found


needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="no make on PATH")


# --- What a fresh machine gets ---------------------------------------------------------------


@needs_make
def test_make_run_installs_the_runtime_lock_and_svc_only(tmp_path: Path) -> None:
    steps = make("-B", "run", f"VENV={tmp_path / 'venv'}")
    assert installs(steps) == ["runtime"]
    assert any("pip install" in s and "--no-deps -e ." in s for s in steps)
    assert steps[-1].endswith("/bin/svc serve")
    leaks = [s for s in steps for word in TEST_ONLY if word in s]
    assert not leaks, f"`make run` runs test tooling: {leaks}"


@needs_make
def test_make_test_adds_the_test_lock_and_the_node_clients_then_runs_every_step(
    tmp_path: Path,
) -> None:
    steps = make("-B", "test", f"VENV={tmp_path / 'venv'}")
    assert installs(steps) == ["runtime", "test", "node", "clients", "aider"]
    text = "\n".join(steps)
    for step in (
        "pip check",
        "check.py 'svc[test]'",
        "bash tests/ensure-node.sh",
        "/bin/ruff check app bench tests",
        "/bin/ruff format --check app bench tests",
        "/bin/mypy",
        "/bin/lint-imports",
        "bash tests/ensure-postgresql.sh",
        "bash tests/ensure-chromium.sh",
        "bash tests/ensure-tinyproxy.sh",
        "bash tests/ensure-nginx.sh",
        "bash tests/ensure-prometheus.sh",
        "bash tests/ensure-podman.sh",
        '/bin/pytest -m "not faults" --cov',
        "/bin/pytest -m faults tests/faults --cov --cov-append",
    ):
        assert step in text, step


# --- What a machine that has run one of them gets -------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of what the Makefile reads, every input written at one time."""
    for path in INPUTS:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / path, tmp_path / path)
        os.utime(tmp_path / path, (1_000_000, 1_000_000))
    (tmp_path / ".venv").mkdir()
    return tmp_path


def stamp(tree: Path, *layers: str) -> None:
    """Marks layers as installed after the inputs were written."""
    paths = {
        "runtime": tree / ".venv" / "runtime.stamp",
        "test": tree / ".venv" / "test.stamp",
        "node": tree / NODE_CLIENTS / "node_modules" / ".installed",
        "clients": tree / ".venv" / "clients" / "clients.stamp",
        "aider": tree / ".venv" / "aider" / "aider.stamp",
    }
    for layer in layers:
        paths[layer].parent.mkdir(parents=True, exist_ok=True)
        paths[layer].touch()
        os.utime(paths[layer], (2_000_000, 2_000_000))


def change(tree: Path, path: str) -> None:
    os.utime(tree / path, (3_000_000, 3_000_000))


@needs_make
def test_make_run_after_make_test_installs_nothing(tree: Path) -> None:
    stamp(tree, "runtime", "test", "node", "clients", "aider")
    assert installs(make("run", cwd=tree)) == []
    assert installs(make("install", cwd=tree)) == []


@needs_make
def test_make_test_after_make_run_adds_only_the_test_layer(tree: Path) -> None:
    stamp(tree, "runtime")
    assert installs(make("run", cwd=tree)) == []
    assert installs(make("install", cwd=tree)) == ["test", "node", "clients", "aider"]


@pytest.mark.parametrize(
    ("changed", "for_run", "for_test"),
    [
        ("requirements/runtime.lock", ["runtime"], ["runtime", "test"]),
        ("pyproject.toml", ["runtime"], ["runtime", "test"]),
        ("requirements/test.lock", [], ["test"]),
        ("tests/clients/node/package-lock.json", [], ["node"]),
        ("requirements/clients.lock", [], ["clients"]),
        ("requirements/aider.lock", [], ["aider"]),
    ],
)
@needs_make
def test_a_changed_lock_refreshes_the_layers_built_on_it(
    tree: Path, changed: str, for_run: list[str], for_test: list[str]
) -> None:
    stamp(tree, "runtime", "test", "node", "clients", "aider")
    change(tree, changed)
    assert installs(make("run", cwd=tree)) == for_run
    assert installs(make("install", cwd=tree)) == for_test


# --- The runtime lock against pyproject.toml -------------------------------------------------


def pins(lock: Path) -> dict[str, str]:
    """A lock's packages (canonical names) and their pinned versions."""
    found = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", lock.read_text(), re.MULTILINE)
    return {canonicalize_name(name): version for name, version in found}


def dependency_tree(top: str) -> set[str]:
    """Every package TOP needs on the locks' platform, itself excluded (extras followed), read
    from the metadata of the packages installed here (.venv holds test.lock, a superset)."""
    needed: set[str] = set()
    todo = [(top, "")]
    seen: set[tuple[str, str]] = set()
    while todo:
        name, extra = todo.pop()
        if (canonicalize_name(name), extra) in seen:
            continue
        seen.add((canonicalize_name(name), extra))
        try:
            lines = requires(name) or []
        except PackageNotFoundError:
            continue  # reported below: not in the lock
        for line in lines:
            req = Requirement(line)
            if req.marker and not req.marker.evaluate({**LOCK_PLATFORM, "extra": extra}):
                continue
            needed.add(canonicalize_name(req.name))
            todo.extend((req.name, e) for e in ("", *req.extras))
    return needed - {canonicalize_name(top)}


def test_the_runtime_lock_holds_exactly_svcs_runtime_dependencies() -> None:
    runtime, test = pins(RUNTIME_LOCK), pins(TEST_LOCK)
    needed = dependency_tree("svc")
    assert set(runtime) == needed, (
        f"missing: {sorted(needed - set(runtime))}, not needed: {sorted(set(runtime) - needed)}"
        " (run `make lock`)"
    )
    moved = {name: (v, test.get(name)) for name, v in runtime.items() if test.get(name) != v}
    assert not moved, f"runtime.lock and test.lock pin these differently: {moved}"
    for tool in ("pytest", "ruff", "mypy", "coverage", "openai", "playwright"):
        assert tool not in runtime
