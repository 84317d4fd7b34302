"""A local stand-in for the Google servers svc asks about Play purchases, with keys the test
makes (``cryptography``): the OAuth token endpoint (it checks the service account's signed
JWT assertion with google-auth against the key file's certificate, and hands out an access
token), the Play Developer API (``purchases.products.get`` and ``:consume`` for the
purchases a test sets up; consume calls are counted and timed) and the OIDC certificates
(a certificate of the test's; ``push_token`` signs Pub/Sub's push tokens with its key).

``with FakeGoogle(tmp) as google:`` serves on a loopback port until the block ends.
"""

from __future__ import annotations

import base64
import datetime
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, unquote

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from google.auth import crypt, jwt

from tests.support.processes import free_port

PACKAGE = "com.example.svc"
PUSH_AUDIENCE = "https://svc.example/v1/purchases/google/notifications"
PUSH_ACCOUNT = "rtdn-push@svc-project.iam.gserviceaccount.com"
SERVICE_ACCOUNT = "svc-play@svc-project.iam.gserviceaccount.com"
SCOPE = "https://www.googleapis.com/auth/androidpublisher"
# google-auth signs every assertion for Google's own token endpoint, whatever token_uri is
GOOGLE_TOKEN_AUDIENCE = "https://oauth2.googleapis.com/token"
_PREFIX = "/androidpublisher/v3/applications/"
Answer = tuple[int, Any, dict[str, str]]


def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def pem_key(key: rsa.RSAPrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def certificate(key: rsa.RSAPrivateKey, name: str) -> str:
    """A self-signed PEM certificate of ``key``, valid for a day."""
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def sign_jwt(key: rsa.RSAPrivateKey, kid: str, claims: dict[str, Any]) -> str:
    signer = crypt.RSASigner.from_string(pem_key(key), key_id=kid)
    return jwt.encode(signer, claims).decode()


@dataclass
class Purchase:
    """One purchase token's ProductPurchase, as Google answers it."""

    product_id: str
    account_token: str | None
    order_id: str
    state: int = 0
    consumed: int = 0
    purchase_type: int | None = None
    quantity: int = 1
    package: str = PACKAGE

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "androidpublisher#productPurchase",
            "purchaseTimeMillis": str(int(time.time() * 1000)),
            "purchaseState": self.state,
            "consumptionState": self.consumed,
            "orderId": self.order_id,
            "acknowledgementState": self.consumed,
            "productId": self.product_id,
            "quantity": self.quantity,
            "regionCode": "US",
        }
        if self.account_token is not None:
            out["obfuscatedExternalAccountId"] = self.account_token
        if self.purchase_type is not None:
            out["purchaseType"] = self.purchase_type
        return out


@dataclass
class Calls:
    tokens: int = 0  # access tokens handed out
    gets: int = 0
    consumes: list[tuple[str, float]] = field(default_factory=list)  # (token, time)
    refused_assertions: int = 0
    cert_fetches: int = 0


