"""Verified spotlights on a real server (2 workers, the embedded Valkey, SQLite): an intent,
a verifier's signed callback, AppLovin MAX's and Unity LevelPlay's callbacks, each view
rewarded once under concurrent deliveries, the ledger and `svc admin reconcile` clean
after; nothing for a disabled account, and AdMob's route off without its ad units."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import httpx
import pytest

from app.spotlights.signed import SIGNATURE_HEADER, sign
from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.test_admin_cli import svc_admin
from tests.support.mediation import applovin_query, levelplay_query

pytestmark = pytest.mark.e2e
SECRET = b"e2e-verifier-secret"
EVENT_KEY = "e2e-max-event-key"
PRIVATE_KEY = "e2e-levelplay-private-key"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(
        tmp_path_factory.mktemp("spotlights"),
        workers=2,
        extra_env={
            "SVC_SPOTLIGHT_SECRETS": f"retired,{SECRET.decode()}",
            "SVC_APPLOVIN_EVENT_KEYS": f"retired,{EVENT_KEY}",
            "SVC_LEVELPLAY_PRIVATE_KEYS": PRIVATE_KEY,
        },
    )
    yield srv
    stop_server(srv.process)


def _signed(intent: str, view_id: str) -> tuple[bytes, dict[str, str]]:
    body = json.dumps({"intent": intent, "view_id": view_id}).encode()
    return body, {SIGNATURE_HEADER: sign(SECRET, int(time.time()), body)}


def test_a_verified_view_is_rewarded_once(server: Server) -> None:
    pid = server.new_account(0)
    key = server.new_key(pid)
    auth = {"authorization": f"Bearer {key}"}
    issued = httpx.post(f"{server.base_url}/spotlights/intents", headers=auth)
    assert issued.status_code == 201, issued.text
    token = issued.json()["token"]
    body, headers = _signed(token, "view-e2e-1")

    async def deliver_all() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
            return await asyncio.gather(
                *(
                    client.post("/spotlights/verified", content=body, headers=headers)
                    for _ in range(50)
                )
            )

    answers = asyncio.run(deliver_all())
    assert {a.status_code for a in answers} == {200}
    assert sum(a.json()["rewarded"] for a in answers) == 1
    credits = httpx.get(f"{server.base_url}/credits", headers=auth).json()
    assert credits["earned_available"] == 5_000
    assert credits["earned_expires_at"] is not None
    other_body, other_headers = _signed(token, "view-e2e-2")
    reused = httpx.post(
        f"{server.base_url}/spotlights/verified", content=other_body, headers=other_headers
    )
    assert (reused.status_code, reused.json()["error"]["code"]) == (400, "intent_used")
    metrics = server.metrics()
    labels = (("network", "signed"), ("result", "rewarded"))
    assert metrics[("svc_spotlight_callbacks_total", labels)] == 1
    code, out = svc_admin(server.env, "reconcile")
    assert code == 0, out


def test_a_disabled_account_earns_nothing_and_admob_is_off(server: Server) -> None:
    """Issue 44 items 7 and 1: an intent issued before `svc admin disable` rewards nothing
    (200, so the verifier stops retrying); AdMob's route is off without SVC_ADMOB_AD_UNITS."""
    pid = server.new_account(0)
    auth = {"authorization": f"Bearer {server.new_key(pid)}"}
    issued = httpx.post(f"{server.base_url}/spotlights/intents", headers=auth)
    assert issued.status_code == 201, issued.text
    code, out = svc_admin(server.env, "disable", pid)
    assert code == 0, out
    body, headers = _signed(issued.json()["token"], "view-e2e-off")
    answer = httpx.post(f"{server.base_url}/spotlights/verified", content=body, headers=headers)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "object": "spotlight.callback",
        "rewarded": False,
        "reason": "account_disabled",
    }
    credits = server.admin("GET", f"/accounts/{pid}/credits").json()
    assert credits["earned_available"] == 0
    labels = (("network", "signed"), ("result", "account_disabled"))
    assert server.metrics()[("svc_spotlight_callbacks_total", labels)] == 1
    off = httpx.get(f"{server.base_url}/spotlights/admob?ad_unit=1&signature=x&key_id=1")
    assert (off.status_code, off.json()["error"]["code"]) == (404, "not_found")


def _callbacks(server: Server, network: str, query: bytes, count: int) -> list[httpx.Response]:
    url = f"/spotlights/{network}?" + query.decode()

    async def deliver_all() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
            return await asyncio.gather(*(client.get(url) for _ in range(count)))

    return asyncio.run(deliver_all())


@pytest.mark.parametrize("network", ["applovin", "levelplay"])
def test_a_mediated_view_is_rewarded_once(server: Server, network: str) -> None:
    """Issue 50: 50 concurrent deliveries of one MAX or LevelPlay event reward it once
    across both workers (LevelPlay's every answer ``<eventId>:OK``); a forged hash writes
    nothing; the ledger entry is the network's and reconcile finds nothing amiss."""
    pid = server.new_account(0)
    auth = {"authorization": f"Bearer {server.new_key(pid)}"}
    issued = httpx.post(f"{server.base_url}/spotlights/intents", headers=auth)
    assert issued.status_code == 201, issued.text
    token = issued.json()["token"]
    event = f"evt-e2e-{network}"
    if network == "applovin":
        query, forged = applovin_query(token, event, EVENT_KEY), applovin_query(token, event, "x")
    else:
        query = levelplay_query(token, event, PRIVATE_KEY)
        forged = levelplay_query(token, event, "x")
    refused = _callbacks(server, network, forged, 1)[0]
    assert (refused.status_code, refused.json()["error"]["code"]) == (401, "invalid_signature")
    answers = _callbacks(server, network, query, 50)
    assert {a.status_code for a in answers} == {200}
    if network == "applovin":
        assert sum(a.json()["rewarded"] for a in answers) == 1
    else:
        assert {a.text for a in answers} == {f"{event}:OK"}
    credits = httpx.get(f"{server.base_url}/credits", headers=auth).json()
    assert credits["earned_available"] == 5_000
    ledger = server.admin("GET", f"/accounts/{pid}/ledger").json()["data"]
    rewards = [entry for entry in ledger if entry["kind"] == "reward"]
    assert [(r["source"], r["reference"]) for r in rewards] == [(network, event)]
    labels = (("network", network), ("result", "rewarded"))
    assert server.metrics()[("svc_spotlight_callbacks_total", labels)] == 1
    code, out = svc_admin(server.env, "reconcile")
    assert code == 0, out
