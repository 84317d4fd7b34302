"""The soak: mixed traffic across two instances for ``SVC_SOAK_S`` seconds (120 in CI;
``make soak`` runs 600) while a chaos loop restarts Valkey, kills and pauses workers and
drops every upstream connection; then every money rule (DESIGN.md §5), the durable rollups
and the activity log are checked, and each instance's memory and open files over the run.

The traffic: every alias (one of whose upstreams drops its streams part-way), tools,
``include_usage``, clients that leave mid-stream, Responses requests, test keys; keys are
created, rotated and revoked and spotlight views rewarded all along."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import signal
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import psycopg
import pytest

from bench.mock_upstream import MockProcess, start_in_subprocess
from tests.faults.conftest import worker_pids
from tests.faults.fleet import Fleet, running_fleet
from tests.faults.invariants import Account, Seen, durable_totals, request

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

SOAK_S = float(os.environ.get("SVC_SOAK_S", "120"))
WARMUP_S = max(15.0, SOAK_S * 0.15)
CHAOS_EVERY_S = 6.0
SAMPLE_EVERY_S = 2.0
CLIENTS = 10
GRANT = 2_000_000
CAP = 100  # the capped key's daily credits: reached within the first minute
SOAK_ALIASES = {
    "svc-fast": ["fast-slow5"],
    "svc-code": ["code-slow10-drop12"],  # a stream past 12 chunks loses its upstream
    "svc-smart": ["smart-slow20"],
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@dataclass
class Owner:
    """An account of the soak: its keys (live ones in use, test ones apart) and its money."""

    pid: str
    manager: str  # a live key the clients never use: lists and revokes the others
    live: list[str]  # the keys the churn rotates and replaces
    capped: str  # a key with a daily cap, never churned: its lineage's counter is checked
    capped_kid: str
    test: str
    granted: int = GRANT
    seen: list[Seen] = field(default_factory=list)
    sent: list[tuple[str, float, int]] = field(default_factory=list)  # key, sent at, status
    revoked: dict[str, float] = field(default_factory=dict)  # key -> when DELETE answered


@dataclass
class Soak:
    fleet: Fleet
    owners: list[Owner]
    mock: MockProcess
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    events: Counter[str] = field(default_factory=Counter)
    paused: set[int] = field(default_factory=set)
    samples: dict[int, list[tuple[float, int, int]]] = field(default_factory=dict)

    def instance_urls(self) -> Iterator[str]:
        return itertools.cycle([srv.base_url for srv in self.fleet.instances])


def _chat_body(rng: random.Random) -> dict[str, object]:
    body: dict[str, object] = {
        "model": rng.choice(["svc-auto", "svc-fast", "svc-code", "svc-smart"]),
        "max_tokens": rng.randint(4, 24),
        "messages": [{"role": "user", "content": rng.choice(["hi", "def f(): pass", "why?"])}],
    }
    if rng.random() < 0.25:
        body["tools"] = TOOLS
    if rng.random() < 0.5:
        body["stream_options"] = {"include_usage": True}
    return body


async def _send(client: httpx.AsyncClient, url: str, key: str, body: object, whole: bool) -> Seen:
    """One streamed request, read whole or only to its first bytes (a client that leaves)."""
    try:
        async with client.stream(
            "POST", url, json=body, headers={"authorization": f"Bearer {key}"}
        ) as r:
            if r.status_code != 200:
                await r.aread()
                try:
                    return Seen(r.status_code, error=r.json()["error"])
                except (ValueError, KeyError):
                    return Seen(r.status_code)
            if whole:
                await r.aread()
            else:
                async for _ in r.aiter_bytes():
                    break
            return Seen(r.status_code)
    except httpx.HTTPError as exc:
        return Seen(0, transport_error=type(exc).__name__)


def _responses_body(rng: random.Random) -> dict[str, object]:
    return {"model": "svc-fast", "input": "hello", "max_output_tokens": rng.randint(16, 32)}


async def _client(soak: Soak, n: int) -> None:
    rng = random.Random(n)
    urls = soak.instance_urls()
    async with httpx.AsyncClient(timeout=60) as client:
        while not soak.stopping.is_set():
            owner = rng.choice(soak.owners)
            url = next(urls)
            roll = rng.random()
            if roll < 0.1:  # a test key: nothing deducted, kept out of the money
                await request(client, f"{url}/chat/completions", owner.test, _chat_body(rng))
                soak.events["test-key requests"] += 1
                continue
            key = rng.choice([*owner.live, owner.capped])
            sent_at = time.monotonic()
            if roll < 0.2:
                chat = f"{url}/chat/completions"
                seen = await _send(client, chat, key, _chat_body(rng), whole=False)
                soak.events["left mid-stream"] += 1
            elif roll < 0.3:
                body = _responses_body(rng)
                seen = await _send(client, f"{url}/responses", key, body, whole=True)
                soak.events["responses requests"] += 1
            else:
                seen = await request(client, f"{url}/chat/completions", key, _chat_body(rng))
                soak.events["chat requests"] += 1
            owner.seen.append(seen)
            owner.sent.append((key, sent_at, seen.status))
            soak.events[f"status {seen.status}"] += 1
            if seen.error is not None:
                soak.events[f"error {seen.error.get('code')}"] += 1
            if seen.status != 200:
                await asyncio.sleep(0.05)


async def _admin(soak: Soak, method: str, path: str, body: object = None) -> httpx.Response | None:
    """An admin call through either instance; None when it got no answer (chaos)."""
    srv = random.choice(soak.fleet.instances)
    try:
        return await asyncio.to_thread(srv.admin, method, path, body)
    except httpx.HTTPError:
        return None


async def _own(soak: Soak, owner: Owner, method: str, path: str) -> httpx.Response | None:
    """A /v1 call with the owner's managing key through either instance; None: no answer."""
    url = random.choice(soak.fleet.instances).base_url
    headers = {"authorization": f"Bearer {owner.manager}"}
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            return await client.request(method, f"{url}/{path}", headers=headers)
    except httpx.HTTPError:
        return None


