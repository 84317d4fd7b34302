"""Every package's face (its ``__init__.py``) that hands on names of svc's own modules
declares ``__all__`` listing exactly what it hands on and defines: a name imported into a
face and not used by the face's own code (a dialect's face builds its ``Dialect`` from its
modules) is there to be handed on, so ``__all__`` tells a reader, mypy and a star import the
whole public surface. A face that hands on nothing of svc's may omit it. The packages are
found by walking ``app/``, so a new package is checked from its first commit."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app"
FACES = sorted(APP.rglob("__init__.py"))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def handed_on(tree: ast.Module) -> set[str]:
    """The names a face binds at run time from svc's own modules (``app.…`` or relative),
    outside ``if TYPE_CHECKING:`` and outside its functions."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            if node.level or (node.module or "").split(".")[0] == "app":
                names.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "app":
                    names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.If) and not _is_type_checking(node.test):
            names |= handed_on(ast.Module(body=node.body + node.orelse, type_ignores=[]))
    return names


def used(tree: ast.Module) -> set[str]:
    """The names the face's own code reads (its imports used, not handed on)."""
    return {
        node.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
    }


def defined(tree: ast.Module) -> set[str]:
    """The public names a face defines itself (functions, classes, constants)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return {name for name in names if not name.startswith("_")}


def declared(tree: ast.Module) -> list[str] | None:
    """The face's ``__all__`` (None: it has none)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            value = ast.literal_eval(node.value)
            assert isinstance(value, (list, tuple)), "__all__ is a literal list of names"
            return [str(name) for name in value]
    return None


def face_problems(source: str) -> list[str]:
    """What is wrong with a face's ``__all__``: missing while it hands names on, naming
    something it neither imports nor defines, leaving out a name it hands on, or naming one
    twice."""
    tree = ast.parse(source)
    imported = handed_on(tree) - used(tree)
    listed = declared(tree)
    if listed is None:
        return [f"hands on {sorted(imported)} without __all__"] if imported else []
    problems = []
    if len(listed) != len(set(listed)):
        problems.append(f"__all__ names one more than once: {sorted(listed)}")
    if missing := imported - set(listed):
        problems.append(f"__all__ leaves out what it imports: {sorted(missing)}")
    if unknown := set(listed) - handed_on(tree) - defined(tree):
        problems.append(
            f"__all__ names what the face neither imports nor defines: {sorted(unknown)}"
        )
    return problems


def test_every_package_is_found() -> None:
    faces = {face.parent.relative_to(APP).as_posix() for face in FACES}
    assert {".", "core", "core/metrics", "store", "credits", "http"} <= faces


@pytest.mark.parametrize("face", FACES, ids=lambda face: face.relative_to(APP.parent).as_posix())
def test_a_face_lists_exactly_what_it_hands_on(face: Path) -> None:
    assert face_problems(face.read_text(encoding="utf-8")) == []


def test_a_face_out_of_step_with_its_all_is_caught() -> None:
    good = (
        "from app.store.records import KeyRecord\n"
        "from app.store.contract import Store as Store\n"
        "import logging\n"
        "if TYPE_CHECKING:\n    from app.core.settings import Settings\n"
        "def open_store() -> None: ...\n"
        '__all__ = ["KeyRecord", "Store", "open_store"]\n'
    )
    assert face_problems(good) == []
    assert face_problems("import logging\nfrom typing import Any\n") == []  # hands on nothing
    assert face_problems(good.replace('__all__ = ["KeyRecord", "Store", "open_store"]\n', ""))
    assert face_problems(good.replace('"KeyRecord", ', ""))  # an import left out
    assert face_problems(good.replace('"open_store"', '"open_store", "gone"'))  # stale name
    assert face_problems(good.replace('"Store", ', '"Store", "Store", '))  # named twice
    assert face_problems("from . import errors\n__all__ = []\n")  # a relative import too
