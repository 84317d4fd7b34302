"""The operators' tokens: ``SVC_ADMIN_TOKEN`` (the admin API) and ``SVC_METRICS_TOKEN``
(``GET /metrics``), each compared in constant time with the bearer a request presents.

A wrong one is a failed authentication (401, ``admin_unauthorized``) counted against the
client's address, each by its throttle (``app.keys.throttle``): wrong admin tokens by the
admin throttle, a counter of their own, so wrong API keys never lock the operator out, and an
address over its limit is refused (429) the right token too; wrong metrics tokens by the
throttle of wrong API keys."""

from __future__ import annotations

import hmac

from app.core.errors import ApiError, ErrorKind
from app.keys.format import bearer_secret
from app.keys.throttle import FailedAuthThrottle

ADMIN_REFUSED = "A valid admin token is required."
METRICS_REFUSED = "A valid metrics token is required."


async def _check(
    throttle: FailedAuthThrottle,
    address: str,
    authorization: str | None,
    expected: str | None,
    message: str,
) -> None:
    """Refuse (401, counted by ``throttle`` against ``address``) an ``authorization`` that
    is not ``Bearer <expected>``; an unset ``expected`` refuses everyone."""
    given = bearer_secret(authorization) or ""
    async with throttle.guarding(address):
        if not expected or not hmac.compare_digest(given.encode(), expected.encode()):
            raise ApiError(ErrorKind.ADMIN_UNAUTHORIZED, message)


class OperatorTokens:
    """Who may act as the operator (the admin API) and read the metrics."""

    def __init__(
        self,
        admin_token: str | None,
        metrics_token: str | None,
        *,
        auth_throttle: FailedAuthThrottle,
        admin_throttle: FailedAuthThrottle,
    ) -> None:
        self._admin_token = admin_token
        self._metrics_token = metrics_token
        self._auth_throttle = auth_throttle
        self._admin_throttle = admin_throttle

    async def admit_admin(self, authorization: str | None, address: str) -> None:
        """Nothing for ``Authorization: Bearer <SVC_ADMIN_TOKEN>``; else 401 (everyone
        while the token is unset), counted by the admin throttle, and 429 for any token from
        an address over that throttle's limit (``FailedAuthThrottle.refuse_over_limit``)."""
        await self._admin_throttle.refuse_over_limit(address)
        await _check(self._admin_throttle, address, authorization, self._admin_token, ADMIN_REFUSED)

    async def admit_metrics(self, authorization: str | None, address: str) -> None:
        """Nothing while ``SVC_METRICS_TOKEN`` is unset (the metrics are open) or for
        ``Authorization: Bearer <SVC_METRICS_TOKEN>``; else 401, counted with wrong API
        keys."""
        if not self._metrics_token:
            return
        await _check(
            self._auth_throttle, address, authorization, self._metrics_token, METRICS_REFUSED
        )
