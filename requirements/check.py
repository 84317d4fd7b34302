"""Fails when the virtualenv does not meet pyproject.toml: a lock older than a dependency change.

`make run` runs it as `check.py svc` after installing requirements/runtime.lock and svc itself
(`--no-deps`, so pip itself never compares the lock with pyproject.toml), `make test` as
`check.py 'svc[test]'` after adding requirements/test.lock. `pip check` covers what installed
packages require of each other, but not the extras that were asked for (svc[test], svc[bench],
redis[hiredis], …); this does. The fix for what it reports: `make lock`.

Usage: python requirements/check.py svc[test]

Only the standard library and `packaging` are used; the runtime environment holds no
`packaging` of its own, so then pip's vendored copy (pip is in every virtualenv) stands in.
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, requires, version

try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
except ImportError:  # `make run`'s environment: requirements/runtime.lock has no packaging
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[assignment]
    from pip._vendor.packaging.utils import canonicalize_name  # type: ignore[assignment]


def unmet(top: Requirement) -> list[str]:
    problems: list[str] = []
    todo = [(top.name, extra) for extra in ("", *top.extras)]
    seen: set[tuple[str, str]] = set()
    while todo:
        name, extra = todo.pop()
        key = (canonicalize_name(name), extra)
        if key in seen:
            continue
        seen.add(key)
        for line in requires(name) or []:
            req = Requirement(line)
            if req.marker and not req.marker.evaluate({"extra": extra}):
                continue
            try:
                installed = version(req.name)
            except PackageNotFoundError:
                problems.append(f"{name} needs {req}: not installed")
                continue
            if not req.specifier.contains(installed, prereleases=True):
                problems.append(f"{name} needs {req}: {installed} is installed")
                continue
            todo.extend((req.name, e) for e in ("", *req.extras))
    return problems


def main(argv: list[str]) -> int:
    problems = [p for arg in argv for p in unmet(Requirement(arg))]
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print("The lock is older than pyproject.toml: run `make lock`.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
