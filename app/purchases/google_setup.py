"""Google Play's settings (``SVC_GOOGLE_*``) made into ``GooglePlay``, or None while Google
Play is off: on once the package name, the products and the service account are set, its
notifications once the push audience and service account are set too."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from app.core.errors import SettingsError
from app.core.settings import Settings
from app.core.urls import secure_url
from app.kv.client import RedisClient
from app.kv.layout import KeySpace
from app.purchases.account_token import AccountTokens
from app.purchases.google import GooglePlay
from app.purchases.google_api import PlayApi, credentials
from app.purchases.google_push import PushVerifier
from app.purchases.purchases import MAX_PURCHASE_CREDITS, Purchases
from app.store import Store


def parse_products(text: str, variable: str) -> dict[str, int]:
    """``product_id=credits,…`` as product id → credits (a positive integer each);
    ``SettingsError`` naming ``variable`` otherwise."""
    products: dict[str, int] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        product, sep, amount = (s.strip() for s in item.partition("="))
        if not sep or not product or not (amount.isascii() and amount.isdigit()):
            raise SettingsError(
                f"{variable}: {item[:80]!r} is not product_id=credits (credits: a positive integer)"
            )
        credits = int(amount)
        if not 0 < credits <= MAX_PURCHASE_CREDITS:
            raise SettingsError(f"{variable}: {product[:80]!r} must grant 1 to "
                                f"{MAX_PURCHASE_CREDITS} credits")  # fmt: skip
        if product in products:
            raise SettingsError(f"{variable}: {product[:80]!r} is listed twice")
        products[product] = credits
    return products


def google_play(
    settings: Settings,
    *,
    purchases: Purchases,
    tokens: AccountTokens,
    store: Store,
    redis: RedisClient,
    layout: KeySpace,
    clock: Callable[[], float],
) -> GooglePlay | None:
    """Google Play as the settings configure it; None while it is off."""
    products = parse_products(settings.google_products, "SVC_GOOGLE_PRODUCTS")
    key_file = settings.google_service_account_file
    if not (settings.google_package_name and products and key_file):
        return None
    urls = {
        "SVC_GOOGLE_PLAY_API_URL": settings.google_play_api_url,
        "SVC_GOOGLE_TOKEN_URL": settings.google_token_url or "https://token.uri",
        "SVC_GOOGLE_OIDC_CERTS_URL": settings.google_oidc_certs_url,
    }
    for variable, url in urls.items():
        if not secure_url(url):  # svc sends bearer tokens there, or trusts keys from it
            raise SettingsError(f"{variable} must be an https:// URL (http:// only to loopback)")
    try:
        info = json.loads(Path(key_file).read_text(encoding="utf-8"))
        creds = credentials(info, settings.google_token_url)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        # the exception's type only: its message could quote the key file
        raise SettingsError(
            f"SVC_GOOGLE_SERVICE_ACCOUNT_FILE: {key_file} is not a readable service account "
            f"key file (JSON, as Google Cloud's console downloads it): {type(exc).__name__}"
        ) from None
    api = PlayApi(creds, package=settings.google_package_name, api_url=settings.google_play_api_url)
    push = None
    if settings.google_push_audience and settings.google_push_service_account:
        push = PushVerifier(
            settings.google_oidc_certs_url,
            audience=settings.google_push_audience,
            email=settings.google_push_service_account,
        )
    return GooglePlay(
        api,
        push,
        products=products,
        accept_test_purchases=settings.google_accept_test_purchases,
        purchases=purchases,
        tokens=tokens,
        store=store,
        redis=redis,
        layout=layout,
        clock=clock,
    )
