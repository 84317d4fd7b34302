"""Each Lua script and its Python twin agree: the ARGV order its header gives
(``ARGV[n]  name …``) is the order its caller's ``ScriptArgs`` declares and builds, and the
numbers its header says it returns are the ones Python reads them as: ``ScriptStatus`` for
the statuses it names (``4 INSUFFICIENT_CREDITS``), the caller's ``replies`` for the bare
numbers a script answers (``1 when written, 0 when …``). Either side changed alone fails
here (the tampered copies at the end show it)."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import re
from collections.abc import Mapping
from enum import IntEnum
from pathlib import Path

import pytest

import app.credits
from app.credits.outcomes import ScriptStatus
from app.credits.script_args import ScriptArgs
from app.credits.scripts import SCRIPT_NAMES

LUA = Path(app.credits.__file__).parent / "lua"
_HEADER = re.compile(r"\A--\[\[\n(.*?)\n\]\]", re.DOTALL)
_ARGV = re.compile(r"^ARGV\[(\d+)(?:\.\.(\d+))?\]\s+(\S*)", re.MULTILINE)
_NAMED_STATUS = re.compile(r"(?<![\w\[.])(-?\d+)\s+([A-Z][A-Z_]+)\b")
_BARE_REPLY = re.compile(r"(?<![\w\[.])(-?\d+) when\b")

Argv = tuple[tuple[str | None, int], ...]
"""An ARGV as (name, width) in order: a range (``ARGV[a..b]``) is (None, b - a + 1)."""


@dataclasses.dataclass(frozen=True)
class Header:
    argv: Argv
    statuses: dict[str, int]  # the statuses the script's Returns name, and their numbers
    bare_replies: frozenset[int]  # the bare numbers it answers ("1 when …")


def header_of(source: str) -> Header:
    """What a script's opening comment declares of its ARGV and its replies."""
    found = _HEADER.match(source)
    assert found, "a script opens with its --[[ KEYS/ARGV/Returns ]] header"
    text = found.group(1)
    argv: list[tuple[str | None, int]] = []
    for first, last, name in _ARGV.findall(text):
        expected = sum(width for _, width in argv) + 1
        assert int(first) == expected, f"ARGV[{first}] follows ARGV[{expected - 1}]"
        argv.append((None, int(last) - int(first) + 1) if last else (name, 1))
    returns = text[text.index("Returns") :] if "Returns" in text else ""
    statuses: dict[str, int] = {}
    for number, name in _NAMED_STATUS.findall(returns):
        assert statuses.setdefault(name, int(number)) == int(number), f"{name} numbered twice"
    bare = frozenset(int(n) for n in _BARE_REPLY.findall(returns))
    return Header(tuple(argv), statuses, bare)


def argv_of(twin: ScriptArgs) -> Argv:
    """A twin's ARGV as a header shows it (a spread ``name*N`` is an unnamed range)."""
    out: list[tuple[str | None, int]] = []
    for name in twin.names:
        _, spread, width = name.partition("*")
        out.append((None, int(width)) if spread else (name, 1))
    return tuple(out)


def disagreements(
    header: Header, twin: ScriptArgs, statuses: type[IntEnum] = ScriptStatus
) -> list[str]:
    """Where a script's header and its Python twin part (empty: they agree)."""
    problems = []
    if header.argv != argv_of(twin):
        problems.append(f"ARGV: the header has {header.argv}, Python {argv_of(twin)}")
    known: Mapping[str, IntEnum] = statuses.__members__
    for name, number in header.statuses.items():
        if name not in known:
            problems.append(f"the header returns {number} {name}, which Python does not know")
        elif known[name] != number:
            problems.append(f"{name}: the header says {number}, Python {int(known[name])}")
    if twin.replies and set(twin.replies) != header.bare_replies:
        problems.append(
            f"replies: the header answers {sorted(header.bare_replies)}, Python reads "
            f"{sorted(twin.replies)}"
        )
    return problems


