"""``require_live``: the work that belongs to live traffic is refused to test keys, with the
403 ``test_key_forbidden`` naming the work."""

from __future__ import annotations

import pytest

from app.core.errors import ApiError, ErrorKind
from app.keys.roles import require_live


def test_a_live_key_passes() -> None:
    require_live("live", "Webhooks belong to live traffic")


def test_a_test_key_is_refused_saying_why() -> None:
    with pytest.raises(ApiError) as refused:
        require_live("test", "Purchases belong to live traffic")
    assert refused.value.kind is ErrorKind.TEST_KEY_FORBIDDEN
    assert refused.value.status == 403
    assert refused.value.message == "Purchases belong to live traffic: use a live key."
