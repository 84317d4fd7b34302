"""A throwaway PostgreSQL server for the store tests: one database per session, emptied
before each test (a new ``public`` schema).

``SVC_TEST_POSTGRES_URL`` names a server to use instead (its role needs CREATEDB; only the
``svc_test_…`` database the session creates is touched, and dropped at the end). Without
it, ``initdb`` from Debian's ``postgresql`` package (``tests/ensure-postgresql.sh`` installs
it) makes a cluster in a temporary folder, served on 127.0.0.1 only, on a free port, with
its Unix socket in that folder. initdb and postgres refuse to run as root, so as root the
folder belongs to the ``postgres`` user and the binaries run through ``runuser``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlsplit

import psycopg
from psycopg import sql

from tests.support.processes import free_port

URL_ENV = "SVC_TEST_POSTGRES_URL"
SERVER_USER = "postgres"  # the Debian package's system user, used when running as root


def find_bin(name: str) -> Path:
    """``initdb``/``pg_ctl`` of the newest PostgreSQL under /usr/lib/postgresql."""
    found = sorted(
        glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
        key=lambda p: int(Path(p).parts[4]) if Path(p).parts[4].isdigit() else 0,
    )
    if not found:
        raise RuntimeError(
            f"no {name} under /usr/lib/postgresql/*/bin: run tests/ensure-postgresql.sh "
            f"(installs Debian's postgresql package) or set {URL_ENV}"
        )
    return Path(found[-1])


class LocalServer:
    """A PostgreSQL cluster in a temporary folder; ``start()`` and ``stop()``."""

    def __init__(self) -> None:
        self.as_root = os.geteuid() == 0
        self.folder = Path(tempfile.mkdtemp(prefix="svc-pg-"))
        self.data = self.folder / "data"
        self.port = free_port()
        self.url = f"postgresql://{SERVER_USER}@127.0.0.1:{self.port}/postgres"
        if self.as_root:
            user = pwd.getpwnam(SERVER_USER)
            os.chown(self.folder, user.pw_uid, user.pw_gid)

    def _run(self, *cmd: str | Path, timeout: float = 60) -> None:
        args = [str(c) for c in cmd]
        if self.as_root:
            args = ["runuser", "-u", SERVER_USER, "--", *args]
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")

    def start(self) -> None:
        self._run(
            find_bin("initdb"),
            *("-D", self.data, "-U", SERVER_USER, "--auth=trust", "-E", "UTF8"),
            *("--locale=C", "--no-sync", "--no-instructions"),
        )
        options = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(self.folder),
            # Durability buys nothing in a throwaway cluster; it only slows the tests.
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": "200",
        }
        opts = " ".join(f"-c {name}={value}" for name, value in options.items())
        log = self.folder / "server.log"
        # -w: pg_ctl returns once the server accepts connections.
        self._run(
            find_bin("pg_ctl"), "start", "-w", "-t", "60", "-D", self.data, "-l", log, "-o", opts
        )

    def stop(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self._run(find_bin("pg_ctl"), "stop", "-w", "-m", "fast", "-D", self.data)
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


@contextlib.contextmanager
def server_url() -> Iterator[str]:
    """The URL of a server the tests may create databases on, for the whole session."""
    configured = os.environ.get(URL_ENV)
    if configured:
        yield configured
        return
    server = LocalServer()
    try:
        server.start()
        yield server.url
    finally:
        server.stop()


def _admin(url: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(url, autocommit=True, connect_timeout=10)


@contextlib.contextmanager
def session_database(url: str) -> Iterator[str]:
    """A new database on the server for the session, dropped afterwards; yields its URL.

    It sorts text by ICU's en-US rules when the server can, as production databases
    usually do, so the store cannot rely on byte order by accident.
    """
    name = f"svc_test_{uuid.uuid4().hex[:12]}"
    ident = sql.Identifier(name)
    create = sql.SQL("CREATE DATABASE {} TEMPLATE template0 ENCODING 'UTF8'").format(ident)
    with _admin(url) as conn:
        try:
            conn.execute(create + sql.SQL(" LOCALE_PROVIDER icu ICU_LOCALE 'en-US'"))
        except psycopg.Error:  # before PostgreSQL 15, or built without ICU
            conn.execute(create)
    try:
        yield with_database(url, name)
    finally:
        with _admin(url) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))


def reset_database(url: str) -> None:
    """Empty the database: a new ``public`` schema (milliseconds, where a new database
    takes a quarter of a second), after ending any connection a test left open."""
    with _admin(url) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        conn.execute("DROP SCHEMA IF EXISTS public CASCADE")
        conn.execute("CREATE SCHEMA public")


def with_database(url: str, dbname: str) -> str:
    """``url`` (a ``postgresql://`` URL) naming another database."""
    return urlsplit(url)._replace(path="/" + quote(dbname, safe="")).geturl()
