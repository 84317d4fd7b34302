"""Verified spotlights on a real server (2 workers, the embedded Valkey, SQLite): an intent,
a verifier's signed callback, the reward once under concurrent deliveries, the ledger and
`svc admin reconcile` clean after."""

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

pytestmark = pytest.mark.e2e
SECRET = b"e2e-verifier-secret"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(
        tmp_path_factory.mktemp("spotlights"),
        workers=2,
        extra_env={"SVC_SPOTLIGHT_SECRETS": f"retired,{SECRET.decode()}"},
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
