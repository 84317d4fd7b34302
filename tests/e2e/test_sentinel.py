"""A real ``svc serve`` (two workers) on Valkey behind a Sentinel (issue 48 item 1): it finds
the primary through the Sentinel, and when the primary is killed and the replica promoted it
follows without a restart; requests during the switch fail closed (503), none is served
without its charge, and every one served after it is charged on the new primary."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.test_admin_cli import svc_admin
from tests.support.valkey_sentinel import ValkeySentinel

pytestmark = pytest.mark.e2e
MSG = [{"role": "user", "content": "Say hello in five words."}]
SWITCH_S = 60.0  # the failover, with room for a slow machine


@pytest.fixture(scope="module")
def sentinel_group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ValkeySentinel]:
    group = ValkeySentinel(tmp_path_factory.mktemp("valkey-sentinel"))
    group.start()
    try:
        yield group
    finally:
        group.stop()


@pytest.fixture(scope="module")
def sentinel_server(
    sentinel_group: ValkeySentinel, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    env = {
        "SVC_REDIS_SENTINELS": sentinel_group.sentinels,
        "SVC_DEV_BOOTSTRAP": "true",
        "SVC_FLUSH_INTERVAL_S": "0.2",
        "SVC_REDIS_TIMEOUT_S": "1",
    }
    srv = start_server(tmp_path_factory.mktemp("svc-sentinel"), workers=2, extra_env=env)
    try:
        yield srv
    finally:
        stop_server(srv.process)


def _chat(server: Server, key: str) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/chat/completions",
        json={"model": "svc-fast", "messages": MSG, "stream": True},
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )


def _credits(response: httpx.Response) -> int:
    """The svc metadata chunk's credits_used (the last data event before [DONE])."""
    return int(json.loads(response.text.split("\n\n")[-3][6:])["svc"]["credits_used"])


def test_svc_follows_a_failover_without_a_restart(
    sentinel_group: ValkeySentinel, sentinel_server: Server
) -> None:
    server = sentinel_server
    pid = server.new_account(1_000_000)
    key = server.new_key(pid)
    served = [_chat(server, key) for _ in range(5)]
    assert {r.status_code for r in served} == {200}
    spent = sum(map(_credits, served))
    assert server.balance(pid) == 1_000_000 - spent
    time.sleep(1.5)  # the replica has it all (it is linked; an idle second is plenty)

    old = sentinel_group.primary()
    assert old is not None
    sentinel_group.kill(old)
    since_kill: list[httpx.Response] = []
    in_a_row = 0
    deadline = time.monotonic() + SWITCH_S
    while in_a_row < 5:  # until five in a row are served on the new primary
        assert time.monotonic() < deadline, "svc was not served again after the failover"
        response = _chat(server, key)
        if response.status_code == 200:
            since_kill.append(response)
            in_a_row += 1
            continue
        in_a_row = 0
        assert response.status_code == 503, response.text  # fail closed, in the API's shape
        assert response.json()["error"]["code"] == "service_unavailable"
        time.sleep(0.2)
    assert sentinel_group.primary() != old
    # every request served since the kill reserved and settled on the new primary, and is
    # charged there (the five before it had reached the replica while the primary idled)
    charged = sum(map(_credits, since_kill))
    assert server.balance(pid) == 1_000_000 - spent - charged


def test_admin_commands_reach_the_primary_through_the_sentinel(
    sentinel_group: ValkeySentinel, sentinel_server: Server
) -> None:
    code, out = svc_admin(sentinel_server.env, "redis", "ROLE")
    assert code == 0, out
    assert json.dumps(out).count("master") >= 1
    code, out = svc_admin(sentinel_server.env, "reconcile")
    assert code == 0, out
