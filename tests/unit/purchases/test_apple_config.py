"""The App Store's settings (issue 47 item 2): Apple Root CA - G3 shipped with svc, and
checked against the fingerprint Apple publishes; SVC_APPLE_ROOT_CERTS in DER or PEM;
products; the App Store off until a bundle id and products are set; settings that cannot
work refuse to start, naming the variable."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from app.core.errors import SettingsError
from app.core.settings import Settings
from app.purchases.apple_config import apple_config, root_certificates
from app.purchases.products import parse_products
from tests.support.apple_signing import AppleCA, private_key_pem

SHARED_CERTS = Path("/work/shared/certs")
APP = {"SVC_APPLE_BUNDLE_ID": "com.example.app", "SVC_APPLE_PRODUCTS": "credits.small=1000"}


# Apple Root CA - G3's SHA-256 fingerprint as Apple publishes it (apple.com/certificateauthority)
G3_SHA256 = (
    "63:34:3A:BF:B8:9A:6A:03:EB:B5:7E:9B:3F:5F:A7:BE:"
    "7C:4F:5C:75:6F:30:17:B3:A8:C4:88:C3:65:3E:91:79"
)


def test_the_shipped_root_is_apple_root_ca_g3() -> None:
    (der,) = root_certificates("")
    assert hashlib.sha256(der).digest() == bytes.fromhex(G3_SHA256.replace(":", ""))
    name = x509.load_der_x509_certificate(der).subject.rfc4514_string()
    assert "CN=Apple Root CA - G3" in name
    if SHARED_CERTS.is_dir():  # the team's copy says the same fingerprint
        assert G3_SHA256 in (SHARED_CERTS / "README.md").read_text()


def test_root_certs_are_read_as_der_or_pem(tmp_path: Path) -> None:
    first, second = AppleCA("one"), AppleCA("two")
    der = first.write_root(tmp_path / "one.cer")
    pem = tmp_path / "two.pem"
    pem.write_bytes(second.root.public_bytes(Encoding.PEM))
    assert root_certificates(f"{der}, {pem}") == (first.root_der(), second.root_der())
    with pytest.raises(SettingsError, match=r"SVC_APPLE_ROOT_CERTS: .*holds no certificate"):
        root_certificates(str(_junk(tmp_path)))
    with pytest.raises(SettingsError, match="SVC_APPLE_ROOT_CERTS: cannot read"):
        root_certificates(str(tmp_path / "missing.cer"))


def _junk(tmp_path: Path) -> Path:
    path = tmp_path / "junk.cer"
    path.write_bytes(b"not a certificate")
    return path


def test_products_are_consumables_and_their_credits() -> None:
    assert parse_products("V", " a=1000 , b.c=5,") == {"a": 1000, "b.c": 5}
    for bad in ("a", "=5", "a=0", "a=-1", "a=1.5", "a=x", "a=1,a=2", "a=" + "9" * 5000):
        with pytest.raises(SettingsError, match=r"^V: "):
            parse_products("V", bad)


def test_the_app_store_is_off_until_a_bundle_id_and_products_are_set() -> None:
    assert apple_config(Settings.from_env({})) is None
    assert apple_config(Settings.from_env({"SVC_APPLE_BUNDLE_ID": "com.example.app"})) is None
    sandbox = apple_config(Settings.from_env({**APP, "SVC_APPLE_ENVIRONMENT": "Sandbox"}))
    assert sandbox is not None
    assert sandbox.products == {"credits.small": 1000}
    assert sandbox.api is None


def test_production_needs_the_apps_apple_id() -> None:
    with pytest.raises(SettingsError, match="SVC_APPLE_APP_ID"):
        apple_config(Settings.from_env(APP))
    found = apple_config(Settings.from_env({**APP, "SVC_APPLE_APP_ID": "1234"}))
    assert found is not None
    assert found.app_id == 1234
    with pytest.raises(ValueError, match="SVC_APPLE_ENVIRONMENT"):
        Settings.from_env({**APP, "SVC_APPLE_ENVIRONMENT": "Xcode"})


def test_consumption_consent_needs_the_whole_api_key(tmp_path: Path) -> None:
    key_file = tmp_path / "SubscriptionKey_ABC.p8"
    key_file.write_bytes(private_key_pem())
    env = {
        **APP,
        "SVC_APPLE_ENVIRONMENT": "Sandbox",
        "SVC_APPLE_CONSUMPTION_CONSENT": "true",
        "SVC_APPLE_API_KEY_ID": "ABC",
        "SVC_APPLE_API_ISSUER_ID": "issuer",
        "SVC_APPLE_API_PRIVATE_KEY_FILE": str(key_file),
        "SVC_APPLE_API_URL": "http://127.0.0.1:9/",
    }
    found = apple_config(Settings.from_env(env))
    assert found is not None
    assert found.api is not None
    assert (found.api.key_id, found.api.url) == ("ABC", "http://127.0.0.1:9")
    for missing in ("SVC_APPLE_API_KEY_ID", "SVC_APPLE_API_PRIVATE_KEY_FILE"):
        with pytest.raises(SettingsError, match=missing):
            apple_config(Settings.from_env({**env, missing: ""}))
    key_file.write_text("nothing")
    with pytest.raises(SettingsError, match="holds no PEM private key"):
        apple_config(Settings.from_env(env))
