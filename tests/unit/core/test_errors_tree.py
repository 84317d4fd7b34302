"""svc's exceptions are one tree, drawn in one module (``app.core.errors``): every exception
class ``app`` defines lives there and is drawn in its docstring, but for the few a module
raises and catches itself, which the docstring names."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import app
from app.core import errors

# Raised and caught inside their own module, never past it (named in the docstring).
PRIVATE = {"ServerDisconnected", "ProxyRefused", "LifespanFailed", "ClientLeft"}
# Entry points that build a server when imported.
NOT_IMPORTED = {"app.__main__", "app.rsgi"}


def _exception_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module_info in pkgutil.walk_packages(app.__path__, "app."):
        if module_info.name in NOT_IMPORTED:
            continue
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
            ):
                found[f"{module.__name__}.{name}"] = value
    return found


def test_every_exception_is_in_the_one_module_or_kept_private() -> None:
    outside = {
        qualified
        for qualified, cls in _exception_classes().items()
        if cls.__module__ != "app.core.errors" and cls.__name__ not in PRIVATE
    }
    assert outside == set()


def test_the_docstring_draws_every_exception_of_the_module() -> None:
    doc = errors.__doc__ or ""
    ours = [
        cls.__name__
        for cls in vars(errors).values()
        if inspect.isclass(cls)
        and issubclass(cls, BaseException)
        and cls.__module__ == "app.core.errors"
    ]
    assert len(ours) >= 15
    assert [name for name in ours if name not in doc] == []
    assert [name for name in PRIVATE if name not in doc] == []


def test_internal_failures_share_one_base() -> None:
    internal = [
        errors.UpstreamError,
        errors.StoreError,
        errors.StoreConflict,
        errors.LedgerUnreachable,
        errors.StreamCut,
        errors.ClientDisconnected,
        errors.TargetRefused,
        errors.AdMobRejected,
        errors.KeysUnavailable,
        errors.StartupError,
        errors.ModelsFileError,
        errors.ProxyConfigError,
        errors.ScriptLoadError,
    ]
    assert all(issubclass(cls, errors.SvcError) for cls in internal)
    assert not issubclass(errors.ApiError, errors.SvcError)
    # configuration errors that were ValueErrors still are
    assert issubclass(errors.ModelsFileError, ValueError)
    assert issubclass(errors.ProxyConfigError, ValueError)
