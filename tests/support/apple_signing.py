"""App Store signed data as Apple signs it, made in the test: a throwaway three-certificate
CA (a root; an intermediate with Apple's intermediate OID 1.2.840.113635.100.6.2.1; a leaf
with Apple's App Store signing OID 1.2.840.113635.100.6.11.1; P-256 keys), and JWS (ES256,
the chain in the ``x5c`` header, leaf first) of transactions and App Store Server
Notifications V2 shaped as Apple's documentation shows them.

The keys and certificates are made with ``cryptography`` and the JWS with PyJWT: svc checks
them with Apple's library, so the verifier is run against an independent signer.
"""

from __future__ import annotations

import base64
import datetime
import time
import uuid
from itertools import count
from pathlib import Path
from typing import Any

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

INTERMEDIATE_OID = "1.2.840.113635.100.6.2.1"
LEAF_OID = "1.2.840.113635.100.6.11.1"
BUNDLE_ID = "com.example.companion"
APP_ID = 1_234_567_890
_serial = count(1)
_DAY = datetime.timedelta(days=1)


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
    *,
    ca: bool,
    oid: str | None,
    not_after: datetime.datetime,
) -> x509.Certificate:
    issuer_name, issuer_key = issuer or (_name(subject), key)
    now = datetime.datetime.now(datetime.UTC)
    usage = x509.KeyUsage(
        digital_signature=not ca,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - 30 * _DAY)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), False
        )
    )
    if oid:  # Apple's marker extensions hold an ASN.1 NULL
        marker = x509.UnrecognizedExtension(x509.ObjectIdentifier(oid), b"\x05\x00")
        builder = builder.add_extension(marker, critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


class AppleCA:
    """A root, an intermediate and a leaf, and the JWS the leaf signs."""

    def __init__(self, name: str = "Test Apple") -> None:
        self.name = name
        later = datetime.datetime.now(datetime.UTC) + 365 * _DAY
        self.root_key = ec.generate_private_key(ec.SECP256R1())
        self.root = _cert(
            f"{name} Root CA", self.root_key, None, ca=True, oid=None, not_after=later
        )
        self.mid_key = ec.generate_private_key(ec.SECP256R1())
        self.intermediate = _cert(
            f"{name} WWDR",
            self.mid_key,
            (self.root.subject, self.root_key),
            ca=True,
            oid=INTERMEDIATE_OID,
            not_after=later,
        )
        self.leaf_key = ec.generate_private_key(ec.SECP256R1())
        self.leaf = self._leaf(later)

    def _leaf(self, not_after: datetime.datetime) -> x509.Certificate:
        return _cert(
            f"{self.name} StoreKit signing",
            self.leaf_key,
            (self.intermediate.subject, self.mid_key),
            ca=False,
            oid=LEAF_OID,
            not_after=not_after,
        )

    def expired(self) -> AppleCA:
        """The same root and intermediate, signing with a leaf that expired yesterday."""
        copy = AppleCA.__new__(AppleCA)
        copy.__dict__.update(self.__dict__)
        copy.leaf = self._leaf(datetime.datetime.now(datetime.UTC) - _DAY)
        return copy

    def root_der(self) -> bytes:
        return self.root.public_bytes(serialization.Encoding.DER)

    def write_root(self, path: Path) -> Path:
        """The root as Apple publishes its own: a DER file."""
        path.write_bytes(self.root_der())
        return path

    def sign(self, payload: dict[str, Any]) -> str:
        chain = [
            base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode()
            for cert in (self.leaf, self.intermediate, self.root)
        ]
        return jwt.encode(payload, self.leaf_key, algorithm="ES256", headers={"x5c": chain})


def now_ms() -> int:
    return int(time.time() * 1000)


def transaction_id() -> str:
    """A fresh transaction id, numeric as Apple's are."""
    return f"2000{int(time.time()) % 10**8:08d}{next(_serial):06d}"


def transaction(
    token: str | None,
    *,
    transaction_id: str,
    product_id: str = "credits.small",
    product_type: str = "Consumable",
    environment: str = "Sandbox",
    bundle_id: str = BUNDLE_ID,
    price: int = 990,
    currency: str = "USD",
    revoked: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """A JWSTransactionDecodedPayload of a consumable's purchase."""
    at = now_ms()
    tx: dict[str, Any] = {
        "transactionId": transaction_id,
        "originalTransactionId": transaction_id,
        "bundleId": bundle_id,
        "productId": product_id,
        "purchaseDate": at - 1000,
        "originalPurchaseDate": at - 1000,
        "quantity": 1,
        "type": product_type,
        "inAppOwnershipType": "PURCHASED",
        "signedDate": at,
        "environment": environment,
        "transactionReason": "PURCHASE",
        "storefront": "USA",
        "storefrontId": "143441",
        "price": price,
        "currency": currency,
        "appTransactionId": "704289572311559999",
    }
    if token is not None:
        tx["appAccountToken"] = token
    if revoked:
        tx["revocationDate"] = at
        tx["revocationReason"] = 0
        tx["revocationType"] = "REFUND_FULL"
    tx.update(extra)
    return tx


def notification(
    ca: AppleCA,
    notification_type: str,
    signed_transaction: str | None = None,
    *,
    environment: str = "Sandbox",
    bundle_id: str = BUNDLE_ID,
    app_id: int = APP_ID,
    notification_uuid: str | None = None,
    **data: Any,
) -> str:
    """An App Store Server Notification V2's ``signedPayload``."""
    body: dict[str, Any] = {
        "appAppleId": app_id,
        "bundleId": bundle_id,
        "bundleVersion": "1.0",
        "environment": environment,
        **data,
    }
    if signed_transaction is not None:
        body["signedTransactionInfo"] = signed_transaction
    return ca.sign(
        {
            "notificationType": notification_type,
            "notificationUUID": notification_uuid or str(uuid.uuid4()),
            "data": body,
            "version": "2.0",
            "signedDate": now_ms(),
        }
    )


def private_key_pem() -> bytes:
    """An App Store Server API key as App Store Connect hands it out (a P-256 key, PKCS#8)."""
    return ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