async def _key_churn(soak: Soak) -> None:
    """Rotate (with a short grace) or replace-and-revoke a key of some account, every second."""
    rng = random.Random(99)
    while not soak.stopping.is_set():
        await asyncio.sleep(1.0)
        owner = rng.choice(soak.owners)
        listed = await _own(soak, owner, "GET", "api-keys")
        if listed is None or listed.status_code != 200:
            continue
        by_last4 = {k["last4"]: k["id"] for k in listed.json()["data"] if k["status"] == "active"}
        old = rng.choice(owner.live)
        key_id = by_last4.get(old[-4:])
        if key_id is None:
            continue
        if rng.random() < 0.5:
            made = await _admin(
                soak,
                "POST",
                f"/accounts/{owner.pid}/api-keys/{key_id}/rotate",
                {"grace_seconds": 2},
            )
            kind = "keys rotated"
        else:
            body = {"name": "soak", "environment": "live", "daily_cap_credits": None}
            made = await _admin(soak, "POST", f"/accounts/{owner.pid}/api-keys", body)
            kind = "keys replaced and revoked"
        if made is None or made.status_code != 201:
            continue
        owner.live = [k for k in owner.live if k != old] + [made.json()["key"]]
        if kind == "keys replaced and revoked":
            revoked = await _own(soak, owner, "DELETE", f"api-keys/{key_id}")
            if revoked is not None and revoked.is_success:
                owner.revoked[old] = time.monotonic()
            else:
                kind = "keys replaced (revocation refused in the chaos)"
        soak.events[kind] += 1


async def _spotlights(soak: Soak) -> None:
    """A verified view for some account every few seconds, sent until it has an answer."""
    rng = random.Random(7)
    while not soak.stopping.is_set():
        await asyncio.sleep(3.0)
        owner = rng.choice(soak.owners)
        view = {"view_id": f"soak-{uuid.uuid4().hex[:12]}"}
        for _ in range(40):  # the same view id again until svc answers: granted once at most
            answer = await _admin(soak, "POST", f"/accounts/{owner.pid}/spotlights", view)
            if answer is not None and answer.status_code in (200, 201):
                owner.granted += int(answer.json()["credits"])
                soak.events["spotlight rewards"] += 1
                break
            if answer is not None and answer.status_code == 429:
                soak.events["spotlights past the daily limit"] += 1
                break
            await asyncio.sleep(0.5)


