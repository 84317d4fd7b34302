"""The money invariants (docs/architecture.md, Money rules), checked against Redis and the
durable store after a run, and the client side of a run (what each request saw).

Every fault test ends with ``check_money``:

1. no pool and no cap counter is negative;
2. every accepted request was settled exactly once: no reservation is left open, and the
   usage counters count one request per accepted one;
3. Σ ``credits_used`` of the metadata chunks = Σ balance decrease = Σ usage counters
   (when some accepted streams were cut before their metadata chunk, what the clients saw
   is at most what was charged);
4. after the drain, the durable rollups equal the Redis usage counters;
5. no key's cap counter for a day exceeds its daily cap.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import httpx
import redis as redis_sync

from app.kv.layout import KeySpace
from app.store import open_store

KEYS = KeySpace("svc", 64)
USAGE_FIELDS = ("requests", "prompt_tokens", "completion_tokens", "credits")


@dataclass
class Seen:
    """One request as its client saw it."""

    status: int
    meta: dict[str, object] | None = None  # the svc object of the metadata chunk
    error: dict[str, object] | None = None  # a JSON error body, or the stream's error event
    done: bool = False  # the stream ended with data: [DONE]
    content: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    transport_error: str | None = None  # the connection failed or broke mid-stream

    @property
    def accepted(self) -> bool:
        return self.status == 200

    @property
    def credits_used(self) -> int:
        assert self.meta is not None
        return int(self.meta["credits_used"])  # type: ignore[call-overload]


@dataclass
class Account:
    """An account a test funded, its keys' caps, and what its clients saw."""

    pid: str
    start: int
    caps: dict[str, int] = field(default_factory=dict)  # kid -> daily cap
    seen: list[Seen] = field(default_factory=list)


def parse_stream(status: int, text: str, headers: dict[str, str]) -> Seen:
    """A finished response: an error body, or the SSE events of a stream."""
    if status != 200:
        try:
            error = json.loads(text)["error"]
        except (ValueError, KeyError):
            error = {"raw": text[:200]}
        return Seen(status, error=error, headers=headers)
    seen = Seen(status, headers=headers)
    for event in text.split("\n\n"):
        if event == "data: [DONE]":
            seen.done = True
        elif event.startswith("data: {"):
            chunk = json.loads(event[6:])
            if "error" in chunk:
                seen.error = chunk["error"]
            elif "svc" in chunk:
                seen.meta = chunk["svc"]
            elif chunk.get("choices"):
                seen.content += chunk["choices"][0]["delta"].get("content") or ""
    return seen


async def request(client: httpx.AsyncClient, url: str, key: str, body: dict[str, object]) -> Seen:
    """One chat request, read to its end; a broken connection is recorded, not raised."""
    status, headers, text = 0, {}, ""
    try:
        async with client.stream(
            "POST", url, json=body, headers={"authorization": f"Bearer {key}"}
        ) as r:
            status, headers = r.status_code, dict(r.headers)
            async for chunk in r.aiter_text():
                text += chunk
    except httpx.HTTPError as exc:
        seen = parse_stream(status, text, headers) if status == 200 else Seen(status)
        seen.transport_error = type(exc).__name__
        return seen
    return parse_stream(status, text, headers)


async def load(
    base_url: str, key: str, body: dict[str, object], *, total: int, concurrency: int
) -> list[Seen]:
    """``total`` requests, ``concurrency`` at a time."""
    url = f"{base_url}/chat/completions"
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:

        async def one() -> Seen:
            async with gate:
                return await request(client, url, key, body)

        return list(await asyncio.gather(*(one() for _ in range(total))))


def _ints(values: dict[bytes, bytes]) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in values.items()}


def open_reservations(r: redis_sync.Redis) -> int:
    """Reservations in the per-shard sets (each has one hash, counted apart)."""
    return sum(int(r.zcard(KEYS.reservations(s))) for s in range(KEYS.shards))


def reservation_hashes(r: redis_sync.Redis) -> int:
    return sum(1 for _ in r.scan_iter(match="svc:*:rsv:*", count=1000))


def wait_settled(r: redis_sync.Redis, timeout_s: float = 20.0) -> None:
    """Wait for the sweeper to refund what dead requests held (a short deadline is set)."""
    deadline = time.monotonic() + timeout_s
    while open_reservations(r) and time.monotonic() < deadline:
        time.sleep(0.2)


def negative_counters(r: redis_sync.Redis) -> list[str]:
    """Cap counters below zero (pools are checked per account)."""
    bad = []
    for name in r.scan_iter(match="svc:*:cap:*", count=1000):
        value = r.get(name)
        if value is not None and int(value) < 0:
            bad.append(name.decode())
    return bad


def durable_totals(database_url: str, pids: list[str]) -> dict[str, dict[str, int]]:
    async def read() -> dict[str, dict[str, int]]:
        store = open_store(database_url)
        try:
            out = {}
            for pid in pids:
                sums = await store.usage_totals(pid)
                out[pid] = {f: getattr(sums, f) if sums else 0 for f in USAGE_FIELDS}
            return out
        finally:
            await store.close()

    return asyncio.run(read())


def check_money(
    r: redis_sync.Redis,
    database_url: str,
    accounts: list[Account],
    *,
    uncertain: bool = False,
) -> dict[str, int]:
    """Assert the invariants over ``accounts``; the caller has drained the usage streams
    (``svc admin flush``). ``uncertain``: some requests may have been accepted and then
    failed before their client learned it (Redis died under them), so the request count is
    bounded rather than exact. Returns the totals, for the test's own assertions."""
    assert open_reservations(r) == 0, "reservations left open"
    assert reservation_hashes(r) == 0, "reservation hashes left behind"
    assert negative_counters(r) == []
    durable = durable_totals(database_url, [a.pid for a in accounts])
    totals = {"decrease": 0, "reported": 0, "requests": 0, "with_meta": 0}
    for acct in accounts:
        shard = KEYS.shard(acct.pid)
        pools = r.hmget(KEYS.account(shard, acct.pid), ["earned", "purchased"])
        earned, purchased = (int(v or 0) for v in pools)
        assert earned >= 0
        assert purchased >= 0
        decrease = acct.start - earned - purchased
        usage = _ints(r.hgetall(KEYS.usage_total(shard, acct.pid)))
        counters = {f: usage.get(f"live:{f}", 0) for f in USAGE_FIELDS}
        assert decrease == counters["credits"], (acct.pid, decrease, counters)
        assert durable[acct.pid] == counters, (acct.pid, durable[acct.pid], counters)
        with_meta = [s for s in acct.seen if s.meta is not None]
        reported = sum(s.credits_used for s in with_meta)
        accepted = sum(1 for s in acct.seen if s.accepted)
        if uncertain:
            assert len(with_meta) <= counters["requests"] <= len(acct.seen)
        else:
            assert counters["requests"] == accepted, (acct.pid, counters, accepted)
        if len(with_meta) == accepted and not uncertain:
            assert reported == decrease, (acct.pid, reported, decrease)
        else:
            assert reported <= decrease, (acct.pid, reported, decrease)
        for kid, cap in acct.caps.items():
            for name in r.scan_iter(match=f"svc:{{s{shard}}}:cap:{kid}:*"):
                assert 0 <= int(r.get(name) or 0) <= cap, (kid, cap)
        totals["decrease"] += decrease
        totals["reported"] += reported
        totals["requests"] += counters["requests"]
        totals["with_meta"] += len(with_meta)
    return totals
