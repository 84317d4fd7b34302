"""A real ``svc serve`` (two workers) on a Valkey Cluster with one replica per primary (issue
48 item 1): kill -9 the primary that holds an account's shard, and svc follows the replica
the cluster promotes without a restart. Requests during the switch fail closed (503, in the
API's shape), none is served without its charge; after it every request is charged on the
new primary, a purchase made during the switch is applied once, and reconcile is clean."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from redis.crc import key_slot

from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.test_admin_cli import svc_admin
from tests.e2e.test_sentinel import _chat, _credits
from tests.faults.invariants import KEYS
from tests.support import stripe_signing as stripe
from tests.support.valkey_cluster import ValkeyCluster, kill_node, slot_owner, wait_for_promotion

pytestmark = pytest.mark.e2e
SWITCH_S = 90.0  # node timeout, election, and room for a slow machine
STRIPE_SECRET = "whsec_cluster_failover"


@pytest.fixture(scope="module")
def replicated_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ValkeyCluster]:
    cluster = ValkeyCluster(
        tmp_path_factory.mktemp("valkey-replicated"), replicas=1, node_timeout_ms=2000
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def server(
    replicated_cluster: ValkeyCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    env = {
        "SVC_REDIS_URL": replicated_cluster.url,
        "SVC_REDIS_CLUSTER": "true",
        # the seed node may be the one killed: svc admin, started after it, asks another
        "SVC_REDIS_CLUSTER_NODES": ",".join(
            f"127.0.0.1:{port}" for port in replicated_cluster.ports[1:]
        ),
        "SVC_DEV_BOOTSTRAP": "true",
        "SVC_FLUSH_INTERVAL_S": "0.2",
        "SVC_REDIS_TIMEOUT_S": "1",
        "SVC_STRIPE_WEBHOOK_SECRETS": STRIPE_SECRET,
    }
    srv = start_server(tmp_path_factory.mktemp("svc-replicated"), workers=2, extra_env=env)
    try:
        yield srv
    finally:
        stop_server(srv.process)


def _purchase(server: Server, body: bytes) -> httpx.Response:
    signature = stripe.sign(body, STRIPE_SECRET, int(time.time()))
    return httpx.post(
        f"{server.base_url}/purchases/stripe",
        content=body,
        headers={"stripe-signature": signature, "content-type": "application/json"},
        timeout=30,
    )


def test_svc_follows_a_cluster_failover_without_a_restart(
    replicated_cluster: ValkeyCluster, server: Server
) -> None:
    pid = server.new_account(1_000_000)
    key = server.new_key(pid)
    served = [_chat(server, key) for _ in range(5)]
    assert {r.status_code for r in served} == {200}
    spent = sum(map(_credits, served))
    time.sleep(1.5)  # the replica has it all (linked; an idle second is plenty)

    slot = key_slot(KEYS.account(KEYS.shard(pid), pid).encode())
    old = slot_owner(replicated_cluster, slot)
    assert old is not None
    kill_node(replicated_cluster, old)
    purchase = stripe.checkout_session(
        account=pid, credits="700", session_id="cs_failover", payment_intent="pi_failover"
    )
    since_kill: list[httpx.Response] = []
    bought: list[httpx.Response] = []
    in_a_row = 0
    deadline = time.monotonic() + SWITCH_S
    while in_a_row < 5:  # until five in a row are served on the new primary
        assert time.monotonic() < deadline, "svc was not served again after the failover"
        if not bought or bought[-1].status_code != 200:
            bought.append(_purchase(server, purchase))  # Stripe's retries until acknowledged
        response = _chat(server, key)
        if response.status_code == 200:
            since_kill.append(response)
            in_a_row += 1
            continue
        in_a_row = 0
        assert response.status_code == 503, response.text  # fail closed, in the API's shape
        assert response.json()["error"]["code"] == "service_unavailable"
        time.sleep(0.2)
    assert wait_for_promotion(replicated_cluster, slot, old) != old
    while bought[-1].status_code != 200:
        assert time.monotonic() < deadline, bought[-1].text
        bought.append(_purchase(server, purchase))
    assert {r.status_code for r in bought} <= {200, 503}
    charged = sum(map(_credits, since_kill))
    assert server.balance(pid) == 1_000_000 + 700 - spent - charged
    code, report = svc_admin(server.env, "reconcile")
    assert code == 0, report
    assert report["pending_entries"] == 0