def _restart_valkey(soak: Soak) -> None:
    valkey = soak.fleet.valkey
    assert valkey is not None
    valkey.stop(signal.SIGKILL)
    time.sleep(1.0)
    valkey.start()


def _kill_a_worker(soak: Soak) -> None:
    pids = worker_pids(random.choice(soak.fleet.instances))
    if pids:
        os.kill(random.choice(pids), signal.SIGKILL)  # granian starts another


def _pause_a_worker(soak: Soak) -> None:
    """SIGSTOP a worker for 3 s: its flusher (and sweeper) stop where they are, leases held."""
    pids = worker_pids(random.choice(soak.fleet.instances))
    if not pids:
        return
    pid = random.choice(pids)
    soak.paused.add(pid)
    os.kill(pid, signal.SIGSTOP)
    time.sleep(3.0)
    os.kill(pid, signal.SIGCONT)
    soak.paused.discard(pid)


def _drop_the_upstream(soak: Soak) -> None:
    """Stop the mock upstream (every connection to it drops) and start it on the same port."""
    port = soak.mock.port
    soak.mock.stop()
    soak.mock.process.join(10)
    time.sleep(0.5)
    soak.mock = start_in_subprocess(chunks=100, port=port)


CHAOS: list[tuple[str, Callable[[Soak], None]]] = [
    ("valkey restarted (SIGKILL)", _restart_valkey),
    ("workers killed (SIGKILL)", _kill_a_worker),
    ("workers paused 3 s (flusher paused)", _pause_a_worker),
    ("upstream restarted (connections dropped)", _drop_the_upstream),
]


async def _chaos(soak: Soak) -> None:
    await asyncio.sleep(WARMUP_S / 2)
    for name, act in itertools.cycle(CHAOS):
        if soak.stopping.is_set():
            return
        await asyncio.to_thread(act, soak)
        soak.events[name] += 1
        await asyncio.sleep(CHAOS_EVERY_S)


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


async def _sampler(soak: Soak, started: float) -> None:
    """Each instance's resident memory and open file descriptors, all its processes summed."""
    while not soak.stopping.is_set():
        for srv in soak.fleet.instances:
            rss = fds = 0
            for proc in _tree(srv.process.pid):
                try:
                    rss += proc.memory_info().rss
                    fds += proc.num_fds()
                except psutil.NoSuchProcess:
                    continue
            soak.samples.setdefault(srv.process.pid, []).append(
                (time.monotonic() - started, rss, fds)
            )
        await asyncio.sleep(SAMPLE_EVERY_S)


def _activity(database_url: str, pids: list[str]) -> dict[str, tuple[int, int]]:
    """Rows and credits of each account's live activity log."""
    with psycopg.connect(database_url) as conn:
        return {
            pid: tuple(  # type: ignore[misc]
                int(v)
                for v in conn.execute(
                    "SELECT COUNT(*), COALESCE(SUM(credits_used), 0) FROM activity "
                    "WHERE account_pid = %s AND environment = 'live'",
                    (pid,),
                ).fetchone()
                or (0, 0)
            )
            for pid in pids
        }


