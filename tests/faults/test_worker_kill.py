"""A worker SIGKILLed while it relays streams: granian replaces it, the sweeper refunds what
its streams held, exactly once, and the money adds up."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import httpx
import pytest

from tests.faults.conftest import Stack, start_stack, worker_pids
from tests.faults.invariants import (
    KEYS,
    Account,
    Seen,
    check_money,
    open_reservations,
    parse_stream,
    wait_settled,
)

pytestmark = [pytest.mark.e2e, pytest.mark.faults]
BODY = {"model": "svc-smart", "max_tokens": 40, "messages": [{"role": "user", "content": "hi"}]}


def test_a_killed_worker_s_reservations_are_refunded_after_the_deadline(
    tmp_path: Path, stack_factory: list[Stack]
) -> None:
    stack = start_stack(
        tmp_path,
        # svc refuses upstream timeouts of a third of the deadline or more
        idle_timeout_s=1.9,
        env={
            "SVC_RESERVATION_DEADLINE_S": "6",
            "SVC_SWEEP_INTERVAL_S": "0.5",
            "SVC_FLUSH_INTERVAL_S": "3600",  # keep the usage events in the streams to read
        },
    )
    stack_factory.append(stack)
    srv = stack.srv
    pid = srv.new_account(1_000_000)
    key = srv.new_key(pid)
    started = threading.Barrier(21)
    seen: list[Seen] = []

    def stream() -> None:  # 40 tokens, 100 ms apart: about 4 s
        text, status = "", 0
        try:
            with httpx.stream(
                "POST",
                f"{srv.base_url}/chat/completions",
                json=BODY,
                headers={"authorization": f"Bearer {key}"},
                timeout=60,
            ) as r:
                status = r.status_code
                lines = r.iter_text()
                text = next(lines)
                started.wait(30)
                text += "".join(lines)
            seen.append(parse_stream(status, text, {}))
        except httpx.HTTPError as exc:  # its worker was killed
            cut = parse_stream(status, text, {})
            cut.transport_error = type(exc).__name__
            seen.append(cut)

    threads = [threading.Thread(target=stream) for _ in range(20)]
    for t in threads:
        t.start()
    started.wait(30)
    r = stack.redis()
    assert open_reservations(r) == 20
    workers = worker_pids(srv)
    assert len(workers) == 2
    os.kill(workers[0], signal.SIGKILL)
    for t in threads:
        t.join(30)
    wait_settled(r)  # swept after the 6 s deadline
    assert open_reservations(r) == 0
    killed = [s for s in seen if s.meta is None]
    assert killed  # the victim's clients lost their streams...
    assert all(s.transport_error for s in killed)
    assert len(killed) < 20  # ...the other worker's finished
    events = [
        fields
        for shard in range(KEYS.shards)
        for _, fields in r.xrange(KEYS.events(shard))
        if fields[b"acct"] == pid.encode()
    ]
    assert len({e[b"rid"] for e in events}) == len(events) == 20  # settled once each
    outcomes = sorted(e[b"outcome"] for e in events)
    assert outcomes == sorted([b"swept"] * len(killed) + [b"completed"] * (20 - len(killed)))
    assert all(e[b"credits"] == b"0" for e in events if e[b"outcome"] == b"swept")
    # the killed worker was replaced: the server still serves
    again = httpx.post(
        f"{srv.base_url}/chat/completions",
        json={**BODY, "max_tokens": 2},
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert again.status_code == 200
    seen.append(parse_stream(200, again.text, {}))
    # /metrics sums every worker's counters, the killed one's included: what it reserved
    # is counted once, as settled or refunded (the sweeper's refunds too)
    credits = dict.fromkeys(("reserved", "settled", "refunded"), 0.0)
    for (name, labels), value in srv.metrics().items():
        if name == "svc_credits_total" and dict(labels)["environment"] == "live":
            credits[dict(labels)["movement"]] += value  # summed over the aliases
    assert credits["reserved"] == credits["settled"] + credits["refunded"] > 0
    stack.flush()
    check_money(r, stack.database_url, [Account(pid, 1_000_000, seen=seen)])
