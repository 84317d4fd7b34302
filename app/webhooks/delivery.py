"""Deliveries: every worker sends the deliveries that are due, at least once each.

A delivery is taken with a lease in the store (one worker sends it; a worker that dies
mid-send leaves it to another once the lease ends), sent as a signed POST, and its
attempt recorded. A 2xx answer delivers it; anything else (another status, no answer
within the timeout, a refused address) is retried after 1, 2, 4 … times the first delay
(at most an hour apart) until 24 hours after the event, then given up (``failed``).
Nothing here runs on a request's path, and a slow receiver holds up only its own sends.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from app import __version__
from app.core.errors import StoreError, TargetRefused
from app.core.metrics import METRICS
from app.core.proxies import proxy_for
from app.store import DeliveryRecord, DueDelivery, Store
from app.upstream.outbound import OutboundClients
from app.webhooks.events import EventBody
from app.webhooks.signing import SIGNATURE_HEADER, signature, webhook_secret
from app.webhooks.targets import AllowList, Target, check_url

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("svc.webhooks")

RETRY_WINDOW_S = 24 * 3600  # from the event: after this, a delivery is given up
MAX_RETRY_DELAY_S = 3600.0
LEASE_MARGIN_S = 5
CLAIM_BATCH = 50  # deliveries one worker takes per round
SENDS_AT_ONCE = 16  # per worker
USER_AGENT = f"svc-webhooks/{__version__}"
ANSWER_KEPT = 65_536  # of a receiver's answer, read (and dropped) before the connection is freed


def next_attempt(delivery: DeliveryRecord, now: int, first_delay_s: float) -> int | None:
    """When to try again after attempt number ``delivery.attempt`` failed; None when the
    next try would fall past the retry window."""
    delay = min(first_delay_s * 2 ** max(0, delivery.attempt - 1), MAX_RETRY_DELAY_S)
    at = now + max(1, round(delay))
    return None if at > delivery.created + RETRY_WINDOW_S else at


def body_of(delivery: DeliveryRecord) -> bytes:
    """The JSON body of every attempt of a delivery."""
    event = EventBody(
        id=delivery.event_id,
        type=delivery.type,
        created=delivery.created,
        data=msgspec.Raw(delivery.data.encode()),
    )
    return msgspec.json.encode(event)


class Deliverer:
    """Sends this worker's share of the due deliveries, round after round."""

    def __init__(
        self,
        store: Store,
        pepper: bytes,
        allow: AllowList,
        *,
        poll_s: float = 1.0,
        first_retry_s: float = 30.0,
        timeout_s: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.pepper = pepper
        self.allow = allow
        self.poll_s = poll_s
        self.first_retry_s = first_retry_s
        self.timeout_s = timeout_s
        self.clock = clock
        self._clients = OutboundClients(timeout_s=timeout_s, max_connections=64)
        self._sending = asyncio.Semaphore(SENDS_AT_ONCE)

    async def deliver_due(self) -> int:
        """Take the deliveries due now and send them; how many were attempted."""
        now = int(self.clock())
        # long enough for the send; a worker that dies mid-send delays it by this much
        lease_until = now + int(self.timeout_s) + LEASE_MARGIN_S
        taken = await self.store.claim_deliveries(now, lease_until, CLAIM_BATCH)
        await asyncio.gather(*(self._deliver(d) for d in taken))
        return len(taken)

    async def _deliver(self, due: DueDelivery) -> None:
        async with self._sending:
            status_code, error = await self._send(due)
        d = due.delivery
        now = int(self.clock())
        attempt = d.attempt + 1
        if status_code is not None and 200 <= status_code < 300:
            state = msgspec.structs.replace(d, status="delivered", next_attempt_at=None, error=None)
        else:
            again = next_attempt(
                msgspec.structs.replace(d, attempt=attempt), now, self.first_retry_s
            )
            state = msgspec.structs.replace(
                d,
                status="pending" if again is not None else "failed",
                next_attempt_at=again,
                error=error,
            )
        METRICS.webhook_attempts.labels(state.status).inc()
        await self.store.record_delivery(
            msgspec.structs.replace(
                state, attempt=attempt, status_code=status_code, lease_until=0, updated_at=now
            )
        )

    async def _send(self, due: DueDelivery) -> tuple[int | None, str | None]:
        """(the receiver's status, None) or (None, why no answer came)."""
        import httpx  # imported where a call is made (app.upstream.outbound says why)

        body = body_of(due.delivery)
        secret = webhook_secret(self.pepper, due.delivery.webhook_id, due.secret_salt)
        headers = {
            "content-type": "application/json",
            "user-agent": USER_AGENT,
            SIGNATURE_HEADER: signature(secret, int(self.clock()), body),
        }
        try:
            async with asyncio.timeout(self.timeout_s):
                target = await check_url(due.url, self.allow)
                return await self._post(target, body, headers), None
        except TargetRefused as exc:
            return None, f"refused: {exc.reason}"
        except (TimeoutError, httpx.TimeoutException):
            return None, f"no answer within {self.timeout_s:g} s"
        except (httpx.HTTPError, OSError):
            return None, "connection failed"

    async def _post(self, target: Target, body: bytes, headers: dict[str, str]) -> int:
        """POST to the target, directly to one of the addresses its check passed (the name
        still in ``Host`` and, for https, in the TLS handshake), or through the proxy."""
        import httpx  # imported where a call is made (app.upstream.outbound says why)

        url = httpx.URL(target.parts.geturl())
        proxy = proxy_for(url.scheme, url.host)
        if proxy is not None or not target.addresses:
            return await self._exchange(self._clients.client(proxy), url, body, headers, {})
        pinned_headers = {**headers, "host": url.netloc.decode("ascii")}
        extensions = {"sni_hostname": url.host} if url.scheme == "https" else {}
        for address in target.addresses[:-1]:
            try:
                return await self._exchange(
                    self._clients.client(None),
                    url.copy_with(host=address),
                    body,
                    pinned_headers,
                    extensions,
                )
            except httpx.ConnectError:
                continue  # the next address, as a resolver's caller tries them in turn
        return await self._exchange(
            self._clients.client(None),
            url.copy_with(host=target.addresses[-1]),
            body,
            pinned_headers,
            extensions,
        )

    @staticmethod
    async def _exchange(
        client: httpx.AsyncClient,
        url: httpx.URL,
        body: bytes,
        headers: dict[str, str],
        extensions: dict[str, str],
    ) -> int:
        request = client.build_request("POST", url, content=body, headers=headers)
        request.extensions.update(extensions)
        response = await client.send(request, stream=True)
        try:
            read = 0
            async for chunk in response.aiter_raw():  # what it says is not kept
                read += len(chunk)
                if read >= ANSWER_KEPT:
                    break
        finally:
            await response.aclose()
        return response.status_code

    async def run(self) -> None:
        """Deliver every ``poll_s`` (jittered) until cancelled; failures wait a round."""
        try:
            while True:
                await asyncio.sleep(self.poll_s * random.uniform(0.5, 1.5))
                try:
                    await self.deliver_due()
                except (StoreError, OSError) as exc:
                    METRICS.background_errors.labels("webhooks").inc()
                    log.warning(
                        "webhook deliveries failed, retrying next round: %s", type(exc).__name__
                    )
        finally:
            await self.close()

    async def close(self) -> None:
        await self._clients.close()