def _growth(series: list[tuple[float, int, int]]) -> dict[str, float]:
    """Memory and descriptors early after warm-up against the run's last third (medians)."""
    after = [s for s in series if s[0] >= WARMUP_S]
    third = max(1, len(after) // 3)
    early, late = after[:third], after[-third:]
    return {
        "rss_mb_early": statistics.median(s[1] for s in early) / 2**20,
        "rss_mb_late": statistics.median(s[1] for s in late) / 2**20,
        "fds_early": statistics.median(s[2] for s in early),
        "fds_late": statistics.median(s[2] for s in late),
    }


def _report(soak: Soak, money: dict[str, object], path: Path) -> dict[str, object]:
    growth = {str(pid): _growth(series) for pid, series in soak.samples.items()}
    report = {"seconds": SOAK_S, "events": dict(soak.events), "money": money, "growth": growth}
    path.write_text(json.dumps(report, indent=2))
    print("\nsoak report:", json.dumps(report, indent=2))  # shown with -s (make soak)
    return report


@pytest.mark.timeout(SOAK_S + 600)  # the run, then the checks
async def test_soak_under_chaos_keeps_every_credit(tmp_path: Path, postgres_server: str) -> None:
    mock = start_in_subprocess(chunks=100)
    try:
        with running_fleet(tmp_path, postgres_server, mock, SOAK_ALIASES) as fleet:
            await _soak(fleet, mock, tmp_path)
    finally:
        mock.stop()


async def _soak(fleet: Fleet, mock: MockProcess, tmp_path: Path) -> None:
    owners = []
    for _ in range(3):
        pid = fleet.a.new_account(GRANT)
        live = [fleet.a.new_key(pid) for _ in range(3)]
        body = {"name": "capped", "environment": "live", "daily_cap_credits": CAP}
        capped = fleet.b.admin("POST", f"/accounts/{pid}/api-keys", body).json()
        test_key = fleet.b.new_key(pid, environment="test")
        manager = fleet.b.new_key(pid, role="admin")
        kid = capped["id"].removeprefix("key_")
        owners.append(Owner(pid, manager, live, capped["key"], kid, test_key))
    soak = Soak(fleet, owners, mock)
    started = time.monotonic()
    tasks = [asyncio.ensure_future(_client(soak, n)) for n in range(CLIENTS)]
    tasks += [
        asyncio.ensure_future(job)
        for job in (_key_churn(soak), _spotlights(soak), _chaos(soak), _sampler(soak, started))
    ]
    try:
        await asyncio.sleep(SOAK_S)
    finally:
        soak.stopping.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        for pid in list(soak.paused):
            os.kill(pid, signal.SIGCONT)
    assert fleet.valkey is not None
    assert fleet.valkey.server is not None  # the chaos is over: Valkey runs
    accounts = [Account(o.pid, o.granted, caps={o.capped_kid: CAP}, seen=o.seen) for o in owners]
    totals = await asyncio.to_thread(fleet.check, accounts, uncertain=True)
    durable = await asyncio.to_thread(durable_totals, fleet.database_url, [o.pid for o in owners])
    activity = await asyncio.to_thread(_activity, fleet.database_url, [o.pid for o in owners])
    for owner in owners:  # one activity row per request the rollups count, the same credits
        sums = durable[owner.pid]
        assert activity[owner.pid] == (sums["requests"], sums["credits"]), owner.pid
        # no request sent with a key after its DELETE answered was served
        served_after = [
            (key[-4:], status)
            for key, sent_at, status in owner.sent
            if key in owner.revoked and sent_at > owner.revoked[key] and status == 200
        ]
        assert served_after == [], served_after
        soak.events["requests refused for the daily cap"] += sum(
            1
            for s in owner.seen
            if s.error and s.error.get("code") in {"daily_cap_exceeded", "daily_cap_held"}
        )
    report = _report(soak, dict(totals), tmp_path / "soak-report.json")
    assert totals["with_meta"] > 0
    # what the chaos may answer: 503 (Redis away), 502 (the upstream away), 401 (a key
    # rotated or revoked as a client picked it), 429 (the capped key's cap), 0 (a
    # connection a killed worker dropped)
    statuses = {name for name in soak.events if name.startswith("status ")}
    allowed = {"status 200", "status 503", "status 502", "status 401", "status 429", "status 0"}
    assert statuses <= allowed, statuses
    assert soak.events["requests refused for the daily cap"] > 0  # the cap was reached
    for name, _ in CHAOS:
        assert soak.events[name] > 0, name  # every kind of chaos happened
    for pid, growth in report["growth"].items():  # type: ignore[union-attr]
        # no growth after warm-up: a leak would add memory or descriptors with every request
        assert growth["rss_mb_late"] <= growth["rss_mb_early"] * 1.25 + 16, (pid, growth)
        assert growth["fds_late"] <= growth["fds_early"] + 24, (pid, growth)
