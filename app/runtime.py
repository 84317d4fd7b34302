"""Wiring: resolve the zero-configuration defaults and build the clients and services.

Used by the app's lifespan (one set per worker process) and by ``svc admin`` commands.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path

from app.accounts.accounts import Accounts
from app.accounts.api_keys import ApiKeys
from app.accounts.bodies import KeyCreateRequest
from app.accounts.ledger import Ledger, LedgerConfig
from app.accounts.rewards import Spotlights
from app.completion.catalog import Alias, Catalog, default_catalog, key_model_ids, load_catalog
from app.completion.router import UpstreamRouter
from app.completion.service import CompletionService
from app.core import tracing
from app.core.clock import DAY_S
from app.core.data_dir import DEV_KEY_FILE, write_private
from app.core.errors import (
    ApiError,
    ErrorKind,
    ModelsFileError,
    SettingsError,
    StartupError,
    StoreError,
    service_unavailable,
)
from app.core.settings import Settings
from app.credits.holds import Holds
from app.credits.idempotency import IdempotencyRecords
from app.credits.key_records import KeyRecords
from app.credits.money import Money
from app.credits.scripts import RedisClock, Scripts
from app.credits.sweeper import Sweeper
from app.credits.throttle_counts import ThrottleCounts
from app.credits.usage_counts import UsageCounts
from app.keys.auth import Authenticator
from app.keys.operators import OperatorTokens
from app.keys.throttle import FailedAuthThrottle, parse_networks
from app.kv.client import REDIS_ERRORS, RedisClient, open_redis
from app.kv.layout import KeySpace
from app.kv.pipelined import PipelinedRedis
from app.kv.sentinel import master_locator, redis_named
from app.kv.startup_checks import check_eviction_policy, check_redis_answers
from app.purchases.account_token import AccountTokens
from app.purchases.apple_on import apple_store
from app.purchases.google_setup import google_play
from app.purchases.purchases import Purchases
from app.spotlights.admob_keys import VerifierKeys
from app.spotlights.intents import Intents
from app.spotlights.rewards import VerifiedRewards
from app.spotlights.signed import parse_secrets
from app.store import Store, open_store
from app.upstream.base import Provider
from app.upstream.http11 import StreamingProvider
from app.upstream.safety import SafetyIdentifiers
from app.upstream.simulated import SimulatedProvider
from app.usage.activity import ActivityReader
from app.usage.flusher import Flusher
from app.usage.reader import UsageReader
from app.webhooks.delivery import Deliverer
from app.webhooks.registry import Webhooks
from app.webhooks.scanner import Scanner
from app.webhooks.targets import AllowList

log = logging.getLogger("svc.runtime")


def replica_wait(settings: Settings) -> dict[str, int]:
    """How the scripts wait for replicas (``SVC_REDIS_MIN_REPLICAS``): up to half the Redis
    timeout, so the wait ends before the command's own deadline."""
    return {
        "min_replicas": settings.redis_min_replicas,
        "wait_ms": max(1, int(settings.redis_timeout_s * 500)),
    }


def load_models(settings: Settings) -> Catalog:
    """The models file's catalog (the built-in one when ``SVC_MODELS_FILE`` is unset); a
    file that cannot be read or is broken raises ``ModelsFileError`` naming it."""
    if not settings.models_file:
        return default_catalog()
    path = Path(settings.models_file)
    try:
        return load_catalog(path, reservation_deadline_s=settings.reservation_deadline_s)
    except OSError as exc:
        raise ModelsFileError(f"{path}: cannot read it ({exc.strerror or exc})") from exc


def short_pools(catalog: Catalog, worker_streams: int) -> dict[str, int]:
    """The providers whose pool (``max_connections``, per worker) is smaller than the
    streams a worker serves at once (``SVC_WORKER_STREAMS``), with their bound: a stream holds
    a connection for its whole length, so one past the bound waits for a free connection and
    fails after the provider's ``connect_timeout_s`` (found holding 10,000 streams)."""
    return {
        name: config.max_connections
        for name, config in catalog.providers.items()
        if config.max_connections < worker_streams
    }


