"""The models file's errors: each names the file, the line (best effort) and the field that
is wrong, in one line (``ModelsFileError``), so a broken file stops start-up saying where."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TypeVar

import msgspec

from app.core.errors import ModelsFileError

T = TypeVar("T")


def line_of(text: str, path: list[str]) -> int | None:
    """Best effort: the line where the field at ``path`` is written."""
    lines = text.splitlines()
    table_depth, start = 0, 0
    for depth in range(len(path), 0, -1):
        dotted = ".".join(path[:depth])
        quoted = ".".join(f'"{p}"' if "-" in p else p for p in path[:depth])
        for i, line in enumerate(lines):
            if line.strip().strip("[]").replace(" ", "") in (dotted, quoted.replace(" ", "")):
                table_depth, start = depth, i
                break
        if table_depth:
            break
    keys = path[table_depth:]
    if not keys:
        return start + 1 if table_depth else None
    for i in range(start, len(lines)):
        if i > start and lines[i].lstrip().startswith("[") and table_depth:
            break
        if re.match(rf"\s*\"?{re.escape(keys[0])}\"?\s*=", lines[i]):
            return i + 1
    return start + 1 if table_depth else None


def fail(path: Path, text: str, field: list[str], message: str) -> ModelsFileError:
    line = line_of(text, field)
    where = f"{path}:{line}" if line else str(path)
    return ModelsFileError(f"{where}: field '{'.'.join(field)}': {message}")


def field_path(error_text: str) -> list[str]:
    unknown = re.search(r"unknown field `([^`]*)`", error_text)
    if unknown:
        return [unknown.group(1)]
    match = re.search(r"at `\$(.*)`", error_text)
    if not match:
        return []
    return [p for p in re.split(r"\.|\[\d+\]", match.group(1)) if p]


def convert(path: Path, text: str, value: object, kind: type[T], where: list[str]) -> T:
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError as exc:
        message = re.sub(r" - at `\$.*`", "", str(exc))
        raise fail(path, text, [*where, *field_path(str(exc))], message) from exc
