"""The schema, as versioned migrations: each version's statements, applied once in order.

Only SQL that SQLite and PostgreSQL both accept (the PostgreSQL store converts the
placeholders, as for every shared statement: ``app.store.statements``).
"""

from __future__ import annotations

from app.core.clock import DAY_S
from app.store.books import BOOKS_SCHEMA

Migration = tuple[int, tuple[str, ...]]

# Append only: a version, once released, never changes (databases already ran it).
MIGRATIONS: tuple[Migration, ...] = (
    (
        1,
        (
            """CREATE TABLE accounts (
                pid TEXT PRIMARY KEY,
                created_at BIGINT NOT NULL,
                status TEXT NOT NULL DEFAULT 'active'
            )""",
            """CREATE TABLE api_keys (
                kid TEXT PRIMARY KEY,
                account_pid TEXT NOT NULL REFERENCES accounts (pid),
                name TEXT NOT NULL,
                environment TEXT NOT NULL,
                daily_cap_credits BIGINT,
                secret_hash TEXT NOT NULL,
                last4 TEXT NOT NULL,
                created_at BIGINT NOT NULL,
                status TEXT NOT NULL DEFAULT 'active',
                revoked_at BIGINT
            )""",
            "CREATE INDEX api_keys_account ON api_keys (account_pid, created_at)",
            """CREATE TABLE credit_grants (
                grant_id TEXT PRIMARY KEY,
                account_pid TEXT NOT NULL REFERENCES accounts (pid),
                pool TEXT NOT NULL,
                credits BIGINT NOT NULL,
                source TEXT NOT NULL,
                reference TEXT,
                created_at BIGINT NOT NULL,
                expires_at BIGINT
            )""",
            "CREATE INDEX credit_grants_account ON credit_grants (account_pid, created_at)",
            # No foreign key: the flusher must never fail on a row it cannot take back.
            """CREATE TABLE usage_daily (
                account_pid TEXT NOT NULL,
                kid TEXT NOT NULL,
                day TEXT NOT NULL,
                alias TEXT NOT NULL,
                environment TEXT NOT NULL,
                requests BIGINT NOT NULL,
                prompt_tokens BIGINT NOT NULL,
                completion_tokens BIGINT NOT NULL,
                credits BIGINT NOT NULL,
                PRIMARY KEY (account_pid, kid, day, alias, environment)
            )""",
            """CREATE TABLE flush_cursors (
                shard INTEGER PRIMARY KEY,
                last_id TEXT NOT NULL,
                updated_at BIGINT NOT NULL
            )""",
        ),
    ),
    (
        2,
        # Keys created in the same second still list newest first: seq counts an
        # account's keys in insertion order (keys from before v2 keep 0).
        ("ALTER TABLE api_keys ADD COLUMN seq BIGINT NOT NULL DEFAULT 0",),
    ),
    (
        3,
        # What balances follow from besides grants: the earned part of usage (rows from
        # before v3 keep 0) and the earned credits that lapsed. Expiries are keyed by
        # shard and stream id, so a replayed batch cannot write one twice.
        (
            "ALTER TABLE usage_daily ADD COLUMN earned_credits BIGINT NOT NULL DEFAULT 0",
            """CREATE TABLE credit_expiries (
                expiry_id TEXT PRIMARY KEY,
                account_pid TEXT NOT NULL,
                credits BIGINT NOT NULL,
                expired_at BIGINT NOT NULL
            )""",
            "CREATE INDEX credit_expiries_account ON credit_expiries (account_pid)",
        ),
    ),
    (
        4,
        # Usage by API (chat completions or responses): a key of its own, so the table is
        # made again (SQLite cannot change a primary key); rows from before v4 were chat.
        (
            """CREATE TABLE usage_daily_v4 (
                account_pid TEXT NOT NULL,
                kid TEXT NOT NULL,
                day TEXT NOT NULL,
                alias TEXT NOT NULL,
                environment TEXT NOT NULL,
                api TEXT NOT NULL,
                requests BIGINT NOT NULL,
                prompt_tokens BIGINT NOT NULL,
                completion_tokens BIGINT NOT NULL,
                credits BIGINT NOT NULL,
                earned_credits BIGINT NOT NULL DEFAULT 0,
                PRIMARY KEY (account_pid, kid, day, alias, environment, api)
            )""",
            """INSERT INTO usage_daily_v4 (account_pid, kid, day, alias, environment, api,
                requests, prompt_tokens, completion_tokens, credits, earned_credits)
            SELECT account_pid, kid, day, alias, environment, 'chat',
                requests, prompt_tokens, completion_tokens, credits, earned_credits
            FROM usage_daily""",
            "DROP TABLE usage_daily",
            "ALTER TABLE usage_daily_v4 RENAME TO usage_daily",
        ),
    ),
    (
        5,
        # Keys that expire (unix seconds; NULL: never).
        ("ALTER TABLE api_keys ADD COLUMN expires_at BIGINT",),
    ),
    (
        6,
        # Keys limited to some models and to a rate of their own, and keys made by rotating
        # another (NULL everywhere: all models, no limit, not a rotation).
        (
            "ALTER TABLE api_keys ADD COLUMN allowed_models TEXT",
            "ALTER TABLE api_keys ADD COLUMN rate_limit_rpm BIGINT",
            "ALTER TABLE api_keys ADD COLUMN lineage TEXT",
            "ALTER TABLE api_keys ADD COLUMN replaces TEXT",
        ),
    ),
    (
        7,
        # Request activity, newest first per account and environment: each listing (all:
        # the primary key; one key's, one model's) is one range scan of an index that ends
        # in the page order; `after` finds its row by id. Pruning walks the rows' UTC day:
        # an expression no page names, so no page is read by that index instead. The
        # event key (shard and stream id) makes a row's key unique: a replay conflicts.
        (
            """CREATE TABLE activity (
                event_key TEXT NOT NULL,
                account_pid TEXT NOT NULL,
                environment TEXT NOT NULL,
                created BIGINT NOT NULL,
                id TEXT NOT NULL,
                kid TEXT NOT NULL,
                requested_model TEXT NOT NULL,
                model TEXT NOT NULL,
                api TEXT NOT NULL,
                prompt_tokens BIGINT NOT NULL,
                completion_tokens BIGINT NOT NULL,
                credits_used BIGINT NOT NULL,
                outcome TEXT NOT NULL,
                ttfb_ms BIGINT NOT NULL,
                duration_ms BIGINT NOT NULL,
                usage_source TEXT NOT NULL,
                PRIMARY KEY (account_pid, environment, created, event_key)
            )""",
            "CREATE INDEX activity_by_key ON activity "
            "(account_pid, environment, kid, created, event_key)",
            "CREATE INDEX activity_by_model ON activity "
            "(account_pid, environment, model, created, event_key)",
            "CREATE INDEX activity_ids ON activity (account_pid, id)",
            f"CREATE INDEX activity_days ON activity ((created / {DAY_S}))",
        ),
    ),
    (
        8,
        # Webhooks and their outbox: one row per event and webhook, its delivery's state.
        # Due deliveries are found by status and time; a webhook's recent ones by event
        # time. A deleted webhook keeps its row (its deliveries stop).
        (
            """CREATE TABLE webhooks (
                id TEXT PRIMARY KEY,
                account_pid TEXT NOT NULL REFERENCES accounts (pid),
                url TEXT NOT NULL,
                events TEXT NOT NULL,
                description TEXT NOT NULL,
                secret_salt TEXT NOT NULL,
                created_at BIGINT NOT NULL,
                deleted_at BIGINT
            )""",
            "CREATE INDEX webhooks_account ON webhooks (account_pid, created_at)",
            """CREATE TABLE webhook_deliveries (
                event_id TEXT NOT NULL,
                webhook_id TEXT NOT NULL,
                account_pid TEXT NOT NULL,
                type TEXT NOT NULL,
                created BIGINT NOT NULL,
                data TEXT NOT NULL,
                status TEXT NOT NULL,
                attempt BIGINT NOT NULL,
                status_code BIGINT,
                error TEXT,
                next_attempt_at BIGINT,
                lease_until BIGINT NOT NULL,
                updated_at BIGINT NOT NULL,
                PRIMARY KEY (event_id, webhook_id)
            )""",
            "CREATE INDEX webhook_deliveries_due ON webhook_deliveries (status, next_attempt_at)",
            "CREATE INDEX webhook_deliveries_recent ON webhook_deliveries "
            "(webhook_id, created, event_id)",
        ),
    ),
    (
        9,
        # An account's low-balance threshold (webhooks' credits.low; NULL: none).
        ("ALTER TABLE accounts ADD COLUMN low_balance_credits BIGINT",),
    ),
    (
        10,
        # Old deliveries are deleted by the time of their event.
        ("CREATE INDEX webhook_deliveries_created ON webhook_deliveries (created)",),
    ),
    (
        11,
        # What a key may do: admin (manage keys and webhooks) or inference. Keys made before
        # roles existed could do everything: they stay admin.
        ("ALTER TABLE api_keys ADD COLUMN role TEXT NOT NULL DEFAULT 'admin'",),
    ),
    (
        12,
        # The operators' lookups: accounts newest first (a page is one range scan), and the
        # accounts of a key found by its last four characters. An account's status (active,
        # disabled) has had its column since v1.
        (
            "CREATE INDEX accounts_created ON accounts (created_at, pid)",
            "CREATE INDEX api_keys_last4 ON api_keys (last4)",
        ),
    ),
    (
        13,
        # A request's receipt tells which pool paid: the part of its credits taken from the
        # earned pool, as its usage event says (NULL: a row written before: not known).
        ("ALTER TABLE activity ADD COLUMN earned_credits BIGINT",),
    ),
    (
        14,
        # A request's receipt tells the parts of its tokens priced apart (docs/api.md,
        # "Pricing"): cached prompt tokens, cache writes, and reasoning tokens, as its usage
        # event says (NULL: a row written before: not known).
        (
            "ALTER TABLE activity ADD COLUMN cached_tokens BIGINT",
            "ALTER TABLE activity ADD COLUMN cache_write_tokens BIGINT",
            "ALTER TABLE activity ADD COLUMN reasoning_tokens BIGINT",
        ),
    ),
    (
        15,
        # The most credits one request of a key may hold and be charged (NULL: no ceiling).
        ("ALTER TABLE api_keys ADD COLUMN max_credits_per_request BIGINT",),
    ),
    (
        16,
        # A request's receipt tells the upstreams it failed over from before one served, as
        # its usage event says (NULL: a row written before, or a swept request: not known).
        ("ALTER TABLE activity ADD COLUMN failovers BIGINT",),
    ),
    (
        17,
        # A request's receipt names the prices it was settled at, as its usage event says
        # (NULL: a row written before, or a swept request: not known).
        (
            "ALTER TABLE activity ADD COLUMN input_price BIGINT",
            "ALTER TABLE activity ADD COLUMN cached_input_price BIGINT",
            "ALTER TABLE activity ADD COLUMN cache_write_price BIGINT",
            "ALTER TABLE activity ADD COLUMN output_price BIGINT",
        ),
    ),
    (
        18,
        # The app's own id of an account (NULL: none), unique among those set: NULLs never
        # collide in a UNIQUE index, on either engine. Its index is also the lookup's.
        (
            "ALTER TABLE accounts ADD COLUMN external_id TEXT",
            "CREATE UNIQUE INDEX accounts_external_id ON accounts (external_id)",
        ),
    ),
    (
        19,
        # The operators' audit log (``app.store.audit``): an entry per action on money, keys
        # or an account's status, newest first overall (the primary key) or per account.
        # A grant keeps the operator's reason (NULL: none given, or a row written before).
        (
            """CREATE TABLE audit_log (
                seq BIGINT PRIMARY KEY,
                account_pid TEXT NOT NULL,
                action TEXT NOT NULL,
                target TEXT,
                actor TEXT NOT NULL,
                request_id TEXT,
                client_address TEXT,
                details TEXT NOT NULL,
                created_at BIGINT NOT NULL
            )""",
            "CREATE INDEX audit_log_account ON audit_log (account_pid, seq)",
            "ALTER TABLE credit_grants ADD COLUMN reason TEXT",
        ),
    ),
    (
        20,
        # credit_grants becomes the ledger of money in and out of the pools
        # (``app.accounts.ledger``): signed credits, each entry's kind, the debt it changed,
        # and when Redis applied it (NULL: pending, written before Redis changed; the
        # repair applies it once). Rows from before were applied when written. The partial
        # index finds the pending ones (none, mostly) without reading the rest.
        (
            "ALTER TABLE credit_grants ADD COLUMN kind TEXT NOT NULL DEFAULT 'grant'",
            "UPDATE credit_grants SET kind = 'reward' WHERE source = 'spotlight'",
            "ALTER TABLE credit_grants ADD COLUMN debt_change BIGINT NOT NULL DEFAULT 0",
            "ALTER TABLE credit_grants ADD COLUMN applied_at BIGINT",
            "UPDATE credit_grants SET applied_at = created_at",
            "ALTER TABLE credit_grants ADD COLUMN intent TEXT",
            # the order of entries of one second (app.store.audit.new_seq); 0: of before
            "ALTER TABLE credit_grants ADD COLUMN seq BIGINT NOT NULL DEFAULT 0",
            "CREATE INDEX credit_grants_pending ON credit_grants (created_at) "
            "WHERE applied_at IS NULL",
        ),
    ),
    (
        21,
        # Purchases a store confirmed (``app.store.purchases``): one per (source, reference),
        # found by their payment too (refunds and disputes name it); and the events about a
        # payment not seen yet, kept until its purchase arrives.
        (
            """CREATE TABLE purchases (
                purchase_id TEXT PRIMARY KEY,
                source TEXT NOT NULL,
                reference TEXT NOT NULL,
                payment TEXT,
                account_ref TEXT,
                account_pid TEXT,
                credits BIGINT,
                amount BIGINT,
                currency TEXT,
                status TEXT NOT NULL,
                created_at BIGINT NOT NULL,
                refund_taken BIGINT NOT NULL DEFAULT 0,
                dispute_taken BIGINT NOT NULL DEFAULT 0,
                UNIQUE (source, reference)
            )""",
            "CREATE INDEX purchases_payment ON purchases (source, payment)",
            "CREATE INDEX purchases_status ON purchases (status, created_at)",
            """CREATE TABLE purchase_events_kept (
                event_id TEXT PRIMARY KEY,
                source TEXT NOT NULL,
                payment TEXT NOT NULL,
                body TEXT NOT NULL,
                created_at BIGINT NOT NULL
            )""",
            "CREATE INDEX purchase_events_kept_payment ON purchase_events_kept (source, payment)",
        ),
    ),
    (
        22,
        # The accounts' app account tokens (``app.purchases.account_token``), by token: how a
        # store's notification, which names only the token, finds its account; and the store
        # notifications applied (once per notification id, whatever it asked).
        (
            """CREATE TABLE account_tokens (
                token TEXT PRIMARY KEY,
                account_pid TEXT NOT NULL,
                created_at BIGINT NOT NULL
            )""",
            """CREATE TABLE purchase_notices (
                notice_id TEXT PRIMARY KEY,
                source TEXT NOT NULL,
                created_at BIGINT NOT NULL
            )""",
        ),
    ),
    (
        23,
        # The entries applied since a time (``app.accounts.lost_entries``: what a Redis
        # failover may have lost is rechecked every few seconds, without a scan).
        ("CREATE INDEX credit_grants_applied ON credit_grants (applied_at, grant_id)",),
    ),
    # The reseller's books: their tables, columns and indexes (``app.store.books``).
    (24, BOOKS_SCHEMA),
)

CREATE_SCHEMA_MIGRATIONS = (
    "CREATE TABLE IF NOT EXISTS schema_migrations "
    "(version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)"
)
MIGRATION_APPLIED = "SELECT 1 FROM schema_migrations WHERE version = ?"
RECORD_MIGRATION = "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)"
