"""The data folder's files (``SVC_DATA_DIR``): the secrets svc generates there on first use
(the admin token, the key pepper), the private files it writes (the dev key), whether a
deployment makes svc write there at all, and an ``OSError`` met there as a start-up error
that names the folder, the file and the way out.

``app.ops.resolve.resolve`` prepares the folder through ``prepare_data_dir`` before anything
else opens a file there; the files' modes are ``app.core.private_files``'s.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path

from app.core.errors import StartupError
from app.core.private_files import PRIVATE_FILE_MODE, make_private, private_folder
from app.core.settings import MIN_ADMIN_TOKEN_CHARS, Settings

DEV_KEY_FILE = "dev-key.txt"  # the dev mode's first key (``app.runtime.bootstrap_dev``)
ADMIN_TOKEN_FILE = "admin-token.txt"
KEY_PEPPER_FILE = "key-pepper.txt"


def prepare_data_dir(settings: Settings, data_dir: Path) -> tuple[str, str]:
    """The data folder made ready for a start (created, private, and checked writable when
    svc writes there), and the admin token and key pepper: the settings', else its files'
    (generated on first use). An ``OSError`` there is a ``StartupError`` (``data_dir_errors``)."""
    with data_dir_errors(data_dir):
        private_folder(data_dir)
        if writes_data_dir(settings):
            with tempfile.TemporaryFile(dir=data_dir):
                pass  # svc can write there: fail now, before Valkey or SQLite would
        admin_token = settings.admin_token or admin_token_file(data_dir / ADMIN_TOKEN_FILE)
        key_pepper = settings.key_pepper or read_or_create_secret(data_dir / KEY_PEPPER_FILE)
    return admin_token, key_pepper


def read_or_create_secret(path: Path) -> str:
    """A secret kept in a 0600 file, generated on first use (an older file is made 0600)."""
    if path.exists():
        make_private(path)
        return path.read_text().strip()
    private_folder(path.parent)
    value = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    with os.fdopen(fd, "w") as fh:
        fh.write(value + "\n")
    return value


def admin_token_file(path: Path) -> str:
    """The admin token kept in ``path`` (generated on first use), held to the setting's
    MIN_ADMIN_TOKEN_CHARS: an operator may have written a short one there by hand."""
    token = read_or_create_secret(path)
    if len(token) < MIN_ADMIN_TOKEN_CHARS:
        raise StartupError(  # the length only: the token is never repeated
            f"the admin token in {path} has {len(token)} characters, at least "
            f"{MIN_ADMIN_TOKEN_CHARS} characters are needed. Write a longer one there, delete "
            "the file to have one generated, or set SVC_ADMIN_TOKEN"
        )
    return token


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read (mode 0600)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(path, PRIVATE_FILE_MODE)  # an existing file keeps its mode through os.open


def writes_data_dir(settings: Settings) -> bool:
    """Whether svc writes into the data folder: the embedded Valkey, SQLite, a generated
    secret or the dev key live there. A deployment that sets them all elsewhere may give
    svc a read-only one."""
    configured = (
        settings.redis_url or settings.redis_sentinels,
        settings.database_url,
        settings.admin_token,
        settings.key_pepper,
    )
    return not all(configured) or bool(settings.dev_bootstrap)


@contextlib.contextmanager
def data_dir_errors(data_dir: Path) -> Iterator[None]:
    """An ``OSError`` met in the data folder as a ``StartupError`` that names the folder,
    the file and the way out."""
    try:
        yield
    except OSError as exc:
        raise StartupError(data_dir_message(data_dir, exc)) from exc


def data_dir_message(data_dir: Path, exc: OSError) -> str:
    """What went wrong in the data folder, where, and what to do about it."""
    reason = exc.strerror or str(exc)
    if exc.filename and Path(exc.filename) != data_dir:
        reason = f"{exc.filename}: {reason}"
    return (
        f"the data directory {data_dir} cannot be used ({reason}). Make it a directory this "
        f"user (uid {os.geteuid()}) can write, or set SVC_DATA_DIR to one"
    )
