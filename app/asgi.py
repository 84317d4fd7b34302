"""ASGI entry point for granian workers: ``app.asgi:app``.

Reads resolved settings from the environment (``svc serve`` exports them; a container
sets ``SVC_REDIS_URL``, ``SVC_DATABASE_URL``, ``SVC_KEY_PEPPER``, ``SVC_ADMIN_TOKEN``).
"""

from app.http.app import Gateway, create_app
from app.runtime import resolve
from app.settings import Settings

app = Gateway(create_app(resolve(Settings.from_env(), start_embedded=False)[0]))
