"""An ASGI app's lifespan, run from granian's RSGI hooks.

granian calls an RSGI app's ``__rsgi_init__`` before the worker serves and ``__rsgi_del__``
once it has stopped serving, both synchronously and with the event loop not running.
``Lifespan`` starts the ASGI lifespan as a task on that loop and runs the loop until the
app answers each phase. In between the task waits for the shutdown event while what its
startup began (svc's sweeper and flusher, its signal handlers) runs with the server.
"""

from __future__ import annotations

import asyncio
from typing import Any

from app.http.rsgi.asgi_bridge import ASGI_VERSION, ASGIApp, Message


class LifespanFailed(Exception):
    """The app reported a lifespan phase as failed, or ended without answering it. The
    app's own exception, when it raised one, is the ``__cause__``."""


class Lifespan:
    """The startup and shutdown of one ASGI app, each driven to its answer on a loop that
    is not running. ``state`` is the ASGI lifespan state every request's scope copies."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app
        self.state: dict[str, Any] = {}
        self._task: asyncio.Future[None] | None = None
        self._events: asyncio.Queue[Message] | None = None
        self._answer: asyncio.Future[Message] | None = None

    def startup(self, loop: asyncio.AbstractEventLoop) -> None:
        """Raises ``LifespanFailed`` when the app cannot start."""
        loop.run_until_complete(self._start())

    def shutdown(self, loop: asyncio.AbstractEventLoop) -> None:
        """Raises ``LifespanFailed`` when the app's shutdown failed; nothing to do when
        it never started."""
        if self._task is not None:
            loop.run_until_complete(self._stop(self._task))

    async def _start(self) -> None:
        # the queue belongs to the loop that runs the lifespan: made here, inside it
        self._events = asyncio.Queue()
        scope = {"type": "lifespan", "asgi": ASGI_VERSION, "state": self.state}
        self._task = asyncio.ensure_future(self._app(scope, self._events.get, self._reply))
        await self._phase("startup", self._task)

    async def _stop(self, task: asyncio.Future[None]) -> None:
        await self._phase("shutdown", task)
        await asyncio.wait((task,))  # it returns once it has answered

    async def _phase(self, name: str, task: asyncio.Future[None]) -> None:
        assert self._events is not None
        self._answer = answer = asyncio.get_running_loop().create_future()
        self._events.put_nowait({"type": f"lifespan.{name}"})
        await asyncio.wait((answer, task), return_when=asyncio.FIRST_COMPLETED)
        if answer.done() and answer.result()["type"] == f"lifespan.{name}.complete":
            return
        raise LifespanFailed(f"the app's lifespan {name} failed") from await _ended(task)

    async def _reply(self, message: Message) -> None:
        """The app's ``send``: its answer to the phase under way."""
        if self._answer is not None and not self._answer.done():
            self._answer.set_result(message)


async def _ended(task: asyncio.Future[None]) -> BaseException | None:
    """What the task ended with (its exception or None), cancelling it when it still waits:
    an app that reported a failure has nothing more to do."""
    if not task.done():
        task.cancel()
    await asyncio.wait((task,))
    return None if task.cancelled() else task.exception()
