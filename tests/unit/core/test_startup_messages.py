"""What ``svc serve`` says when it cannot start: each failure as one or two lines (what
failed and where, then the fix), the traceback only under ``SVC_LOG_LEVEL=DEBUG``."""

from __future__ import annotations

import argparse
import errno
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cli import (
    CANNOT_START,
    admob_left_off,
    cannot_start,
    check_port,
    failure_lines,
    granian_failure,
    one_line,
    port_message,
    serve_settings,
)
from app.core.data_dir import data_dir_message, writes_data_dir
from app.core.errors import (
    ConfigError,
    ModelsFileError,
    SettingsError,
    StartupError,
    StoreError,
)
from app.core.settings import Settings
from app.kv.client import open_redis
from app.kv.startup_checks import check_redis_answers, where
from app.ops.resolve import resolve
from app.runtime import load_models, short_pools
from tests.support.processes import free_port

RUST_ERROR = (
    "Address already in use (os error 98)\n\nStack backtrace:\n   0: <unknown>\n"
    "   1: method_vectorcall_NOARGS\n             at Objects/descrobject.c:453:24\n"
)


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port another process listens on (a plain server: ``SO_REUSEADDR`` only)."""
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", port := free_port()))
        holder.listen()
        yield port


# --- the lines -------------------------------------------------------------------------


def test_a_config_error_is_one_line_saying_what_where_and_how() -> None:
    exc = StartupError("127.0.0.1:8000 is in use: another process listens there. Stop it")
    assert failure_lines(exc) == [
        "svc: cannot start: 127.0.0.1:8000 is in use: another process listens there. Stop it"
    ]


@pytest.mark.parametrize(
    ("exc", "fix"),
    [
        (ModelsFileError("models.toml: unknown section (at line 3)"), "SVC_MODELS_FILE"),
        (StoreError("postgresql (db:5432/svc): connection refused"), "SVC_DATABASE_URL"),
    ],
)
def test_a_message_without_its_fix_gets_a_second_line_with_it(exc: Exception, fix: str) -> None:
    what, how = failure_lines(exc)
    assert what == f"svc: cannot start: {exc}"
    assert how.startswith("svc: ")
    assert fix in how


def test_an_unknown_failure_names_its_type_and_where_the_traceback_is() -> None:
    what, how = failure_lines(KeyError("boom"))
    assert what == "svc: cannot start: KeyError: 'boom'"
    assert "SVC_LOG_LEVEL=DEBUG" in how


def test_a_message_is_one_line_without_rust_backtrace_or_closing_stop() -> None:
    assert one_line(RuntimeError(RUST_ERROR)) == "Address already in use (os error 98)"
    assert one_line(StoreError("refused\n\tIs the server running?.")) == (
        "refused Is the server running?"
    )
    long = one_line(ValueError("x" * 5000))
    assert len(long) == 600
    assert long.endswith("…")


def test_the_traceback_is_printed_only_under_debug(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        raise StartupError("Redis at redis://cache:6379 does not answer") from OSError(111)
    except StartupError as exc:
        failure = exc
    monkeypatch.delenv("SVC_LOG_LEVEL", raising=False)
    assert cannot_start(failure) == CANNOT_START == 2
    quiet = capsys.readouterr()
    assert quiet.out == ""
    assert quiet.err.splitlines() == [
        "svc: cannot start: Redis at redis://cache:6379 does not answer"
    ]
    monkeypatch.setenv("SVC_LOG_LEVEL", "debug")
    assert cannot_start(failure) == 2
    loud = capsys.readouterr().err.splitlines()
    assert loud[0] == "OSError: 111"  # the cause first, then the failure's own traceback
    assert "Traceback (most recent call last):" in loud
    assert loud[-1] == "svc: cannot start: Redis at redis://cache:6379 does not answer"


# --- the port --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (errno.EADDRINUSE, ["is in use", "SVC_PORT", "--port"]),
        (errno.EACCES, ["permission denied", "1024"]),
        (errno.EADDRNOTAVAIL, ["SVC_HOST", "0.0.0.0"]),
        (errno.EINVAL, ["Invalid argument", "SVC_HOST and SVC_PORT"]),
    ],
)
def test_each_reason_a_port_cannot_be_had_names_its_fix(code: int, words: list[str]) -> None:
    message = port_message("::1", 8000, OSError(code, "Invalid argument"))
    assert "[::1]:8000" in message
    assert all(word in message for word in words), message


def test_a_free_port_passes_the_check() -> None:
    check_port("127.0.0.1", free_port())


def test_a_port_another_process_listens_on_is_refused(held_port: int) -> None:
    with pytest.raises(StartupError, match=f"127.0.0.1:{held_port} is in use"):
        check_port("127.0.0.1", held_port)


def test_a_port_another_granian_shares_is_refused_too() -> None:
    """granian binds with SO_REUSEPORT, which lets a second server of the same user bind
    the port as well: the check does not, so two servers never split one port."""
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        other.bind(("127.0.0.1", port := free_port()))
        other.listen()
        with pytest.raises(StartupError, match="is in use"):
            check_port("127.0.0.1", port)


def test_a_host_name_is_a_settings_error() -> None:
    with pytest.raises(SettingsError, match="SVC_HOST='localhost' is not an IP address"):
        check_port("localhost", 8000)


def test_granians_own_bind_failure_is_worded_like_the_check() -> None:
    failure = granian_failure(RuntimeError(RUST_ERROR), "0.0.0.0", 8000)
    assert str(failure).startswith("0.0.0.0:8000 is in use")
    assert isinstance(failure.__cause__, RuntimeError)
    other = granian_failure(RuntimeError("invalid backlog"), "127.0.0.1", 8000)
    assert str(other) == "granian could not start on 127.0.0.1:8000: invalid backlog"


# --- settings --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {"SVC_PORT": "abc"},
            "invalid SVC_* setting: SVC_PORT='abc': expected `int`. Correct it, or unset it "
            "to use the default (8000)",
        ),
        ({"SVC_PORT": "70000"}, "SVC_PORT='70000': expected `int` <= 65535"),
        ({"SVC_WORKERS": "-2"}, "SVC_WORKERS='-2': expected `int` >= 0"),
        ({"SVC_LOG_LEVEL": "loud"}, "SVC_LOG_LEVEL='loud': not a log level"),
        ({"SVC_ALLOW_EVICTING_REDIS": "maybe"}, "use the default (false)"),
        ({"SVC_NON_STREAMING": "never"}, "SVC_NON_STREAMING='never'"),
        ({"SVC_NON_STREAMING": "Refuse"}, "use the default (stream)"),
        (
            {"SVC_DEV_BOOTSTRAP": "maybe"},
            "`bool | null`. Correct it, or unset it to use the default",
        ),
    ],
)
def test_an_invalid_variable_is_named_with_its_value_and_default(
    env: dict[str, str], expected: str
) -> None:
    with pytest.raises(ValueError) as refused:
        Settings.from_env(env)
    assert expected in str(refused.value)
    args = argparse.Namespace(host=None, port=None, workers=None)
    with pytest.raises(SettingsError) as in_serve:  # svc serve's: a ConfigError
        serve_settings(args, env)
    assert str(in_serve.value) == str(refused.value)


def test_a_log_level_in_any_case_is_accepted() -> None:
    assert Settings.from_env({"SVC_LOG_LEVEL": "debug"}).log_level == "debug"


def test_serve_options_are_checked_as_their_variables() -> None:
    args = argparse.Namespace(host=None, port=0, workers=None)
    with pytest.raises(SettingsError, match="SVC_PORT='0'"):
        serve_settings(args, {"SVC_PORT": "9000"})
    args.port = 9001
    assert serve_settings(args, {"SVC_PORT": "9000"}).port == 9001


# --- the data folder and the models file -----------------------------------------------


def test_a_data_dir_under_a_file_names_the_folder_and_the_variable(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    settings = Settings(data_dir=str(tmp_path / "file" / "data"), redis_url="redis://x:1")
    with pytest.raises(StartupError) as refused:
        resolve(settings)
    message = str(refused.value)
    assert f"{tmp_path / 'file' / 'data'} cannot be used (Not a directory)" in message
    assert "SVC_DATA_DIR" in message


def test_the_data_dir_message_names_the_file_when_it_is_not_the_folder() -> None:
    folder = Path("/var/lib/svc")
    denied = OSError(errno.EACCES, "Permission denied", "/var/lib/svc/key-pepper.txt")
    message = data_dir_message(folder, denied)
    assert "(/var/lib/svc/key-pepper.txt: Permission denied)" in message
    assert "can write, or set SVC_DATA_DIR" in message


def test_a_data_dir_only_read_is_fine_when_everything_lives_elsewhere() -> None:
    elsewhere = Settings(
        redis_url="redis://r:6379",
        database_url="postgresql://db/svc",
        admin_token="a",
        key_pepper="p",
        dev_bootstrap=False,
    )
    assert not writes_data_dir(elsewhere)
    assert writes_data_dir(Settings())
    assert writes_data_dir(Settings(redis_url="redis://r:6379"))  # SQLite, secrets


def test_a_missing_models_file_is_a_models_file_error(tmp_path: Path) -> None:
    missing = tmp_path / "models.toml"
    with pytest.raises(ModelsFileError, match=r"models\.toml: cannot read it"):
        load_models(Settings(models_file=str(missing)))
    assert "svc-fast" in load_models(Settings()).aliases


def test_a_provider_pool_smaller_than_a_worker_s_streams_is_named(tmp_path: Path) -> None:
    """`svc serve` warns about each: past its bound a stream waits for a connection."""
    models = tmp_path / "models.toml"
    models.write_text(
        '[providers.small]\nbase_url = "http://127.0.0.1:9/v1"\nmax_connections = 1000\n'
        '[providers.large]\nbase_url = "http://127.0.0.1:9/v1"\n'
        '[aliases.svc-fast]\nupstreams = [{ provider = "small", model = "m" }]\n'
        '[aliases.svc-code]\nupstreams = [{ provider = "large", model = "m" }]\n'
    )
    catalog = load_models(Settings(models_file=str(models)))
    assert short_pools(catalog, 2048) == {"small": 1000}  # the default 4,096 holds 2,048
    assert short_pools(catalog, 8192) == {"small": 1000, "large": 4096}
    assert short_pools(catalog, 1000) == {}


def test_a_keys_url_without_ad_units_is_named() -> None:
    """`svc serve` warns: AdMob callbacks are off (404) until the ad units are listed."""
    url = {"SVC_ADMOB_KEYS_URL": "file:///srv/admob-keys.json"}
    assert admob_left_off(Settings(), url)
    assert admob_left_off(Settings(admob_ad_units=" , "), url)
    assert not admob_left_off(Settings(admob_ad_units="2747237135"), url)
    assert not admob_left_off(Settings(), {})  # AdMob not meant: the route is quietly off


# --- Redis -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://svc:hunter2@cache:6379/0?password=x", "redis://cache:6379/0"),
        ("rediss://:hunter2@[::1]:6380", "rediss://[::1]:6380"),
        ("unix:///var/run/valkey.sock?password=x", "unix:///var/run/valkey.sock"),
    ],
)
def test_a_redis_url_is_shown_without_credentials(url: str, shown: str) -> None:
    assert where(url) == shown


async def test_a_redis_that_does_not_answer_is_a_startup_error() -> None:
    url = f"redis://svc:hunter2@127.0.0.1:{free_port()}/0"
    redis = open_redis(Settings(redis_url=url, redis_timeout_s=1.0), 1)
    try:
        with pytest.raises(StartupError) as refused:
            await check_redis_answers(redis, url)
    finally:
        await redis.aclose()
    message = str(refused.value)
    assert message.startswith(f"Redis at {where(url)} did not answer or refused svc (")
    assert "SVC_REDIS_URL" in message
    assert "hunter2" not in message
    assert isinstance(refused.value, ConfigError)
