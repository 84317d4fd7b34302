"""The seam between the store's logic and an engine: a program.

A program is a generator that yields the statements it needs (``Statement``, in the shared
dialect of ``app.store.statements``) and is sent each one's answer; what it returns is the
store call's result. ``SQLStore`` writes each call once as a program; an engine runs it
on one connection, its own way (SQLite in a worker thread, PostgreSQL with an async
driver), inside the transaction the call asks for (``Transaction``). So the logic does no
I/O, and an engine holds no logic.

Programs are written with the helpers below (``answer = yield from row(query, args)``),
which type each answer.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from enum import Enum, auto
from typing import Any, Generic, TypeAlias, TypeVar

import msgspec

from app.store.records import Row

T = TypeVar("T")


class Fetch(Enum):
    """What a statement answers its program."""

    ROW = auto()  # its first row, or None
    ROWS = auto()  # all its rows
    COUNT = auto()  # how many rows it changed
    EACH = auto()  # nothing: it runs once per row of arguments


class Transaction(Enum):
    """How an engine wraps a program's statements."""

    NONE = auto()  # none: each statement on its own (a read of one statement)
    WRITE = auto()  # one write transaction: all or nothing, writers take turns
    SNAPSHOT = auto()  # one read-only transaction whose reads all see one instant


class Statement(msgspec.Struct, frozen=True):
    """One statement a program asks its engine to run."""

    fetch: Fetch
    query: str  # shared dialect: ``?`` placeholders
    args: Row = ()
    rows: Sequence[Row] = ()  # EACH: the arguments of each run


Program: TypeAlias = Generator[Statement, Any, T]


class Steps(Generic[T]):
    """Walks a program for an engine: iterate for its statements, ``answer`` each one, and
    read ``result`` once the iteration ends."""

    def __init__(self, program: Program[T]) -> None:
        self._program = program
        self._answer: Any = None
        self.result: T

    def __iter__(self) -> Iterator[Statement]:
        try:
            while True:
                yield self._program.send(self._answer)
        except StopIteration as done:
            self.result = done.value

    def answer(self, value: Any) -> None:
        """What the statement just yielded answered (sent to the program next)."""
        self._answer = value


def row(query: str, args: Row = ()) -> Program[Row | None]:
    """The statement's first row, or None."""
    found: Row | None = yield Statement(Fetch.ROW, query, args)
    return found


def rows(query: str, args: Row = ()) -> Program[list[Row]]:
    """All the statement's rows."""
    found: list[Row] = yield Statement(Fetch.ROWS, query, args)
    return found


def execute(query: str, args: Row = ()) -> Program[int]:
    """Run the statement; how many rows it changed."""
    changed: int = yield Statement(Fetch.COUNT, query, args)
    return changed


def each(query: str, arg_rows: Sequence[Row]) -> Program[None]:
    """Run the statement once per row of arguments (none: not at all)."""
    if arg_rows:
        yield Statement(Fetch.EACH, query, rows=arg_rows)


def take(lock: str | None, *args: Any) -> Program[None]:
    """Take a lock an engine names (None: the engine needs none there)."""
    if lock is not None:
        yield Statement(Fetch.COUNT, lock, args)
