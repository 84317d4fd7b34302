"""Who acts as the operator in the running task: a request of the admin API, or ``svc
admin``. Set at the top (the admin routes' middleware, the CLI) and read where an action's
durable write is made, so its audit entry is written in that write's transaction
(``app.accounts.audit``) without every layer between passing it on. Unset (``None``): the
write is no operator's (a ``/v1`` key managing keys, a network's spotlight callback), and
no entry is written."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Literal

import msgspec

Actor = Literal["admin_api", "cli"]
ADMIN_API: Actor = "admin_api"
CLI: Actor = "cli"


class Operator(msgspec.Struct, frozen=True, kw_only=True):
    actor: Actor
    request_id: str | None = None  # the request's x-request-id (None: the CLI)
    client_address: str | None = None  # as the failed-auth throttle resolves it


operator: contextvars.ContextVar[Operator | None] = contextvars.ContextVar(
    "svc_operator", default=None
)


@contextlib.contextmanager
def acting(who: Operator) -> Iterator[None]:
    """``who`` is the operator until the block ends."""
    token = operator.set(who)
    try:
        yield
    finally:
        operator.reset(token)
