"""SIGTERM mid-stream: no new connection is accepted, streams shorter than the grace period
finish, a longer one is cut cleanly and charged for what it delivered, the final flush
runs, and the server exits 0."""

from __future__ import annotations

import math
import signal
import threading
from pathlib import Path

import httpx
import pytest

from app.core.tokens import estimate_prompt_tokens, estimate_tokens
from tests.e2e.test_admin_cli import svc_admin
from tests.faults.conftest import Stack, start_stack
from tests.faults.invariants import Account, Seen, check_money, open_reservations, parse_stream

pytestmark = [pytest.mark.e2e, pytest.mark.faults]
SHORT = {"model": "svc-fast", "max_tokens": 60, "messages": [{"role": "user", "content": "hi"}]}
LONG = {"model": "svc-smart", "messages": [{"role": "user", "content": "hi"}]}  # 100 x 100 ms


def test_sigterm_finishes_short_streams_cuts_long_ones_settles_flushes_exits_0(
    tmp_path: Path, stack_factory: list[Stack]
) -> None:
    stack = start_stack(tmp_path, env={"SVC_SHUTDOWN_GRACE_S": "3", "SVC_FLUSH_INTERVAL_S": "3600"})
    stack_factory.append(stack)
    srv = stack.srv
    pid = srv.new_account(1_000_000)
    key = srv.new_key(pid)
    seen: dict[str, list[Seen]] = {"short": [], "long": []}
    begun = threading.Barrier(7)

    def stream(kind: str, body: dict[str, object]) -> None:
        with httpx.stream(
            "POST",
            f"{srv.base_url}/chat/completions",
            json=body,
            headers={"authorization": f"Bearer {key}"},
            timeout=60,
        ) as r:
            parts = r.iter_text()
            text = next(parts)
            begun.wait(30)
            text += "".join(parts)
        seen[kind].append(parse_stream(r.status_code, text, {}))

    threads = [threading.Thread(target=stream, args=("short", SHORT)) for _ in range(4)]
    threads += [threading.Thread(target=stream, args=("long", LONG)) for _ in range(2)]
    for t in threads:
        t.start()
    begun.wait(30)
    srv.process.send_signal(signal.SIGTERM)  # short streams have ~1 s to go, long ones ~10 s
    refused = 0
    while srv.process.poll() is None and refused < 3:
        try:
            httpx.get(f"{srv.root_url}/healthz", timeout=5)
        except httpx.ConnectError:
            refused += 1  # not accepting any more
    assert refused == 3
    assert srv.process.wait(60) == 0
    for t in threads:
        t.join(30)

    assert len(seen["short"]) == 4
    for s in seen["short"]:  # finished normally within the grace period
        assert s.status == 200
        assert s.done
        assert s.error is None
        assert s.meta is not None
        assert len(s.content.split()) == 60
    assert len(seen["long"]) == 2
    for s in seen["long"]:  # cut at the end of the grace period, cleanly
        assert s.status == 200
        assert s.done
        assert s.error is not None
        assert (s.error["type"], s.error["code"]) == ("server_error", "service_unavailable")
        delivered = len(s.content.split())
        assert 0 < delivered < 100
        # svc-smart 50 in / 150 out; no usage report came, so svc's estimates are billed:
        # the prompt's, and the text relayed (at least a token per piece)
        completion = max(delivered, estimate_tokens(s.content))
        prompt = estimate_prompt_tokens(["hi"])
        assert s.credits_used == math.ceil((prompt * 50 + completion * 150) / 1000)

    r = stack.redis()
    assert open_reservations(r) == 0
    code, lag = svc_admin(srv.env, "usage-lag")
    assert code == 0
    assert lag["pending_events"] == 0  # the shutdown's final flush drained every stream
    everything = seen["short"] + seen["long"]
    check_money(r, stack.database_url, [Account(pid, 1_000_000, seen=everything)])
