"""The App Store's purchases when the operator sells there: Apple's library is imported
then only (about 28 MB per worker), so a server that does not sell in the App Store loads
none of it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.accounts.accounts import Accounts
from app.core.settings import Settings
from app.purchases.account_token import AccountTokens
from app.purchases.apple_config import apple_config
from app.purchases.purchases import Purchases

if TYPE_CHECKING:
    from app.purchases.apple_store import AppleStore


def apple_store(
    settings: Settings, purchases: Purchases, tokens: AccountTokens, accounts: Accounts
) -> AppleStore | None:
    """The App Store's purchases, None while they are off (no bundle id or products); a
    ``SettingsError`` for settings that cannot work."""
    config = apple_config(settings)
    if config is None:
        return None
    from app.purchases.apple_store import AppleStore

    return AppleStore(config, purchases, tokens, accounts, purchases.store, purchases.clock)
