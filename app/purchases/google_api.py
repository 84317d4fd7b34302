"""Google Play's Developer API, as svc asks it about one-time products: the service
account's OAuth access token (google-auth), ``purchases.products.get`` and ``:consume``.

google-auth's token refresh is synchronous: it runs in a thread with google-auth's own
transport, one refresh at a time per worker, and the token is kept until google-auth finds
it near its expiry. The API itself is called with httpx. Every call is bounded; Google
down, slow or answering 5xx (or refusing svc's own credentials) is a 503 with nothing
written, so the app (or Pub/Sub) retries.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

import msgspec

from app import __version__
from app.core.errors import ApiError, service_unavailable
from app.core.proxies import proxy_for
from app.upstream.outbound import OutboundClients

if TYPE_CHECKING:
    import httpx
    from google.auth.transport.requests import Request as GoogleRequest
    from google.oauth2.service_account import Credentials

log = logging.getLogger("svc.purchases.google")

SCOPE = "https://www.googleapis.com/auth/androidpublisher"
USER_AGENT = f"svc-purchases/{__version__}"
TIMEOUT_S = 10.0  # each call to Google (the token's refresh included)

# Play's purchaseState
PURCHASED, CANCELLED, PENDING = 0, 1, 2
TEST_PURCHASE = 0  # purchaseType: a license tester's purchase, not charged


class PlayPurchase(msgspec.Struct, kw_only=True):
    """The fields of ``purchases.products.get``'s ProductPurchase svc reads (Google omits
    a field at its default, so the states default to 0 as Google's proto does)."""

    purchase_state: int = msgspec.field(default=PURCHASED, name="purchaseState")
    consumption_state: int = msgspec.field(default=0, name="consumptionState")
    order_id: str | None = msgspec.field(default=None, name="orderId")
    purchase_type: int | None = msgspec.field(default=None, name="purchaseType")
    quantity: int | None = None
    account_token: str | None = msgspec.field(default=None, name="obfuscatedExternalAccountId")
    product_id: str | None = msgspec.field(default=None, name="productId")


def credentials(info: dict[str, Any], token_url: str | None) -> Credentials:
    """The service account's credentials for the Play Developer API; ``token_url``
    replaces the key file's ``token_uri``. ``ValueError`` when the file is not a service
    account's key."""
    from google.oauth2 import service_account  # only a worker that sells on Play loads it

    if token_url:
        info = {**info, "token_uri": token_url}
    made = service_account.Credentials.from_service_account_info(  # type: ignore[no-untyped-call]
        info, scopes=[SCOPE]
    )
    return cast("Credentials", made)


class PlayApi:
    """One app's purchases on Google Play (``package``), asked at ``api_url``."""

    def __init__(
        self, creds: Credentials, *, package: str, api_url: str, timeout_s: float = TIMEOUT_S
    ) -> None:
        self.credentials = creds
        self.package = package
        self.api_url = api_url.rstrip("/")
        self.timeout_s = timeout_s
        self._refreshing = asyncio.Lock()
        self._clients = OutboundClients(timeout_s=timeout_s)

    def _url(self, product_id: str, token: str) -> str:
        return (
            f"{self.api_url}/androidpublisher/v3/applications/{quote(self.package, safe='')}"
            f"/purchases/products/{quote(product_id, safe='')}/tokens/{quote(token, safe='')}"
        )

    async def purchase(self, product_id: str, token: str) -> PlayPurchase | None:
        """The purchase ``token`` of ``product_id``; None when Google does not know it (for
        this app and product). 503 when Google cannot be asked."""
        response = await self._call("GET", self._url(product_id, token))
        if response.status_code in (400, 404, 410):
            return None
        if response.status_code != 200:
            raise self._failed("purchases.products.get", response.status_code)
        try:
            return msgspec.json.decode(response.content, type=PlayPurchase)
        except msgspec.DecodeError:
            log.warning("Google Play answered purchases.products.get with an unreadable body")
            raise service_unavailable() from None

    async def consume(self, product_id: str, token: str) -> bool:
        """Consume the purchase (so the user may buy the product again and Google never
        refunds it as unacknowledged): True when it is consumed now or was before (Google
        refuses the second consume as a 4xx), False when Google could not be asked."""
        try:
            response = await self._call("POST", self._url(product_id, token) + ":consume")
        except ApiError:  # Google unreachable (logged): the next send of the token consumes it
            return False
        status = response.status_code
        if status in (401, 403, 429) or status >= 500:
            log.warning("Google Play answered consume with %d", status)
            return False
        return True

    async def _call(self, method: str, url: str) -> httpx.Response:
        import httpx  # imported where a call is made (app.upstream.outbound says why)

        token = await self._token()
        target = httpx.URL(url)
        client = self._clients.client(proxy_for(target.scheme, target.host))
        headers = {"authorization": f"Bearer {token}", "user-agent": USER_AGENT}
        try:
            async with asyncio.timeout(self.timeout_s):
                response = await client.request(method, target, headers=headers)
        except (TimeoutError, httpx.HTTPError) as exc:
            log.warning("Google Play could not be reached: %s", type(exc).__name__)
            raise service_unavailable() from None
        if response.status_code in (401, 403):
            # svc's own credentials are refused: an operator's fix, never the caller's fault
            log.error(
                "Google Play refused svc's service account (%d): grant it access to the app "
                "in Play Console",
                response.status_code,
            )
            raise service_unavailable()
        return response

    def _failed(self, call: str, status: int) -> Exception:
        log.warning("Google Play answered %s with %d", call, status)
        return service_unavailable()

    async def _token(self) -> str:
        """The access token, refreshed (off the event loop, one refresh at a time) when
        google-auth finds it missing or near its expiry."""
        if not self.credentials.valid:
            async with self._refreshing:
                if not self.credentials.valid:  # another caller's refresh may have landed
                    await self._refresh()
        return str(self.credentials.token)

    async def _refresh(self) -> None:
        from google.auth.exceptions import GoogleAuthError

        request = _bounded_request(self.timeout_s)
        try:
            async with asyncio.timeout(self.timeout_s):
                await asyncio.to_thread(self.credentials.refresh, request)
        except (TimeoutError, GoogleAuthError) as exc:
            # named by its type alone: its message may quote the token endpoint's answer
            log.warning("Google's token endpoint gave svc no access token: %s", type(exc).__name__)
            raise service_unavailable() from None
        finally:
            request.session.close()

    async def close(self) -> None:
        await self._clients.close()


def _bounded_request(timeout_s: float) -> GoogleRequest:
    """google-auth's own transport (requests), with svc's timeout on every call it makes
    (google-auth's default is two minutes)."""
    from google.auth.transport.requests import Request

    class Bounded(Request):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            kwargs["timeout"] = timeout_s
            return super().__call__(*args, **kwargs)  # type: ignore[no-untyped-call]

    return Bounded()
