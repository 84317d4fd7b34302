"""svc's exceptions, all of them, and the errors the API returns (each mapped to one HTTP
status and one OpenAI-shaped body).

The tree::

    Exception
    ├── ApiError                a request refused, as its client sees it (an ``ErrorKind``:
    │   │                       status, OpenAI body, headers); answered as it is
    │   └── KeyRecordMissing    Redis lost a key's record: restore it and try once more
    └── SvcError                something inside svc went wrong; a client sees it only as
        │                       ``app.runtime.public_error`` makes it (503 or 500, naming
        │                       nothing inside)
        ├── UpstreamError       an upstream failed (``reason``; ``client_error``: the
        │                       request's fault, a 400 with no failover; ``outcome``:
        │                       how, as the metrics count it)
        ├── StoreError          the durable store failed or cannot be reached (503)
        │   └── StoreConflict   a write broke a constraint (the id exists, or its owner
        │                       does not)
        ├── LedgerUnreachable   Redis did not answer a running stream's heartbeat
        ├── StreamCut           the shutdown's grace period ran out for a stream
        ├── ClientDisconnected  the client left before its request body arrived (499)
        ├── TargetRefused       a webhook URL may not be called (``reason`` names no
        │                       address)
        ├── AdMobRejected       an AdMob verification callback is malformed (``reason``)
        ├── KeysUnavailable     AdMob's verifier keys could not be had (503)
        ├── PurchaseRefused     a verified store transaction svc does not credit
        │                       (``reason``: another product, not a consumable, …)
        ├── RedisReplyError     Redis answered an operator's own command (``svc admin
        │                       redis``) with an error reply (the message is Redis's)
        └── ConfigError         the configuration cannot be run on (start-up, ``svc
            │                   admin``); the message says what and where
            ├── StartupError    the configured servers or places are unfit (Redis
            │                   evicting or not answering, the port taken, the data
            │                   folder unwritable, …)
            ├── SettingsError   an ``SVC_*`` value cannot be used (also a
            │                   ``ValueError``); the message names the variable
            ├── ModelsFileError the models file is broken (also a ``ValueError``)
            ├── ProxyConfigError a proxy variable names a URL svc cannot use (also a
            │                   ``ValueError``; the message names no credential)
            └── ScriptLoadError a Lua script names an include that is not there

Raised and caught inside one module, never past it, and so kept there: the upstream
client's ``ServerDisconnected`` and ``ProxyRefused`` (``ConnectionError``s, caught with
every other failed connection, ``app.upstream.http11``), the RSGI lifespan's
``LifespanFailed`` (``app.http.rsgi.lifespan``) and the relay's ``ClientLeft``
(``app.completion.relay``). Redis's and the database drivers' own exceptions are turned into
these at their one client (``app.kv``, ``app.store``).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from app.core.error_kinds import CAP_HELD_RETRY_AFTER_S as CAP_HELD_RETRY_AFTER_S
from app.core.error_kinds import ErrorKind as ErrorKind


class ErrorDetail(msgspec.Struct, omit_defaults=False):
    message: str
    type: str
    param: str | None
    code: str


class ErrorBody(msgspec.Struct):
    error: ErrorDetail


class ApiError(Exception):
    """An error the client sees. The message is public: it never carries internals."""

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.param = param
        self.headers = {**kind.fixed_headers, **(headers or {})}

    @property
    def status(self) -> int:
        return self.kind.status

    def body(self) -> bytes:
        """The JSON error body in the OpenAI shape."""
        _, err_type, code = self.kind.value
        detail = ErrorDetail(message=self.message, type=err_type, param=self.param, code=code)
        return msgspec.json.encode(ErrorBody(error=detail))


class KeyRecordMissing(ApiError):
    """Redis has no record of a key the worker knows (Redis lost its data): the caller may
    restore the record from the durable store and try once more; otherwise it is a 401."""


class SvcError(Exception):
    """Something inside svc went wrong (see the module's tree)."""


UpstreamOutcome = Literal["2xx", "3xx", "4xx", "5xx", "timeout", "connect_error", "stream_error"]
"""How an upstream attempt ended, as ``svc_upstream_attempts_total`` and
``svc_upstream_errors_total`` count it: ``2xx`` answered and streamed; ``3xx``/``4xx``/``5xx``
answered with such a status; ``timeout`` a connect, first-token or idle timeout ran out;
``connect_error`` no connection, or one closed before the response began; ``stream_error``
a response that cannot be relayed (closed early, malformed, an error event in it)."""


class UpstreamError(SvcError):
    """An upstream failed. Before the first byte the alias's next upstream is tried, unless
    the failure is a ``client_error`` (HTTP 400/413/422: the request's fault).

    ``outcome`` is named where the failure is seen (the HTTP client knows a status from a
    timeout); unnamed, it is ``4xx`` for a client error and ``stream_error`` otherwise."""

    def __init__(
        self, reason: str, *, client_error: bool = False, outcome: UpstreamOutcome | None = None
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.client_error = client_error
        self.outcome: UpstreamOutcome = outcome or ("4xx" if client_error else "stream_error")


class StoreError(SvcError):
    """The durable store failed or cannot be reached (locked, I/O error, gone)."""


class StoreConflict(StoreError):
    """A write broke a constraint: the id exists already, or the account does not."""


class LedgerUnreachable(SvcError):
    """Redis did not answer a stream's heartbeat: its hold may lapse, so the stream ends."""


class StreamCut(SvcError):
    """Raised inside a relay that was cut at the end of the grace period."""


class ClientDisconnected(SvcError):
    """The client closed the connection before its request body arrived in full."""


class TargetRefused(SvcError):
    """A webhook URL may not be called; ``reason`` says why (it names no address)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class AdMobRejected(SvcError):
    """An AdMob server-side verification callback cannot be read (no signature at its end,
    a parameter missing or twice, a number that is not one, …); ``reason`` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class KeysUnavailable(SvcError):
    """AdMob's verifier keys could not be fetched or read, and none are held: a callback
    cannot be checked now (503, so the ad network tries again later)."""


class PurchaseRefused(SvcError):
    """A store transaction whose signature verified, that svc does not credit (``reason``
    says why: a product svc does not sell, not a consumable, revoked): a 400 when the app
    sends it, ignored when a store's notification names it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RedisReplyError(SvcError):
    """Redis answered a command an operator typed (``svc admin redis``) with an error reply;
    the message is Redis's own (the operator sees it as it is)."""


class ConfigError(SvcError):
    """The configuration cannot be run on; the message says what and where."""


class StartupError(ConfigError):
    """The configuration or its servers are unfit to run on; the message says why."""


class SettingsError(ConfigError, ValueError):
    """An ``SVC_*`` variable (or the ``svc serve`` option standing for it) holds a value svc
    cannot use; the message names the variable and what it takes."""


class ModelsFileError(ConfigError, ValueError):
    """The models file is broken; the message names the file, line and field."""


class ProxyConfigError(ConfigError, ValueError):
    """A proxy variable names a URL svc cannot use; the message names no credential."""


class ScriptLoadError(ConfigError):
    """A script names an include that does not exist, or one outside ``lua/lib/``."""


def service_unavailable() -> ApiError:
    """Redis or the durable store cannot be reached: fail closed."""
    return ApiError(
        ErrorKind.SERVICE_UNAVAILABLE,
        "The service is temporarily unavailable. Please retry shortly.",
    )


def invalid_api_key() -> ApiError:
    return ApiError(
        ErrorKind.INVALID_API_KEY,
        "Incorrect API key provided. Pass a valid svc API key as 'Authorization: Bearer <key>'.",
    )


def account_not_found(pid: str) -> ApiError:
    """An admin route or command named an account the durable store does not know."""
    return ApiError(ErrorKind.ACCOUNT_NOT_FOUND, f"No account '{pid[:64]}'.", param="pid")


def external_id_taken() -> ApiError:
    """Another account has the external id an account creation or update asked for."""
    return ApiError(
        ErrorKind.EXTERNAL_ID_TAKEN,
        "Another account has this external_id: an external_id names one account.",
        param="external_id",
    )


def invalid_stripe_signature(problem: str) -> ApiError:
    """A Stripe webhook event svc cannot trust (``problem``: what is wrong with its
    ``Stripe-Signature``, naming neither the header's value nor a secret). A 400, as Stripe's
    guides answer one; nothing is written for it."""
    return ApiError(
        ErrorKind.INVALID_STRIPE_SIGNATURE,
        f"{problem} svc accepts only events Stripe signed with this endpoint's signing secret.",
        param="Stripe-Signature",
    )


def invalid_push_token(problem: str) -> ApiError:
    """A Pub/Sub push svc cannot trust (``problem``: what is wrong with its OIDC token,
    naming none of the token's contents): a 401, nothing written."""
    return ApiError(
        ErrorKind.INVALID_PUSH_TOKEN,
        f"{problem} svc accepts only notifications Pub/Sub pushes with an OIDC token of the "
        "configured service account and audience.",
        param="Authorization",
    )


def invalid_google_purchase(problem: str) -> ApiError:
    """A Google Play purchase that can never be credited (``problem``: what Google said of
    it): a 400, nothing written."""
    return ApiError(ErrorKind.INVALID_GOOGLE_PURCHASE, problem, param="purchase_token")


def invalid_apple_signature(field: str, problem: str) -> ApiError:
    """App Store signed data (``field``) svc cannot trust or is not this app's (``problem``:
    what is wrong, naming no part of the data). A 400; nothing is written for it."""
    return ApiError(
        ErrorKind.INVALID_APPLE_SIGNATURE,
        f"{problem} svc accepts only data the App Store signed for this app and environment.",
        param=field,
    )


def model_not_allowed(model: str, *, routed: bool = False) -> ApiError:
    """The key's ``allowed_models`` leave ``model`` out (``routed``: svc-auto, which may
    route to a model the key does not allow)."""
    reason = " It routes to models this key does not allow." if routed else ""
    return ApiError(
        ErrorKind.MODEL_NOT_ALLOWED,
        f"This API key may not use the model '{model[:100]}'.{reason} Use a model GET "
        "/v1/models lists for this key, or add it to the key's allowed_models.",
        param="model",
    )


def invalid_value(param: str, message: str) -> ApiError:
    return ApiError(ErrorKind.INVALID_VALUE, message, param=param)


def repeated_header(name: str) -> ApiError:
    """A header svc takes one value of (``svc-max-credits``, ``Idempotency-Key``) sent more
    than once: which the client meant is unknown (a proxy may have added one), so neither
    is taken."""
    return invalid_value(name, f"The {name} header was sent more than once: send it once.")


def stream_required() -> ApiError:
    """A request without ``stream: true`` where the operator refuses those
    (``SVC_NON_STREAMING=refuse``): svc answers every request as a stream, which a client
    that did not ask for one cannot read, though it is charged."""
    return ApiError(
        ErrorKind.STREAM_REQUIRED,
        "This server answers streamed requests only: send 'stream: true' (with an SDK, "
        "stream=True) and read the answer as a stream.",
        param="stream",
    )
