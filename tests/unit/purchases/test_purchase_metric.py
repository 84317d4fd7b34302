"""``svc_purchase_events_total``'s label values (pre-registered, so a dashboard's query
finds its series before the first event) are the purchases' own vocabulary."""

from __future__ import annotations

from typing import get_args

from app.core.metrics import PURCHASE_EVENTS, PURCHASE_RESULTS
from app.purchases.events import EventKind
from app.purchases.purchases import Result


def test_the_metrics_labels_are_the_events_and_results_svc_counts() -> None:
    assert (*get_args(EventKind), "invalid") == PURCHASE_EVENTS
    assert (*get_args(Result), "invalid_signature", "unavailable") == PURCHASE_RESULTS
