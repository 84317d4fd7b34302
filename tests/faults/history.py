"""The history of a fault run (issue 48 item 3), in the spirit of Jepsen's bank test: every
operation a client invokes against svc is recorded as invoked, then ok, failed or unknown
(the client never learned its outcome: a timeout, a connection cut), with what it asked and
what svc answered. The checkers (``tests.faults.checker``) read the history beside the
durable store and Redis once the nemeses have stopped and svc has repaired.

The workload, over a few dozen accounts: purchases (signed Stripe events, retried like
Stripe until acknowledged), rewards (signed spotlight callbacks), completions (streams),
operator grants and debits (each with its Idempotency-Key, retried with it), and balance
reads."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from app.spotlights.signed import sign as sign_view
from tests.support import stripe_signing as stripe

OK, FAILED, UNKNOWN = "ok", "failed", "unknown"
RETRIED = ("purchase", "grant", "debit")  # money the sender retries until acknowledged
STRIPE_SECRET = "whsec_history_run"
VIEW_SECRET = b"history-view-secret-0123456789"


@dataclass
class Op:
    """One operation: what was asked, and what became of it."""

    n: int
    kind: str  # purchase | reward | completion | grant | debit | read
    pid: str
    ref: str  # its idempotency: a session, a view, an Idempotency-Key ("" for the others)
    asked: int  # credits it asks to add or take (0 for completions and reads)
    invoked_at: float
    status: str = UNKNOWN
    value: int = 0  # what svc answered: credits applied, used, or read
    attempts: int = 0
    note: str = ""
    done_at: float = 0.0


@dataclass
class Customer:
    """An account of the run and the live key its app uses."""

    pid: str
    key: str


@dataclass
class History:
    ops: list[Op] = field(default_factory=list)
    counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def invoke(self, kind: str, pid: str, ref: str = "", asked: int = 0) -> Op:
        op = Op(next(self.counter), kind, pid, ref, asked, time.monotonic())
        self.ops.append(op)
        return op

    def of(self, kind: str, status: str | None = None) -> list[Op]:
        return [o for o in self.ops if o.kind == kind and (status is None or o.status == status)]

    def summary(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for op in self.ops:
            out.setdefault(op.kind, {OK: 0, FAILED: 0, UNKNOWN: 0})[op.status] += 1
        return out

    def save(self, path: Path) -> None:
        with path.open("w") as f:
            for op in self.ops:
                f.write(json.dumps({**asdict(op)}) + "\n")


def _done(op: Op, status: str, value: int = 0, note: str = "") -> Op:
    op.status, op.value, op.note, op.done_at = status, value, note, time.monotonic()
    return op


class Workload:
    """Clients of every kind, ``clients`` at a time, until ``stop`` is set."""

    def __init__(
        self, root_url: str, admin_token: str, customers: list[Customer], seed: int = 48
    ) -> None:
        self.root = root_url
        self.admin = {"authorization": f"Bearer {admin_token}"}
        self.customers = customers
        self.history = History()
        self.stop = asyncio.Event()
        self.rng = random.Random(seed)
        self.pending: list[tuple[Op, object]] = []  # retried ops not yet acknowledged
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(10.0, connect=3.0))

    async def close(self) -> None:
        await self.client.aclose()

    async def run(self, clients: int) -> None:
        await asyncio.gather(*(self._loop(random.Random(n)) for n in range(clients)))

    async def _loop(self, rng: random.Random) -> None:
        kinds = ["completion"] * 6 + ["purchase", "reward", "grant", "debit", "read", "read"]
        while not self.stop.is_set():
            kind = rng.choice(kinds)
            customer = rng.choice(self.customers)
            await getattr(self, kind)(customer, rng)

    # -- money in and out, retried until acknowledged -----------------------------------------

    async def purchase(self, c: Customer, rng: random.Random) -> None:
        n = rng.randrange(10**12)
        credits = rng.choice([200, 500, 1000])
        body = stripe.checkout_session(
            account=c.pid,
            credits=str(credits),
            session_id=f"cs_hist_{n}",
            payment_intent=f"pi_hist_{n}",
            event_id=f"evt_hist_{n}",
        )
        op = self.history.invoke("purchase", c.pid, f"cs_hist_{n}", credits)
        await self._deliver(op, ("purchase", body))

    async def grant(self, c: Customer, rng: random.Random) -> None:
        key = f"hist-grant-{rng.randrange(10**12)}"
        credits = rng.choice([100, 300])
        op = self.history.invoke("grant", c.pid, key, credits)
        await self._deliver(op, ("grants", key, credits))

    async def debit(self, c: Customer, rng: random.Random) -> None:
        key = f"hist-debit-{rng.randrange(10**12)}"
        credits = rng.choice([50, 150])
        op = self.history.invoke("debit", c.pid, key, -credits)
        await self._deliver(op, ("debits", key, credits))

    async def _deliver(self, op: Op, what: tuple[object, ...], give_up_s: float = 3.0) -> None:
        """Send until acknowledged, as Stripe and an operator's script do; what is still
        unacknowledged after ``give_up_s`` is left to ``drain`` (sent again later)."""
        deadline = time.monotonic() + give_up_s
        while True:
            if await self._send(op, what):
                return
            if time.monotonic() > deadline or self.stop.is_set():
                self.pending.append((op, what))
                return
            await asyncio.sleep(0.2)

    async def _send(self, op: Op, what: tuple[object, ...]) -> bool:
        op.attempts += 1
        try:
            if what[0] == "purchase":
                body = what[1]
                assert isinstance(body, bytes)
                signed = stripe.sign(body, STRIPE_SECRET, int(time.time()))
                r = await self.client.post(
                    f"{self.root}/v1/purchases/stripe",
                    content=body,
                    headers={"stripe-signature": signed, "content-type": "application/json"},
                )
            else:
                route, key, credits = what
                r = await self.client.post(
                    f"{self.root}/admin/v1/accounts/{op.pid}/{route}",
                    json={"credits": credits},
                    headers={**self.admin, "idempotency-key": str(key)},
                )
        except httpx.HTTPError as exc:
            op.note = type(exc).__name__
            return False
        if r.status_code == 200:
            _done(op, OK, op.asked)
            return True
        if r.status_code >= 500 or r.status_code == 409:  # 409: its first try still running
            op.note = f"{r.status_code}"
            return False
        _done(op, FAILED, note=f"{r.status_code} {r.text[:120]}")
        return True

    async def drain(self, timeout_s: float) -> None:
        """Stripe's and the operator's retries after the faults: every money-in or -out
        operation not yet acknowledged is sent again until it is."""
        deadline = time.monotonic() + timeout_s
        while self.pending and time.monotonic() < deadline:
            left = []
            for op, what in self.pending:
                if not await self._send(op, what):
                    left.append((op, what))
            self.pending = left
            if left:
                await asyncio.sleep(0.5)

    # -- rewards, completions, reads: not retried ---------------------------------------------

    async def reward(self, c: Customer, rng: random.Random) -> None:
        view = f"view-{rng.randrange(10**12)}"
        op = self.history.invoke("reward", c.pid, view)
        auth = {"authorization": f"Bearer {c.key}"}
        try:
            issued = await self.client.post(f"{self.root}/v1/spotlights/intents", headers=auth)
            if issued.status_code != 201:
                _done(op, FAILED, note=f"intent {issued.status_code}")
                return
            body = json.dumps({"intent": issued.json()["token"], "view_id": view}).encode()
            header = sign_view(VIEW_SECRET, int(time.time()), body)
            r = await self.client.post(
                f"{self.root}/v1/spotlights/verified",
                content=body,
                headers={"svc-signature": header, "content-type": "application/json"},
            )
        except httpx.HTTPError as exc:
            _done(op, UNKNOWN, note=type(exc).__name__)
            return
        if r.status_code != 200:
            _done(op, UNKNOWN if r.status_code >= 500 else FAILED, note=f"{r.status_code}")
            return
        answer = r.json()
        _done(op, OK, int(answer.get("credits") or 0) if answer.get("rewarded") else 0)

    async def completion(self, c: Customer, rng: random.Random) -> None:
        op = self.history.invoke("completion", c.pid)
        body = {
            "model": "svc-fast",
            "stream": True,
            "max_tokens": rng.randint(5, 30),
            "messages": [{"role": "user", "content": "count"}],
        }
        text, status = "", 0
        try:
            async with self.client.stream(
                "POST",
                f"{self.root}/v1/chat/completions",
                json=body,
                headers={"authorization": f"Bearer {c.key}"},
            ) as r:
                status = r.status_code
                async for chunk in r.aiter_text():
                    text += chunk
        except httpx.HTTPError as exc:
            # accepted and then cut: charged or not, the client cannot know
            _done(op, UNKNOWN if status == 200 else FAILED, note=type(exc).__name__)
            return
        if status != 200:
            _done(op, FAILED, note=str(status))
            return
        used = _credits_used(text)
        _done(op, OK if used is not None else UNKNOWN, used or 0)

    async def read(self, c: Customer, rng: random.Random) -> None:
        op = self.history.invoke("read", c.pid)
        try:
            r = await self.client.get(
                f"{self.root}/admin/v1/accounts/{c.pid}/credits", headers=self.admin
            )
        except httpx.HTTPError as exc:
            _done(op, UNKNOWN, note=type(exc).__name__)
            return
        if r.status_code != 200:
            _done(op, FAILED, note=str(r.status_code))
            return
        _done(op, OK, int(r.json()["total_available"]))
        await asyncio.sleep(0.05)


def _credits_used(text: str) -> int | None:
    """The metadata chunk's ``credits_used`` (None: the stream ended without it)."""
    for event in reversed(text.split("\n\n")):
        if event.startswith("data: {") and '"svc"' in event:
            return int(json.loads(event[6:])["svc"]["credits_used"])
    return None
