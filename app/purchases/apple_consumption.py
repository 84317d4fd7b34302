"""The consumption data svc sends Apple for a CONSUMPTION_REQUEST (a customer asked for a
refund of a purchase), from the ledger, with the library's App Store Server API client.

How much of a purchase was spent: the credits the purchase still holds on the ledger (its
credits less what refunds took back), less what the account's purchased pool holds now,
never below 0 (``spent_credits``). Purchased credits are one pool, so svc cannot tell
which purchase a spent credit came from; it counts the credits left in the pool as this
purchase's first, which is the smallest share the ledger allows (in the customer's favour).
Apple gets it as ``consumptionPercentage``, in milliunits of the purchase's credits, rounded
down, with ``deliveryStatus`` DELIVERED when svc credited the purchase (UNDELIVERED_OTHER
when it did not: an unknown transaction, or one kept unmatched), ``customerConsented``
(``SVC_APPLE_CONSUMPTION_CONSENT=true`` says the app asked) and ``sampleContentProvided``
false (svc offers no sample of a purchase).
"""

from __future__ import annotations

import logging

from appstoreserverlibrary.api_client import APIException, AsyncAppStoreServerAPIClient
from appstoreserverlibrary.models.ConsumptionRequest import ConsumptionRequest
from appstoreserverlibrary.models.DeliveryStatus import DeliveryStatus
from appstoreserverlibrary.models.Environment import Environment

from app.accounts.accounts import Accounts
from app.core.errors import service_unavailable
from app.purchases.apple import WHOLE
from app.purchases.apple_config import AppleApiKey
from app.store import PurchaseRecord
from app.store.purchases import PURCHASE_GRANTED

log = logging.getLogger("svc.purchases.apple")


def spent_credits(purchase: PurchaseRecord, purchased_available: int) -> int:
    """The credits of ``purchase`` spent, its account's purchased pool holding
    ``purchased_available`` now (see the module's docstring)."""
    held = (purchase.credits or 0) - purchase.refund_taken - purchase.dispute_taken
    return max(0, held - max(0, purchased_available))


async def consumption_of(purchase: PurchaseRecord | None, accounts: Accounts) -> ConsumptionRequest:
    """What svc tells Apple of ``purchase`` (None: svc has none of the transaction)."""
    if purchase is None or purchase.status != PURCHASE_GRANTED or not purchase.account_pid:
        return _request(DeliveryStatus.UNDELIVERED_OTHER, 0)
    balance = await accounts.balance(purchase.account_pid)
    credits = purchase.credits or 0
    spent = spent_credits(purchase, balance.purchased_available)
    return _request(DeliveryStatus.DELIVERED, spent * WHOLE // credits if credits else 0)


def _request(delivery: DeliveryStatus, share: int) -> ConsumptionRequest:
    return ConsumptionRequest(
        customerConsented=True,
        sampleContentProvided=False,
        deliveryStatus=delivery,
        consumptionPercentage=share,
    )


class _Client(AsyncAppStoreServerAPIClient):
    """The library's client, at ``SVC_APPLE_API_URL`` when it is set (a test's stand-in)."""

    def __init__(self, key: AppleApiKey, bundle_id: str, environment: Environment) -> None:
        super().__init__(key.private_key, key.key_id, key.issuer_id, bundle_id, environment)
        self.url = key.url

    def _get_full_url(self, path: str) -> str:
        return (self.url or self._base_url) + path


async def send_consumption(
    key: AppleApiKey,
    bundle_id: str,
    environment: str,
    transaction_id: str,
    request: ConsumptionRequest,
) -> bool:
    """PUT the consumption data of ``transaction_id`` (the library's
    ``send_consumption_information``): True when Apple took it, False when it refused it
    for good (a stale request, a key without access: asking again will not help, so it is
    logged), a 503 when Apple could not be reached or asks to retry (5xx, 429)."""
    import httpx  # here: a worker that never sends any loads none of it (test_worker_imports)

    client = _Client(key, bundle_id, Environment(environment))
    try:
        await client.send_consumption_information(transaction_id, request)
    except httpx.HTTPError as exc:
        log.warning("consumption data not sent (App Store Server API: %s)", type(exc).__name__)
        raise service_unavailable() from None
    except APIException as exc:
        if exc.http_status_code >= 500 or exc.http_status_code == 429:
            raise service_unavailable() from None
        log.warning(
            "consumption data refused by the App Store Server API: %s %s",
            exc.http_status_code,
            exc.api_error,
        )
        return False
    finally:
        await client.async_close()  # type: ignore[no-untyped-call]  # the library's, untyped
    return True
