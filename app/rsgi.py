"""RSGI entry point for granian workers: ``app.rsgi:app``, the gateway
(``app.http.rsgi.gateway``) over Litestar's app and svc's services.

Reads resolved settings from the environment (``svc serve`` exports them; a container
sets ``SVC_REDIS_URL``, ``SVC_DATABASE_URL``, ``SVC_KEY_PEPPER``, ``SVC_ADMIN_TOKEN``).
"""

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