class FakeGoogle:
    """Google's token endpoint, Play Developer API and OIDC certificates, on one port."""

    def __init__(self, folder: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.purchases: dict[str, Purchase] = {}  # purchase token → its purchase
        self.calls = Calls()
        self.down = False  # the Play Developer API answers 503
        self.consume_down = False  # consume answers 503
        self.lock = threading.Lock()
        self._access: set[str] = set()
        self.account_key = rsa_key()
        self.account_kid = secrets.token_hex(8)
        self.account_cert = certificate(self.account_key, SERVICE_ACCOUNT)
        self.push_key = rsa_key()
        self.push_kid = secrets.token_hex(8)
        self.push_cert = certificate(self.push_key, "accounts.google.com")
        self.key_file = folder / "play-service-account.json"
        self.key_file.write_text(
            json.dumps(
                {
                    "type": "service_account",
                    "project_id": "svc-project",
                    "private_key_id": self.account_kid,
                    "private_key": pem_key(self.account_key),
                    "client_email": SERVICE_ACCOUNT,
                    "client_id": "1234567890",
                    "token_uri": "https://oauth2.googleapis.com/token",  # replaced in tests
                }
            )
        )
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def token_url(self) -> str:
        return f"{self.url}/token"

    @property
    def certs_url(self) -> str:
        return f"{self.url}/oauth2/v1/certs"

    def env(self) -> dict[str, str]:
        """svc's settings for this stand-in (and the products a test sells)."""
        return {
            "SVC_GOOGLE_SERVICE_ACCOUNT_FILE": str(self.key_file),
            "SVC_GOOGLE_PACKAGE_NAME": PACKAGE,
            "SVC_GOOGLE_PRODUCTS": "credits_small=1000,credits_large=5000",
            "SVC_GOOGLE_PLAY_API_URL": self.url,
            "SVC_GOOGLE_TOKEN_URL": self.token_url,
            "SVC_GOOGLE_OIDC_CERTS_URL": self.certs_url,
            "SVC_GOOGLE_PUSH_AUDIENCE": PUSH_AUDIENCE,
            "SVC_GOOGLE_PUSH_SERVICE_ACCOUNT": PUSH_ACCOUNT,
        }

    def add(self, token: str, purchase: Purchase) -> None:
        with self.lock:
            self.purchases[token] = purchase

    def push_token(self, **overrides: Any) -> str:
        """A Pub/Sub push token as Google signs it; ``overrides`` change its claims (a
        value None drops the claim), ``key``/``kid`` sign it otherwise."""
        key = overrides.pop("key", self.push_key)
        kid = overrides.pop("kid", self.push_kid)
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": "https://accounts.google.com",
            "aud": PUSH_AUDIENCE,
            "email": PUSH_ACCOUNT,
            "email_verified": True,
            "sub": "112233445566778899",
            "iat": now,
            "exp": now + 3600,
        }
        claims.update(overrides)
        return sign_jwt(key, kid, {k: v for k, v in claims.items() if v is not None})

    def push(self, notification: dict[str, Any], message_id: str | None = None) -> bytes:
        """A Pub/Sub push body carrying ``notification`` (a DeveloperNotification)."""
        data = base64.b64encode(json.dumps({"version": "1.0", **notification}).encode())
        return json.dumps(
            {
                "message": {
                    "data": data.decode(),
                    "messageId": message_id or secrets.token_hex(8),
                    "publishTime": "2026-01-01T00:00:00Z",
                },
                "subscription": "projects/svc-project/subscriptions/play-rtdn",
            }
        ).encode()

    def answer(self, method: str, path: str, auth: str, raw: bytes) -> Answer:
        """(status, JSON body, headers) of one request."""
        if method == "GET" and path == "/oauth2/v1/certs":
            self.calls.cert_fetches += 1
            return 200, {self.push_kid: self.push_cert}, {"cache-control": "public, max-age=300"}
        if method == "POST" and path == "/token":
            return self._token(raw)
        consume = path.endswith(":consume")
        if consume != (method == "POST") or not path.startswith(_PREFIX):
            return 404, {"error": {"code": 404, "message": "Not found"}}, {}
        if auth.removeprefix("Bearer ") not in self._access:
            return 401, {"error": {"code": 401, "status": "UNAUTHENTICATED"}}, {}
        if self.down or (consume and self.consume_down):
            return 503, {"error": {"code": 503, "status": "UNAVAILABLE"}}, {}
        parts = [unquote(p) for p in path.removesuffix(":consume")[len(_PREFIX) :].split("/")]
        package, _, _, product, _, token = parts
        with self.lock:
            return self._purchase(package, product, token, consume=consume)

    def _purchase(self, package: str, product: str, token: str, *, consume: bool) -> Answer:
        found = self.purchases.get(token)
        if found is None or (found.package, found.product_id) != (package, product):
            return 404, {"error": {"code": 404, "status": "NOT_FOUND"}}, {}
        if not consume:
            self.calls.gets += 1
            return 200, found.body(), {}
        self.calls.consumes.append((token, time.time()))
        if found.consumed or found.state != 0:
            return 400, {"error": {"code": 400, "status": "FAILED_PRECONDITION"}}, {}
        found.consumed = 1
        return 200, {}, {}

    def _token(self, raw: bytes) -> Answer:
        form = parse_qs(raw.decode())
        assertion = form.get("assertion", [""])[0]
        try:
            claims = jwt.decode(
                assertion,
                certs={self.account_kid: self.account_cert},
                audience=GOOGLE_TOKEN_AUDIENCE,
            )
            assert form["grant_type"] == ["urn:ietf:params:oauth:grant-type:jwt-bearer"]
            assert claims["iss"] == SERVICE_ACCOUNT
            assert claims["scope"] == SCOPE
        except (ValueError, KeyError, AssertionError):
            self.calls.refused_assertions += 1
            return 400, {"error": "invalid_grant"}, {}
        access = secrets.token_urlsafe(24)
        with self.lock:
            self._access.add(access)
            self.calls.tokens += 1
        return 200, {"access_token": access, "expires_in": 3599, "token_type": "Bearer"}, {}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        google = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                auth = self.headers.get("authorization", "")
                status, body, headers = google.answer(method, self.path, auth, raw)
                out = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(out)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(out)

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

        return Handler

    def __enter__(self) -> FakeGoogle:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
