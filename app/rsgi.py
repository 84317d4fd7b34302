"""RSGI entry point for granian workers: ``app.rsgi:app``, the gateway
(``app.http.rsgi.gateway``) over Litestar's app and svc's services.

Reads resolved settings from the environment (``svc serve`` exports them; a container
sets ``SVC_REDIS_URL``, ``SVC_DATABASE_URL``, ``SVC_KEY_PEPPER``, ``SVC_ADMIN_TOKEN``).
"""

import gc

from app.kv import redis_import  # noqa: F401  # first: redis-py without OpenTelemetry's metrics

# isort: split
from app.core.logs import configure_logging
from app.core.metrics import share_across_workers
from app.core.settings import Settings
from app.http.app import create_app
from app.http.rsgi.gateway import Gateway
from app.ops.resolve import resolve

settings = Settings.from_env()
configure_logging(settings.log_level)
share_across_workers(settings.shared_metrics_dir())
app = Gateway(create_app(resolve(settings, start_embedded=False)[0]))

# A worker holding 5,000 streams keeps their objects in the collector's oldest generation,
# and a full collection walks all of them with the worker's loop stopped: 3 to 5 of them in
# 20 s, up to 1.35 s each, at 10,000 streams on two workers (issue 53, bench/CHANGELOG.md).
# A stream's objects outlive the young generations by design (a stream lasts seconds), so
# full collections wait for 100 passes of the middle generation instead of 10; and what
# start-up made (about 100,000 objects) lives as long as the worker: frozen, never walked.
gc.freeze()
gc.set_threshold(700, 10, 100)
