"""Test certificates: a self-signed one for 127.0.0.1, made by the openssl command line
(trustme is not among svc's test dependencies). A client trusts it through
``SSL_CERT_FILE``, as it would trust a private authority."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def self_signed(folder: Path, *names: str) -> tuple[Path, Path]:
    """(certificate, key) files for ``127.0.0.1`` and the DNS ``names``, valid for a day."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl command to make a test certificate")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
            "-addext", ",".join(["subjectAltName=IP:127.0.0.1", *(f"DNS:{n}" for n in names)]),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key
