"""``svc --version`` and ``svc_build_info``: both say what runs, from the installed
packages' metadata."""

from __future__ import annotations

import platform
import re
from importlib import metadata
from pathlib import Path

import pytest

from app.cli import main
from app.core.metrics import Metrics, build_labels, exposition, installed_version
from tests.e2e.conftest import metric_samples

DOCS = Path(__file__).resolve().parents[3] / "docs" / "operations.md"


async def _no_redis() -> None:
    return None


def test_version_prints_the_installed_packages_version(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"svc {metadata.version('svc')}\n"


def test_a_package_not_installed_has_an_unknown_version() -> None:
    assert installed_version("svc-no-such-distribution") == "unknown"


async def test_build_info_is_one_series_of_value_one_naming_the_versions() -> None:
    samples = metric_samples((await exposition(Metrics(), _no_redis)).decode())
    builds = {
        labels: value for (name, labels), value in samples.items() if name == "svc_build_info"
    }
    assert builds == {
        (
            ("granian", metadata.version("granian")),
            ("python", platform.python_version()),
            ("version", metadata.version("svc")),
        ): 1.0
    }
    assert dict(build_labels())["version"] == installed_version()


def test_the_metrics_table_documents_build_info() -> None:
    rows = [line for line in DOCS.read_text().splitlines() if line.startswith("| `svc_build_info`")]
    assert len(rows) == 1
    assert re.search(r"`version`.*`python`.*`granian`", rows[0])