def build_providers(catalog: Catalog) -> dict[str, Provider]:
    """One pooled client per provider of the models file, each through the proxy the
    environment names for it (``app.core.proxies``)."""
    return {name: StreamingProvider(config) for name, config in catalog.providers.items()}


class Services:
    """Everything a worker (or an admin command) uses, built from resolved settings."""

    def __init__(
        self,
        settings: Settings,
        redis: RedisClient,
        store: Store,
        *,
        background_redis: RedisClient | None = None,
        script_calls: PipelinedRedis | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        assert settings.key_pepper, "settings must be resolved first"
        self.settings = settings
        self.redis = redis
        self.store = store
        self.clock = clock
        catalog = load_models(settings)
        self.aliases: dict[str, Alias] = catalog.aliases
        self.layout = KeySpace(settings.redis_prefix, settings.shards)
        redis_clock = RedisClock()
        # the requests' scripts, shared by every owner of Redis data below
        self.scripts = Scripts(redis, script_calls, **replica_wait(settings))
        self.holds = Holds(
            self.scripts,
            self.layout,
            cap_ttl_s=settings.cap_counter_ttl_s,
            usage_ttl_s=settings.usage_day_ttl_s,
            command_timeout_s=settings.redis_timeout_s,
            redis_clock=redis_clock,
        )
        self.money = Money(self.scripts, self.layout, cap_ttl_s=settings.cap_counter_ttl_s)
        self.key_records = KeyRecords(self.scripts, self.layout)
        self.usage_counts = UsageCounts(self.scripts, self.layout)
        self.throttle_counts = ThrottleCounts(self.scripts, self.layout)
        self.script_calls = script_calls
        pepper = settings.key_pepper.encode()
        self.pepper = pepper  # keys' digests, and the seals of Idempotency-Key answers
        self.idempotency_records = IdempotencyRecords(
            self.scripts, self.layout, pepper, max_body_bytes=settings.max_body_bytes
        )
        self.auth_throttle = FailedAuthThrottle(
            settings.failed_auth_limit,
            settings.failed_auth_window_s,
            self.throttle_counts.count_failed_auth,
        )
        self.operators = OperatorTokens(
            settings.admin_token,
            settings.metrics_token,
            auth_throttle=self.auth_throttle,
            admin_throttle=FailedAuthThrottle(  # wrong admin tokens alone: the right one
                settings.failed_auth_limit,  # is refused past their limit, never for wrong keys
                settings.failed_auth_window_s,
                self.throttle_counts.count_failed_admin,
                read=self.throttle_counts.failed_admin,
            ),
        )
        self.auth = Authenticator(
            self.key_records,
            self.throttle_counts,
            store,
            pepper,
            cache_size=settings.auth_cache_size,
            negative_ttl_s=settings.negative_cache_s,
            cold_per_s=settings.cold_auth_per_s,
            cold_per_address_s=settings.cold_auth_per_address_s,
            throttle=self.auth_throttle,  # shared with the metrics token
        )
        try:
            self.trusted_proxies = parse_networks(settings.trusted_proxies)
        except ValueError as exc:
            raise SettingsError(f"SVC_TRUSTED_PROXIES: {exc}") from exc
        allow = AllowList.parse(settings.webhook_allow_hosts)
        self.webhooks = Webhooks(store, self.money, pepper, allow, clock)
        self.deliverer = Deliverer(
            store,
            pepper,
            allow,
            poll_s=settings.webhook_poll_s,
            first_retry_s=settings.webhook_first_retry_s,
            timeout_s=settings.webhook_timeout_s,
            clock=clock,
        )
        ledger_config = LedgerConfig(
            reward_daily_limit=settings.spotlight_daily_limit,
            earned_ttl_s=settings.earned_expiry_days * DAY_S,
        )
        self.ledger = Ledger(store, self.money, ledger_config, clock)
        self.accounts = Accounts(store, self.money, ledger=self.ledger, clock=clock)
        self.api_keys = ApiKeys(
            store,
            self.key_records,
            self.accounts,
            pepper,
            max_active_keys=settings.max_active_keys,
            default_rate_limit_rpm=settings.key_rate_limit or None,
            model_ids=key_model_ids(catalog),
            webhooks=self.webhooks,
            clock=clock,
        )
        self.spotlights = Spotlights(
            store,
            self.money,
            credits=settings.spotlight_credits,
            daily_limit=settings.spotlight_daily_limit,
            expiry_days=settings.earned_expiry_days,
            ledger=self.ledger,
            clock=clock,
        )
        self.purchases = Purchases(store, self.ledger, self.accounts, clock)
        self.account_tokens = AccountTokens(store, pepper, clock)
        self.google_play = google_play(  # None while Google Play is off
            settings,
            purchases=self.purchases,
            tokens=self.account_tokens,
            store=store,
            redis=redis,
            layout=self.layout,
            clock=clock,
        )
        self.apple = apple_store(settings, self.purchases, self.account_tokens, self.accounts)
        self.stripe_secrets = tuple(
            s.strip() for s in settings.stripe_webhook_secrets.split(",") if s.strip()
        )
        self.intents = Intents(pepper)
        # what providers are sent to tell the accounts (and their end users) apart
        self.safety_identifiers = SafetyIdentifiers(pepper)
        self.admob_keys = VerifierKeys(settings.admob_keys_url, redis, self.layout)
        self.spotlight_secrets = parse_secrets(settings.spotlight_secrets)
        self.verified_rewards = VerifiedRewards(self.spotlights, self.intents, store, clock=clock)
        simulated = SimulatedProvider(settings.sim_reply_tokens, settings.sim_delay_ms)
        self.router = UpstreamRouter(build_providers(catalog), simulated, catalog.aliases.values())
        # Background tasks talk to Redis on connections of their own, named so operators
        # (and the benchmark) can tell their commands from the requests'.
        self.background_redis = background_redis or redis
        background_scripts = Scripts(self.background_redis, None, **replica_wait(settings))
        background_holds = Holds(
            background_scripts,
            self.layout,
            cap_ttl_s=settings.cap_counter_ttl_s,
            usage_ttl_s=settings.usage_day_ttl_s,
            redis_clock=redis_clock,  # the sweeper's rounds keep it in step with Redis's
        )
        background_money = Money(
            background_scripts, self.layout, cap_ttl_s=settings.cap_counter_ttl_s
        )
        self.scanner = Scanner(
            store,
            background_money,
            self.webhooks,
            self.background_redis,
            self.layout,
            every_s=settings.webhook_scan_s,
            keep_days=settings.activity_days,
            clock=clock,
        )
        self.sweeper = Sweeper(background_holds, interval_s=settings.sweep_interval_s, clock=clock)
        # pending ledger entries (a crash or a Redis failure between the store and Redis)
        self.ledger_repair = Ledger(store, background_money, ledger_config, clock)
        self.flusher = Flusher(
            self.background_redis,
            self.layout,
            store,
            interval_s=settings.flush_interval_s,
            batch_size=settings.flush_batch_size,
            lease_s=settings.flush_lease_s,
            activity_days=settings.activity_days,
            clock=clock,
        )
        self.usage = UsageReader(self.usage_counts, store, retention_s=settings.usage_day_ttl_s)
        self.activity = ActivityReader(store)
        self.completions = CompletionService(
            self.holds,
            self.router,
            deadline_s=settings.reservation_deadline_s,
            recorded_bytes=settings.idempotent_response_bytes,
            clock=clock,
        )
        traces = tracing.ACTIVE
        if traces is not None:
            # chosen once: a completion of this worker then records spans without asking
            from app.completion.traced import TracedCompletionService

            base_urls = {name: config.base_url for name, config in catalog.providers.items()}
            self.completions = TracedCompletionService(self.completions, traces, base_urls)

    async def close(self) -> None:
        await self.router.close()
        await self.admob_keys.close()
        if self.google_play is not None:
            await self.google_play.close()
        await self.deliverer.close()
        await self.store.close()
        if self.background_redis is not self.redis:
            await self.background_redis.aclose()
        if self.script_calls is not None:
            await self.script_calls.aclose()
        await self.redis.aclose()
        tracing.stop()  # last: the spans of everything above go out now


async def open_services(
    settings: Settings,
    *,
    clock: Callable[[], float] = time.time,
    require_redis: bool = False,
    traces: bool = False,
) -> Services:
    """Connect to Redis and the durable store (migrating it) and build the services.
    ``require_redis`` (``svc serve``): a Redis that does not answer is a ``StartupError``;
    otherwise (a worker, an admin command) what needs it fails closed until it answers.
    ``traces``: set this process's tracing up when the ``OTEL_*`` variables ask for it
    (``app.core.tracing``; ``Services.close`` stops it): only a worker's, once it has forked
    (not ``svc serve`` itself, which forks them, nor an admin command, which serves nothing)."""
    assert settings.redis_url, "settings must be resolved first"
    assert settings.database_url, "settings must be resolved first"
    if traces:
        tracing.start()
    redis = open_redis(settings, settings.redis_max_connections)
    background = open_redis(settings, 4, name="svc-background")
    # The requests' script calls share one pipelined connection (a Cluster's go by slot
    # through its client).
    script_calls = (
        None
        if settings.redis_cluster
        else PipelinedRedis(
            settings.redis_url,
            timeout_s=settings.redis_timeout_s,
            locate=master_locator(settings) if settings.redis_sentinels else None,
        )
    )
    try:
        store = open_store(settings.database_url)
    except ValueError as exc:
        raise SettingsError(f"SVC_DATABASE_URL: {exc}") from exc
    await store.migrate()
    services = Services(
        settings,
        redis,
        store,
        background_redis=background,
        script_calls=script_calls,
        clock=clock,
    )
    try:
        if require_redis:
            await check_redis_answers(redis, redis_named(settings))
        await check_eviction_policy(redis, allow=settings.allow_evicting_redis)
    except StartupError:
        await services.close()
        raise
    with contextlib.suppress(*REDIS_ERRORS):
        await services.scripts.load()  # EVALSHA reloads them later anyway
        await services.holds.sync_clock()  # the sweeper measures it again every round
    return services


async def bootstrap_dev(services: Services) -> str | None:
    """On first start in dev mode: an account with credits and a live key, written to
    ``data/dev-key.txt`` (0600). Returns the key when it was created now."""
    path = Path(services.settings.data_dir) / DEV_KEY_FILE
    if path.exists():
        return None
    accounts = services.accounts
    pid = await accounts.create_account()
    await accounts.grant_purchased(pid, services.settings.dev_credits, source="dev")
    # admin: the one key a new deployment starts with manages the others
    dev = KeyCreateRequest(name="dev", environment="live", daily_cap_credits=None, role="admin")
    created = await services.api_keys.create_key(pid, dev)
    write_private(path, created.key + "\n")
    return created.key


def public_error(exc: Exception) -> ApiError:
    """The error a client (or ``svc admin``) sees for an exception: an ``ApiError`` as it is,
    an unreachable Redis or store as 503, anything else as a 500 that names nothing inside
    (the exception itself goes to the log)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, (*REDIS_ERRORS, StoreError, ConnectionError)):
        log.warning("backend unavailable: %s", type(exc).__name__)
        return service_unavailable()
    log.exception("unhandled error", exc_info=exc)
    return ApiError(ErrorKind.INTERNAL, "The server had an error processing your request.")
