"""The image's SBOM (/opt/svc/sbom.cdx.json, written by the Dockerfile's sbom stage with
cyclonedx-bom from requirements/runtime.lock): a valid CycloneDX document whose components
are exactly the Python packages installed in the image, svc itself its main component."""

from __future__ import annotations

import json
from importlib.metadata import version

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from packaging.utils import canonicalize_name

from tests.support.podman import BUILD_TIMEOUT_S, podman

# the first test to need an image builds it (minutes when nothing is cached)
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(BUILD_TIMEOUT_S)]

SBOM = "/opt/svc/sbom.cdx.json"
INSTALLED = (
    "import importlib.metadata as m, json; "
    "print(json.dumps([[d.metadata['Name'], d.version] for d in m.distributions()]))"
)


def test_the_sbom_is_valid_cyclonedx_and_lists_every_package_in_the_image(svc_image: str) -> None:
    text = podman("run", "--rm", "--entrypoint", "cat", svc_image, SBOM, check=True).stdout
    document = json.loads(text)
    validator = JsonStrictValidator(SchemaVersion.from_version(document["specVersion"]))
    assert validator.validate_str(text) is None
    listed = {
        (canonicalize_name(c["name"]), c["version"])
        for c in [*document["components"], document["metadata"]["component"]]
    }
    found = podman("run", "--rm", "--entrypoint", "python", svc_image, "-c", INSTALLED, check=True)
    installed = {(canonicalize_name(name), version) for name, version in json.loads(found.stdout)}
    assert ("svc", version("svc")) in installed
    assert installed - listed == set(), "installed in the image but not in its SBOM"
    assert listed - installed == set(), "in the SBOM but not installed in the image"
    for component in document["components"]:
        assert component["purl"].startswith(f"pkg:pypi/{component['name'].lower()}@")