def twins() -> dict[str, ScriptArgs]:
    """Every ``ScriptArgs`` declared in ``app.credits``, by script."""
    found: dict[str, ScriptArgs] = {}
    for module_info in pkgutil.iter_modules(app.credits.__path__, "app.credits."):
        module = importlib.import_module(module_info.name)
        for value in vars(module).values():
            if isinstance(value, ScriptArgs):
                assert found.setdefault(value.script, value) is value, f"{value.script} twice"
    return found


def _source(script: str) -> str:
    return (LUA / f"{script}.lua").read_text(encoding="utf-8")


def test_every_script_has_one_python_twin() -> None:
    assert sorted(twins()) == sorted(SCRIPT_NAMES)


@pytest.mark.parametrize("script", SCRIPT_NAMES)
def test_a_script_and_its_twin_agree(script: str) -> None:
    header = header_of(_source(script))
    assert header.argv, f"{script}.lua's header names its ARGV"
    assert disagreements(header, twins()[script]) == []


def test_the_statuses_the_headers_name_are_read() -> None:
    """Every status the scripts' headers name is one ``ScriptStatus`` reads (the few it
    has beyond them come from Python: the refusals made before a script runs)."""
    named = {name for script in SCRIPT_NAMES for name in header_of(_source(script)).statuses}
    assert {"OK", "INSUFFICIENT_CREDITS", "REPLAY", "ACCOUNT_IN_DEBT"} <= named
    assert named <= set(ScriptStatus.__members__)


def test_built_arguments_follow_the_declared_order() -> None:
    twin = ScriptArgs("example", "now", "rid", "settings*2", "optional")
    assert twin(now=1, rid="r", settings=["a", "b"]) == [1, "r", "a", "b"]
    assert twin(optional=4, settings=["a", "b"], rid="r", now=1) == [1, "r", "a", "b", 4]
    with pytest.raises(KeyError):
        twin(now=1, settings=["a", "b"])  # a gap would shift every ARGV after it


# -- either side changed alone is caught ------------------------------------------------------


def test_a_header_whose_argv_moved_is_caught() -> None:
    source = _source("extend")
    swapped = source.replace("ARGV[1]  rid", "ARGV[1]  deadline_x").replace(
        "ARGV[2]  deadline", "ARGV[2]  rid"
    )
    assert swapped != source
    assert disagreements(header_of(swapped), twins()["extend"])


def test_a_twin_whose_argv_moved_is_caught() -> None:
    twin = twins()["low_balance"]
    assert disagreements(header_of(_source("low_balance")), twin) == []
    moved = ScriptArgs(twin.script, *reversed(twin.names))
    assert disagreements(header_of(_source("low_balance")), moved)
    grown = ScriptArgs("put_key", "acct", "status", "env", "settings*5")
    assert disagreements(header_of(_source("put_key")), grown)


def test_a_header_whose_status_moved_is_caught() -> None:
    source = _source("reserve")
    renumbered = source.replace(" 4 INSUFFICIENT_CREDITS", " 9 INSUFFICIENT_CREDITS")
    assert renumbered != source
    assert disagreements(header_of(renumbered), twins()["reserve"])
    unknown = source.replace("22 ACCOUNT_IN_DEBT", "23 ACCOUNT_FROZEN")
    assert disagreements(header_of(unknown), twins()["reserve"])


def test_a_python_status_that_moved_is_caught() -> None:
    members = {member.name: member.value for member in ScriptStatus}
    members["DAILY_CAP_EXCEEDED"] = 50
    moved = IntEnum("ScriptStatus", members)  # type: ignore[misc]
    assert disagreements(header_of(_source("reserve")), twins()["reserve"], moved)


def test_bare_replies_read_otherwise_are_caught() -> None:
    source = _source("revoke_key")
    twin = twins()["revoke_key"]
    assert disagreements(header_of(source), twin) == []
    fewer = ScriptArgs(twin.script, *twin.names, replies={1: ScriptStatus.OK})
    assert disagreements(header_of(source), fewer)
    changed = source.replace("-1 when the record names", "2 when the record names")
    assert disagreements(header_of(changed), twin)
