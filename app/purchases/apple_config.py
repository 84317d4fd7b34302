"""The App Store's settings (``SVC_APPLE_*``) as svc runs on them, checked at start: a
setting that cannot work refuses to start, naming the variable, rather than refusing every
purchase later."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Literal

import msgspec

from app.core.errors import SettingsError
from app.core.settings import Settings
from app.purchases.products import parse_products

APPLE_ROOT_CA_G3 = "AppleRootCA-G3.pem"
"""Apple Root CA - G3, shipped in ``app/purchases/certs``: the root of every App Store
signed transaction and notification."""


class AppleApiKey(msgspec.Struct, frozen=True):
    """An App Store Server API key (for the consumption data). Never logged."""

    key_id: str
    issuer_id: str
    private_key: bytes  # PEM
    url: str  # "" = Apple's for the environment


class AppleConfig(msgspec.Struct, frozen=True, kw_only=True):
    bundle_id: str
    app_id: int | None
    environment: Literal["Production", "Sandbox"]
    products: dict[str, int]
    root_certs: tuple[bytes, ...]  # DER, as the library takes them
    consumption_consent: bool
    api: AppleApiKey | None  # set when consumption_consent is


def apple_config(settings: Settings) -> AppleConfig | None:
    """The App Store's configuration; None while it is off (no bundle id or no products)."""
    products = parse_products("SVC_APPLE_PRODUCTS", settings.apple_products)
    if not settings.apple_bundle_id or not products:
        return None
    if settings.apple_environment == "Production" and settings.apple_app_id is None:
        raise SettingsError(
            "SVC_APPLE_APP_ID: the app's Apple ID is required in the Production environment "
            "(App Store notifications name it)"
        )
    return AppleConfig(
        bundle_id=settings.apple_bundle_id,
        app_id=settings.apple_app_id,
        environment=settings.apple_environment,
        products=products,
        root_certs=root_certificates(settings.apple_root_certs),
        consumption_consent=settings.apple_consumption_consent,
        api=_api_key(settings) if settings.apple_consumption_consent else None,
    )


def root_certificates(paths: str) -> tuple[bytes, ...]:
    """The certificates of ``SVC_APPLE_ROOT_CERTS`` (files of DER or PEM) as DER; Apple Root
    CA - G3 when it names none."""
    named = [p.strip() for p in paths.split(",") if p.strip()]
    if not named:
        shipped = resources.files("app.purchases").joinpath("certs", APPLE_ROOT_CA_G3)
        return _certificates(shipped.read_bytes(), APPLE_ROOT_CA_G3)
    found: list[bytes] = []
    for path in named:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise SettingsError(
                f"SVC_APPLE_ROOT_CERTS: cannot read {path}: {exc.strerror}"
            ) from None
        found.extend(_certificates(data, path))
    return tuple(found)


def _certificates(data: bytes, name: str) -> tuple[bytes, ...]:
    # imported here, by a server that sells in the App Store: cryptography costs about
    # 7 MB of RSS per worker (bench/CHANGELOG.md, issue 53)
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    try:
        if b"-----BEGIN CERTIFICATE-----" in data:
            certs = x509.load_pem_x509_certificates(data)
        else:
            certs = [x509.load_der_x509_certificate(data)]
    except ValueError:
        raise SettingsError(
            f"SVC_APPLE_ROOT_CERTS: {name} holds no certificate (DER or PEM)"
        ) from None
    return tuple(cert.public_bytes(Encoding.DER) for cert in certs)


def _api_key(settings: Settings) -> AppleApiKey:
    """The App Store Server API key the consumption data is sent with: all of it is needed."""
    for variable, value in (
        ("SVC_APPLE_API_KEY_ID", settings.apple_api_key_id),
        ("SVC_APPLE_API_ISSUER_ID", settings.apple_api_issuer_id),
        ("SVC_APPLE_API_PRIVATE_KEY_FILE", settings.apple_api_private_key_file),
    ):
        if not value:
            raise SettingsError(
                f"{variable} is required with SVC_APPLE_CONSUMPTION_CONSENT=true (svc sends "
                "the consumption data with the App Store Server API key)"
            )
    path = settings.apple_api_private_key_file
    try:
        private_key = Path(path).read_bytes()
    except OSError as exc:
        raise SettingsError(
            f"SVC_APPLE_API_PRIVATE_KEY_FILE: cannot read {path}: {exc.strerror}"
        ) from None
    if b"PRIVATE KEY-----" not in private_key:
        raise SettingsError(f"SVC_APPLE_API_PRIVATE_KEY_FILE: {path} holds no PEM private key")
    return AppleApiKey(
        key_id=settings.apple_api_key_id,
        issuer_id=settings.apple_api_issuer_id,
        private_key=private_key,
        url=settings.apple_api_url.rstrip("/"),
    )
