"""Typed settings, read once from ``SVC_*`` environment variables."""

from __future__ import annotations

import logging
import os
import re
import tempfile
from collections.abc import Mapping
from typing import Annotated, Literal

import msgspec

ENV_PREFIX = "SVC_"
HEARTBEATS_PER_DEADLINE = 3
"""A live stream extends its reservation at most this many times per deadline (only when
a chunk arrives): one Redis round trip per deadline/3, not per chunk."""


REFUSE_NON_STREAMING = "refuse"
"""``SVC_NON_STREAMING``'s value that refuses a request without ``stream: true``."""
MAX_RATE_LIMIT_RPM = 1_000_000
"""The highest rate_limit_rpm a key may have: reserve.lua logs the time of each start of
the last minute (about 10 bytes each in Redis), so a key at this limit may hold ~10 MB."""


CREDIT_VALUE_FORM = r"^(?P<amount>[0-9]{1,12}(\.[0-9]{1,6})?) ?(?P<currency>[A-Z]{3})?$"
"""``SVC_CREDIT_VALUE``: an amount with at most six decimals, then a currency (default
USD): ``10``, ``9.5 EUR`` (``app.books.value``)."""


MIN_ADMIN_TOKEN_CHARS = 32
"""The shortest SVC_ADMIN_TOKEN svc starts with: the token reaches every account, and the
failed-auth throttle only slows guessing down (a generated one has 43 characters)."""


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """Every knob of svc. The environment variable is ``SVC_`` + the field name in capitals."""

    data_dir: str = "./data"
    """Folder of the embedded Valkey, the SQLite file and the generated dev secrets."""
    redis_url: str | None = None
    """``redis://`` / ``rediss://`` / ``unix://`` URL; unset = embedded Valkey under data_dir."""
    redis_cluster: bool = False
    """redis_url names a node of a Redis Cluster (``redis://``/``rediss://``); the others
    are discovered from it."""
    redis_cluster_nodes: str = ""
    """Comma-separated ``host:port`` of more Cluster nodes to discover the Cluster from
    when redis_url's node does not answer (it failed, and svc or ``svc admin`` starts while
    its replica serves in its place)."""
    redis_sentinels: str = ""
    """Comma-separated ``host:port`` of the Sentinels watching svc's Redis primary: svc
    asks them where the primary is, and again after a failover (``app.kv.sentinel``);
    ``redis_url`` then gives only the data nodes' password, database and TLS."""
    redis_sentinel_service: str = "svc"
    """The name the Sentinels monitor svc's primary under (``sentinel monitor <name> …``)."""
    redis_sentinel_password: str | None = None
    """The Sentinels' own password (``requirepass`` of the Sentinels), when they have one.
    Never logged."""
    database_url: str | None = None
    """``sqlite:///path.db`` or ``postgresql://…``; unset = SQLite under data_dir."""
    admin_token: Annotated[str, msgspec.Meta(min_length=MIN_ADMIN_TOKEN_CHARS)] | None = None
    """Bearer token of ``/admin/v1``, at least MIN_ADMIN_TOKEN_CHARS characters (a shorter
    one refuses to start); unset = generated into data_dir/admin-token.txt."""
    key_pepper: str | None = None
    """HMAC secret for key digests; unset = generated into data_dir/key-pepper.txt."""
    dev_bootstrap: bool | None = None
    """Create a dev account and key on first start; default: on when Redis is embedded."""
    dev_credits: int = 1_000_000
    """Credits the dev account starts with."""
    redis_prefix: str = "svc"
    """Prefix of every Redis key."""
    shards: int = 64
    """Number of account shards (hash tags); fixed once data exists."""
    host: str = "127.0.0.1"
    """Address ``svc serve`` listens on."""
    port: Annotated[int, msgspec.Meta(ge=1, le=65_535)] = 8000
    """Port ``svc serve`` listens on."""
    workers: Annotated[int, msgspec.Meta(ge=0)] = 0
    """granian worker processes; 0 = one per CPU."""
    worker_streams: Annotated[int, msgspec.Meta(ge=1)] = 2048
    """Requests one worker of ``svc serve`` serves at once, open streams included (granian's
    backpressure); more wait, accepted, until one ends. granian's own default would be
    1,024 for all workers together."""
    http2: bool = False
    """``svc serve`` also speaks HTTP/2 without TLS (h2c, prior knowledge) beside HTTP/1.1;
    off, HTTP/1.1 alone: each open stream holds about 5 KB less in granian, and a request
    costs about 6 % less CPU (issue 53). For a proxy or platform that reaches svc over h2c."""
    max_body_bytes: int = 1_048_576
    """Largest request body accepted (413 beyond it)."""
    idempotent_response_bytes: Annotated[int, msgspec.Meta(ge=0)] = 1_048_576
    """Largest completion stream an Idempotency-Key's record keeps for its replays (24 h in
    Redis); a larger one is charged once and answers 409 when replayed."""
    max_messages: int = 2048
    """Messages one chat request may carry."""
    max_message_chars: int = 1_000_000
    """Characters one message's content may hold."""
    image_token_bound: int = 4_096
    """Prompt tokens reserved for each image a request carries. An upstream's prompt count
    above a request's bound is not billed: raise it for models that count more per image."""
    max_active_keys: int = 100
    """Active API keys allowed per account."""
    spotlight_credits: int = 5_000
    """Earned credits granted per verified spotlight view."""
    spotlight_daily_limit: int = 5
    """Spotlight rewards per account per UTC day."""
    spotlight_secrets: str = ""
    """Comma-separated secrets that sign ``POST /v1/spotlights/verified`` (two while one is
    rotated); empty = signed spotlight callbacks are off. Never logged."""
    admob_keys_url: str = "https://www.gstatic.com/admob/reward/verifier-keys.json"
    """Where AdMob's verifier keys are fetched (``https://``, or ``file://`` for air-gapped
    installs); every worker shares them through Redis for at most 24 hours."""
    admob_ad_units: str = ""
    """Comma-separated AdMob ad unit ids whose verification callbacks are accepted; empty =
    AdMob callbacks are off (404: Google signs every publisher's callbacks alike)."""
    applovin_event_keys: str = ""
    """Comma-separated AppLovin Event Keys (the MAX dashboard's Account > Keys; two while
    one is rotated) that ``GET /v1/spotlights/applovin``'s ``event_key`` is made with;
    empty = AppLovin MAX callbacks are off (404). Never logged."""
    applovin_ad_units: str = ""
    """Comma-separated MAX ad unit ids whose callbacks reward; empty = any of the account's
    (the Event Key is the account's own)."""
    levelplay_private_keys: str = ""
    """Comma-separated private keys of the app's LevelPlay S2S reward callback (two while one
    is rotated) that ``GET /v1/spotlights/levelplay``'s ``signature`` is made with; empty =
    Unity LevelPlay callbacks are off (404). Never logged."""
    google_service_account_file: str | None = None
    """JSON key file of the Google Cloud service account svc asks the Play Developer API
    with (granted "View financial data" and "Manage orders" in Play Console); unset =
    Google Play purchases are off (404). Its private key is never logged."""
    google_package_name: str = ""
    """The Android app's package name (``com.example.app``) whose purchases svc accepts;
    empty = Google Play purchases are off (404)."""
    google_products: str = ""
    """Comma-separated ``product_id=credits`` of the Play Console one-time (consumable)
    products svc sells; empty = Google Play purchases are off (404)."""
    google_play_api_url: str = "https://androidpublisher.googleapis.com"
    """Base URL of the Play Developer API (a local stand-in's for tests)."""
    google_token_url: str | None = None
    """Google's OAuth token endpoint for the service account; unset = the key file's own
    ``token_uri`` (set it for a local stand-in in tests)."""
    google_accept_test_purchases: bool = False
    """Credit purchases made by Play Console's license testers (``purchaseType`` 0, not
    charged); off in production."""
    google_oidc_certs_url: str = "https://www.googleapis.com/oauth2/v1/certs"
    """Where Google's OIDC signing certificates are fetched (key id → PEM), to verify the
    token Pub/Sub pushes Real-time developer notifications with."""
    google_push_audience: str = ""
    """The audience of the Pub/Sub push subscription's OIDC token (as set on the
    subscription, often the endpoint's URL); empty = notifications are off (404)."""
    google_push_service_account: str = ""
    """The service account email the Pub/Sub push subscription authenticates as; empty =
    notifications are off (404)."""
    stripe_webhook_secrets: str = ""
    """Comma-separated signing secrets of the Stripe webhook endpoint that posts to ``POST
    /v1/purchases/stripe`` (``whsec_…``; two while one is rotated); empty = Stripe purchases
    are off (404). Never logged."""
    apple_bundle_id: str = ""
    """The app's bundle id, which every App Store transaction and notification svc accepts
    must name; empty (or no ``apple_products``) = App Store purchases are off (404)."""
    apple_app_id: Annotated[int, msgspec.Meta(ge=1)] | None = None
    """The app's Apple ID (App Store Connect), which notifications must name; required when
    ``apple_environment`` is Production."""
    apple_environment: Literal["Production", "Sandbox"] = "Production"
    """The App Store environment whose transactions and notifications svc accepts."""
    apple_root_certs: str = ""
    """Comma-separated files of the root certificates App Store signatures must chain to
    (DER as Apple publishes them, or PEM); empty = Apple Root CA - G3, shipped with svc."""
    apple_products: str = ""
    """Comma-separated ``product_id=credits`` of the app's consumable products: the credits
    each purchase of the product grants."""
    apple_consumption_consent: bool = False
    """The app asked its users' consent to share consumption data with Apple: svc answers
    CONSUMPTION_REQUEST notifications with how much of the purchase was spent."""
    apple_api_key_id: str = ""
    """The App Store Server API key's id (App Store Connect, In-App Purchase keys), for the
    consumption data."""
    apple_api_issuer_id: str = ""
    """The App Store Server API key's issuer id."""
    apple_api_private_key_file: str = ""
    """File of the App Store Server API key (``SubscriptionKey_….p8``, PEM). Never logged."""
    apple_api_url: str = ""
    """Base URL of the App Store Server API; empty = Apple's for ``apple_environment``
    (a test's stand-in otherwise)."""
    credit_value: Annotated[str, msgspec.Meta(pattern=CREDIT_VALUE_FORM)] | None = None
    """What 1,000 credits are worth in the books (``GET /admin/v1/books``): an amount and a
    currency (``10 USD``; USD when left out); unset = each currency's net revenue of the
    period per credit sold in it."""
    earned_expiry_days: int = 30
    """The earned pool expires this long after its latest grant (rolling)."""
    sweep_interval_s: float = 10.0
    """How often each worker looks for reservations past their deadline."""
    flush_interval_s: float = 1.0
    """How often each worker drains the usage streams into the durable store."""
    flush_batch_size: int = 1000
    """Usage events per database transaction."""
    flush_lease_s: float = 10.0
    """A shard's drainer keeps it this long after its last batch; a dead one's shards are
    taken over after that."""
    shutdown_grace_s: float = 30.0
    """After SIGTERM, how long streams in flight may run on; then they are cut (an error
    event, settled for what was delivered) and the worker flushes and exits."""
    reservation_deadline_s: int = 900
    """A reservation not settled by then (its worker died) is refunded by the sweeper.
    Every provider's first_byte_timeout_s and idle_timeout_s must be shorter than a third
    of it (checked at start)."""
    cap_counter_ttl_s: int = 172_800
    """Lifetime of a key's daily cap counter in Redis (2 days)."""
    activity_days: Annotated[int, msgspec.Meta(ge=1, le=3650)] = 30
    """How long a request's activity row (``GET /v1/activity``) is kept in the durable
    store; older rows are deleted in batches by the flushers."""
    webhook_allow_hosts: str = ""
    """Comma-separated host names, addresses or CIDR networks webhooks may reach although
    they are not public (and over http): by default a webhook URL must be https and
    resolve to public addresses only."""
    webhook_first_retry_s: Annotated[float, msgspec.Meta(gt=0)] = 30.0
    """Delay before a failed webhook delivery is retried; each retry waits twice the one
    before (at most an hour) until 24 hours after the event."""
    webhook_timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 10.0
    """How long a webhook receiver has to answer a delivery."""
    webhook_scan_s: Annotated[float, msgspec.Meta(gt=0)] = 60.0
    """How often one worker looks for what is about to expire (key.expiring,
    credits.earned_expiring) or has expired (credits.earned_expired)."""
    webhook_poll_s: Annotated[float, msgspec.Meta(gt=0)] = 1.0
    """How often each worker looks for webhook deliveries that are due."""
    usage_day_ttl_s: int = 40 * 86_400
    """Lifetime of a daily usage counter in Redis (40 days); older days come from the
    durable store."""
    auth_cache_size: int = 100_000
    """Key identities (digest → account, key, environment) cached per worker."""
    negative_cache_s: float = 30.0
    """How long an unknown key digest is remembered as unknown."""
    cold_auth_per_s: float = 10.0
    """Cold-path (argon2) verifications allowed per second per worker (~25 ms CPU each)."""
    cold_auth_per_address_s: Annotated[int, msgspec.Meta(ge=0)] = 5
    """Cold-path verifications one client address may start per second, on every worker of
    every instance together (counted in Redis); 0 = no such limit."""
    key_rate_limit: Annotated[int, msgspec.Meta(ge=0, le=MAX_RATE_LIMIT_RPM)] = 0
    """The rate_limit_rpm a new API key gets when its creator sets none: completions it may
    start in any 60 seconds; 0 = no limit. Each key's own limit can be changed later."""
    failed_auth_limit: int = 100
    """Invalid keys one client address may present per window, on every worker of every
    instance together (counted in Redis), and wrong admin tokens apart (their own count);
    after that each further one is refused with 429 until the window ends; 0 = no limit."""
    failed_auth_window_s: float = 60.0
    """Length of the failed_auth_limit window, in seconds."""
    trusted_proxies: str = ""
    """Comma-separated addresses or CIDR networks of the load balancers in front of svc;
    only from these is ``X-Forwarded-For`` believed when telling clients apart."""
    non_streaming: Literal["stream", "refuse"] = "stream"
    """What a chat, Responses or Messages request without ``stream: true`` gets: ``stream``,
    streamed anyway (the contract); ``refuse``, 400 ``stream_required`` before anything is
    reserved (for clients whose plain ``create()`` cannot read a stream it is charged for)."""
    models_file: str | None = None
    """TOML file of providers and per-alias upstreams, prices and limits (docs/operations.md)."""
    sim_reply_tokens: int = 24
    """Length of a simulated upstream reply, in tokens."""
    sim_delay_ms: float = 0.0
    """Delay between simulated tokens."""
    log_level: str = "INFO"
    """Lowest level logged (JSON lines on stderr): DEBUG, INFO, WARNING, ERROR. DEBUG also
    prints the traceback of a start-up failure."""
    metrics_dir: str | None = None
    """Directory where the workers of one server share their metrics (multiprocess mode);
    unset = ``svc-metrics-<server pid>`` in the temp directory."""
    metrics_token: str | None = None
    """Bearer token ``GET /metrics`` requires; unset = the endpoint is open (keep it on an
    internal network)."""
    allow_evicting_redis: bool = False
    """Start even when Redis's maxmemory-policy may evict keys (it should be noeviction)."""
    redis_timeout_s: float = 2.0
    """How long a Redis connect, command or wait for a free connection may take."""
    redis_min_replicas: Annotated[int, msgspec.Meta(ge=0, le=16)] = 0
    """When above 0: after every script that moves money in or settles a request, svc
    waits (``WAIT``) until this many replicas have it, at most half of redis_timeout_s
    (``app.credits.scripts``); a single primary's replicas (Sentinel), not a Cluster's."""
    redis_max_connections: int = 256
    """Pooled connections per worker process, for everything but the requests' script calls
    (those share one pipelined connection per worker); a request waits up to
    redis_timeout_s for one."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Build settings from ``SVC_*`` variables; unknown or empty variables are ignored.
        A value that cannot be used raises ``ValueError`` naming the variable, the value and
        the default."""
        env = os.environ if environ is None else environ
        raw: dict[str, str] = {}
        for field in cls.__struct_fields__:
            value = env.get(ENV_PREFIX + field.upper())
            if value not in (None, ""):
                raw[field] = value
        try:
            settings = msgspec.convert(raw, cls, strict=False)
        except msgspec.ValidationError as exc:
            raise _invalid(raw, str(exc)) from exc
        if not isinstance(logging.getLevelNamesMapping().get(settings.log_level.upper()), int):
            raise _invalid(
                raw, "not a log level (DEBUG, INFO, WARNING or ERROR) - at `$.log_level`"
            )
        return settings

    @classmethod
    def default(cls, field: str) -> object:
        """The value ``field`` has when its variable is unset."""
        return next(f.default for f in msgspec.structs.fields(cls) if f.name == field)

    def shared_metrics_dir(self) -> str:
        """The metrics directory of this server: ``metrics_dir``, else one named after the
        parent process, which is granian's main process for every worker of one server and
        new at every server start."""
        return self.metrics_dir or os.path.join(
            tempfile.gettempdir(), f"svc-metrics-{os.getppid()}"
        )

    def env_vars(self) -> dict[str, str]:
        """The settings as ``SVC_*`` variables, to hand resolved values to worker processes."""
        out: dict[str, str] = {}
        for field in self.__struct_fields__:
            value = getattr(self, field)
            if value is not None:
                out[ENV_PREFIX + field.upper()] = (
                    str(value).lower() if isinstance(value, bool) else str(value)
                )
        return out


