"""How svc calls each Lua script (``lua/<script>.lua``): its ARGV, named in the order the
script's header gives them, declared once beside the script's caller and built by name;
and, for a script that answers a bare number rather than a status, what each number means.
``tests/unit/credits/test_script_twins.py`` ties both to the headers, and the statuses the
headers name to ``ScriptStatus``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.credits.outcomes import ScriptStatus


class ScriptArgs:
    """One script's ARGV names in its header's order (``name*N``: N arguments spread from
    one sequence, the header's ``ARGV[a..b]``), and ``replies``: its bare numbers' meanings
    (empty for a script whose reply starts with a ``ScriptStatus``)."""

    __slots__ = ("_plan", "names", "replies", "script")

    def __init__(
        self, script: str, *names: str, replies: Mapping[int, ScriptStatus] | None = None
    ) -> None:
        self.script = script
        self.names = names
        self.replies: Mapping[int, ScriptStatus] = replies or {}
        self._plan = tuple((name.partition("*")[0], "*" in name) for name in names)

    def __call__(self, **values: Any) -> list[Any]:
        """The ARGV of one call, ``values`` put in the header's order. A script's optional
        arguments come last, so ``values`` names the first ``len(values)`` of ``names``: a
        name left out before the last one given is a ``KeyError``, never a shifted ARGV."""
        args: list[Any] = []
        for name, spread in self._plan[: len(values)]:
            if spread:
                args.extend(values[name])
            else:
                args.append(values[name])
        return args
