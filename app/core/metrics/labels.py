"""The label values svc knows in advance. Their series are made when the metrics are (at
0), so a scrape shows every one before it first happens: ``rate()`` and alerts see a 0, not a
missing series."""

ENVIRONMENTS = ("live", "test")
SETTLEMENT_OUTCOMES = (
    "completed",
    "client_disconnect",
    "upstream_error",
    "released",
    "shutdown",
    "swept",
)
BACKGROUND_TASKS = ("sweeper", "flusher", "webhooks", "ledger_repair")
WEBHOOK_STATES = ("delivered", "pending", "failed")
REPLICA_WAIT_RESULTS = ("acked", "short")
SPOTLIGHT_NETWORKS = ("admob", "applovin", "levelplay", "signed")
PURCHASE_STORES = ("stripe", "apple", "google")
PURCHASE_EVENTS = (  # app.purchases.events.EventKind, and a refused signature's
    "paid",
    "pending",
    "failed",
    "refunded",
    "dispute_opened",
    "dispute_won",
    "dispute_lost",
    "ignored",
    "refund_reversed",
    "consumption_request",
    "invalid",
)
PURCHASE_RESULTS = (  # app.purchases.purchases.Result, and the two refusals
    "applied",
    "duplicate",
    "kept",
    "ignored",
    "unmatched",
    "invalid_signature",
    "unavailable",
)
SPOTLIGHT_RESULTS = (
    "rewarded",
    "duplicate",
    "daily_limit",
    "account_disabled",
    "intent_used",
    "invalid_intent",
    "invalid_signature",
    "unavailable",
)
# svc_upstream_errors_total's phases: before the attempt's first token, or after it
FIRST_TOKEN = "first_token"
MID_STREAM = "stream"