_WHERE = re.compile(r"(?P<why>.*) - at `\$\.(?P<field>\w+)`$", re.DOTALL)
_UNSHOWN = ("token", "pepper", "secret", "url", "event_keys", "private_keys")
"""Fields whose values an error does not repeat: only fields that are not plain text can be
refused, but a future constraint on one of these must not echo a secret."""


def _invalid(raw: Mapping[str, str], reason: str) -> ValueError:
    """msgspec's ``Expected `int`, got `str` - at `$.port``` as the variable, its value, the
    reason and the way out."""
    match = _WHERE.fullmatch(reason)
    if match is None:
        return ValueError(f"invalid SVC_* setting: {reason}")
    field = match["field"]
    variable = ENV_PREFIX + field.upper()
    value = "" if any(part in field for part in _UNSHOWN) else f"={raw.get(field, '')[:40]!r}"
    # every value read from the environment is a string: "got `str`" says nothing
    why = match["why"].removesuffix(", got `str`").replace("Expected", "expected", 1)
    default = Settings.default(field)
    if isinstance(default, bool):
        default = str(default).lower()  # as the variable spells it
    shown = "" if default is None else f" ({default})"
    return ValueError(
        f"invalid SVC_* setting: {variable}{value}: {why}. Correct it, or unset it to use the "
        f"default{shown}"
    )
