"""Idempotency-Key on the streaming endpoints, end to end on a 2-worker server: a request
sent again is replayed byte for byte and charged once, whatever happened to the first one's
connection (cut mid-stream, or answered 502 by a proxy), with the OpenAI SDK's own retries."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import subprocess
import threading
from collections.abc import Iterator

import httpx
import openai
import pytest
import redis as redis_sync

from app.ops.embedded import redis_url, socket_path
from tests.e2e.conftest import ROOT, Server, start_server, stop_server
from tests.support.processes import free_port

NODE_DIR = ROOT / "tests" / "clients" / "node"

pytestmark = pytest.mark.e2e
MSG = [{"role": "user", "content": "tell me a story"}]
KEPT_BYTES = 20_000  # the server's SVC_IDEMPOTENT_RESPONSE_BYTES


@pytest.fixture(scope="module")
def slow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Simulated tokens 5 ms apart: a 60-token stream runs about 0.3 s."""
    srv = start_server(
        tmp_path_factory.mktemp("idem"),
        workers=2,
        extra_env={
            "SVC_SIM_DELAY_MS": "5",
            "SVC_SIM_REPLY_TOKENS": "400",
            "SVC_IDEMPOTENT_RESPONSE_BYTES": str(KEPT_BYTES),
        },
    )
    yield srv
    stop_server(srv.process)


def _h(key: str, idem: str | None = None) -> dict[str, str]:
    headers = {"authorization": f"Bearer {key}"}
    if idem is not None:
        headers["idempotency-key"] = idem
    return headers


def _post(server: Server, key: str, idem: str, body: dict[str, object]) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/chat/completions", json=body, headers=_h(key, idem), timeout=60
    )


def _chat(max_tokens: int = 60, **extra: object) -> dict[str, object]:
    return {"model": "svc-fast", "messages": MSG, "max_tokens": max_tokens, **extra}


def _svc(body: bytes) -> dict[str, int]:
    """The svc metadata of a stream's bytes."""
    events = [e for e in body.decode().split("\n\n") if e.startswith("data: {")]
    return dict(json.loads(events[-1][6:])["svc"])


def _requests_today(server: Server, key: str) -> int:
    usage = httpx.get(f"{server.base_url}/usage?days=1", headers=_h(key)).json()
    return int(usage["daily"][0]["requests_count"])


def test_a_completion_sent_again_is_replayed_byte_for_byte_for_free(slow: Server) -> None:
    pid = slow.new_account(100_000)
    key = slow.new_key(pid)
    first = _post(slow, key, "order-1", _chat())
    assert first.status_code == 200
    charged = 100_000 - slow.balance(pid)
    assert charged == _svc(first.content)["credits_used"] > 0
    for _ in range(4):  # both workers
        again = _post(slow, key, "order-1", _chat())
        assert again.status_code == 200
        assert again.content == first.content
        assert again.headers["idempotent-replayed"] == "true"
        assert again.headers["content-type"].startswith("text/event-stream")
    assert 100_000 - slow.balance(pid) == charged
    assert _requests_today(slow, key) == 1
    # another key is another request
    assert _post(slow, key, "order-2", _chat()).content != first.content
    assert _requests_today(slow, key) == 2


def test_the_responses_api_replays_too(slow: Server) -> None:
    pid = slow.new_account(100_000)
    key = slow.new_key(pid)
    body = {"model": "svc-fast", "input": "hi", "max_output_tokens": 20}
    url = f"{slow.base_url}/responses"
    first = httpx.post(url, json=body, headers=_h(key, "r-1"), timeout=60)
    balance = slow.balance(pid)
    again = httpx.post(url, json=body, headers=_h(key, "r-1"), timeout=60)
    assert (again.status_code, again.content) == (200, first.content)
    assert slow.balance(pid) == balance
    # the same key on the other route is another request: refused
    other = _post(slow, key, "r-1", _chat())
    assert (other.status_code, other.json()["error"]["code"]) == (422, "idempotency_key_reused")


def test_the_messages_api_replays_too_and_refuses_in_its_own_shape(slow: Server) -> None:
    """Anthropic's Messages API takes the key as the other streams do (docs/api.md, "Safe
    retries"): replayed byte for byte and charged once; another body, or a bad key, is
    refused in Anthropic's error shape and changes nothing."""
    pid = slow.new_account(100_000)
    key = slow.new_key(pid)
    body = {"model": "svc-fast", "max_tokens": 20, "messages": MSG}
    url = f"{slow.base_url}/messages"
    first = httpx.post(url, json=body, headers=_h(key, "m-1"), timeout=60)
    assert first.status_code == 200
    assert b"event: message_stop" in first.content
    balance = slow.balance(pid)
    assert balance < 100_000
    for _ in range(2):
        again = httpx.post(url, json=body, headers=_h(key, "m-1"), timeout=60)
        assert (again.status_code, again.content) == (200, first.content)
        assert again.headers["idempotent-replayed"] == "true"
    assert slow.balance(pid) == balance
    assert _requests_today(slow, key) == 1
    other = httpx.post(url, json={**body, "max_tokens": 21}, headers=_h(key, "m-1"), timeout=60)
    assert other.status_code == 422
    assert other.json()["type"] == "error"
    assert other.json()["error"]["type"] == "invalid_request_error"
    bad = httpx.post(url, json=body, headers=_h(key, "x" * 256), timeout=60)
    assert bad.status_code == 400
    assert bad.json()["type"] == "error"
    assert "Idempotency-Key" in bad.json()["error"]["message"]
    assert slow.balance(pid) == balance


def test_the_sdk_stream_is_the_same_stream_again(slow: Server) -> None:
    pid = slow.new_account(100_000)
    client = openai.OpenAI(base_url=slow.base_url, api_key=slow.new_key(pid), max_retries=0)

    def run() -> list[openai.types.chat.ChatCompletionChunk]:
        return list(
            client.chat.completions.create(
                model="svc-fast",
                messages=[{"role": "user", "content": "hi"}],
                max_tokens=20,
                stream=True,
                extra_headers={"Idempotency-Key": "sdk-1"},
            )
        )

    first, second = run(), run()
    assert [c.model_dump() for c in first] == [c.model_dump() for c in second]
    assert len({c.id for c in first + second}) == 1


def test_another_body_with_the_key_is_a_422_and_changes_nothing(slow: Server) -> None:
    pid = slow.new_account(100_000)
    key = slow.new_key(pid)
    assert _post(slow, key, "k", _chat()).status_code == 200
    balance = slow.balance(pid)
    other = _post(slow, key, "k", _chat(max_tokens=61))
    error = other.json()["error"]
    assert (other.status_code, error["code"], error["type"]) == (
        422,
        "idempotency_key_reused",
        "invalid_request_error",
    )
    assert slow.balance(pid) == balance


@pytest.mark.parametrize("value", ["x" * 256, "tab\there"])
def test_a_bad_key_is_a_400_and_changes_nothing(slow: Server, value: str) -> None:
    pid = slow.new_account(1_000)
    key = slow.new_key(pid)
    r = httpx.post(
        f"{slow.base_url}/chat/completions",
        json=_chat(),
        headers={"authorization": f"Bearer {key}", "idempotency-key": value.encode()},
        timeout=30,
    )
    assert (r.status_code, r.json()["error"]["param"]) == (400, "Idempotency-Key")
    assert slow.balance(pid) == 1_000


def test_while_the_first_runs_the_sdk_waits_and_gets_the_replay(slow: Server) -> None:
    pid = slow.new_account(100_000)
    key = slow.new_key(pid)
    client = openai.OpenAI(base_url=slow.base_url, api_key=key, max_retries=3)
    request = {**_chat(), "stream": True, "extra_headers": {"Idempotency-Key": "wait-1"}}
    running = client.chat.completions.with_raw_response.create(**request)  # type: ignore[call-overload]
    chunks = running.http_response.iter_raw()
    first = next(chunks)  # the stream has started, and runs on
    # the SDK sends the same bytes again: 409 while the first runs, retried after its
    # retry-after, by which time the first has finished
    replay = client.chat.completions.with_raw_response.create(**request)  # type: ignore[call-overload]
    replayed = replay.http_response.read()
    first += b"".join(chunks)
    assert replayed == first
    assert replay.http_response.headers["idempotent-replayed"] == "true"
    assert 100_000 - slow.balance(pid) == _svc(first)["credits_used"]


def test_a_running_request_answers_409_with_retry_after(slow: Server) -> None:
    pid = slow.new_account(100_000)
    key = slow.new_key(pid)
    url = f"{slow.base_url}/chat/completions"
    with httpx.stream("POST", url, json=_chat(), headers=_h(key, "w"), timeout=60) as running:
        chunks = running.iter_raw()
        next(chunks)
        busy = _post(slow, key, "w", _chat())
        for _ in chunks:  # read to the end
            pass
    assert (busy.status_code, busy.json()["error"]["code"]) == (409, "idempotency_in_progress")
    assert busy.headers["retry-after"] == "1"
    assert _post(slow, key, "w", _chat()).headers["idempotent-replayed"] == "true"


async def test_concurrent_sends_of_one_key_run_once(slow: Server) -> None:
    pid = slow.new_account(1_000_000)
    key = slow.new_key(pid)
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=30)) as client:
        results = await asyncio.gather(
            *(
                client.post(
                    f"{slow.base_url}/chat/completions", json=_chat(), headers=_h(key, "once")
                )
                for _ in range(30)
            )
        )
    codes = [r.status_code for r in results]
    assert set(codes) <= {200, 409}
    streams = {r.content for r in results if r.status_code == 200}
    assert len(streams) == 1  # the one that ran, and replays of it
    assert 1_000_000 - slow.balance(pid) == _svc(streams.pop())["credits_used"]
    assert _requests_today(slow, key) == 1


def test_a_response_over_the_bound_is_charged_once_and_not_replayed(slow: Server) -> None:
    pid = slow.new_account(1_000_000)
    key = slow.new_key(pid)
    first = _post(slow, key, "big", _chat(max_tokens=300))
    assert len(first.content) > KEPT_BYTES
    balance = slow.balance(pid)
    again = _post(slow, key, "big", _chat(max_tokens=300))
    error = again.json()["error"]
    assert (again.status_code, error["code"]) == (409, "idempotency_response_unavailable")
    assert again.headers["x-should-retry"] == "false"
    assert slow.balance(pid) == balance


# -- connections that fail between the server and the client --------------------------------


class FlakyProxy:
    """A TCP proxy in front of svc whose first connection fails as ``mode`` says: ``cut``
    closes it after ``cut_after`` bytes of the response; ``502`` lets svc answer in full
    and gives the client a 502 instead. Later connections pass through."""

    def __init__(self, target_port: int, mode: str, cut_after: int = 1500) -> None:
        self.target_port = target_port
        self.mode = mode
        self.cut_after = cut_after
        self.port = free_port()
        self.connections = 0
        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            first = self.connections == 1
            threading.Thread(target=self._serve, args=(client, first), daemon=True).start()

    def _serve(self, client: socket.socket, first: bool) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.target_port))
        threading.Thread(target=_pipe, args=(client, upstream), daemon=True).start()
        if not first:
            _pipe(upstream, client)
            return
        seen = b""
        while b"data: [DONE]" not in seen:
            data = upstream.recv(65536)
            if not data:
                break
            seen += data
            if self.mode == "cut" and len(seen) >= self.cut_after:
                client.sendall(seen[: self.cut_after])
                break
        if self.mode == "502":
            body = b'{"error":{"message":"bad gateway"}}'
            client.sendall(
                b"HTTP/1.1 502 Bad Gateway\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
            )
        for end in (client, upstream):
            _hang_up(end)


def _hang_up(end: socket.socket) -> None:
    """Close at once: shutdown wakes a thread blocked reading it (close alone would not)."""
    with contextlib.suppress(OSError):
        end.shutdown(socket.SHUT_RDWR)
    end.close()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            _hang_up(end)


def _port(server: Server) -> int:
    return int(server.root_url.rsplit(":", 1)[1])


def test_a_stream_cut_mid_way_and_sent_again_is_charged_once(slow: Server) -> None:
    pid = slow.new_account(100_000)
    key = slow.new_key(pid)
    proxy = FlakyProxy(_port(slow), "cut")
    client = openai.OpenAI(base_url=proxy.base_url, api_key=key, max_retries=3)
    request = {**_chat(), "stream": True, "extra_headers": {"Idempotency-Key": "cut-1"}}
    received: list[object] = []
    try:
        stream = client.chat.completions.create(**request)  # type: ignore[call-overload]
        with pytest.raises((openai.APIConnectionError, httpx.HTTPError)):
            received.extend(stream)
        assert received  # the cut came mid-stream
        # the app sends it again; svc finished the first meanwhile (or the SDK waits on 409)
        replay = client.chat.completions.with_raw_response.create(**request)
        body = replay.http_response.read()
    finally:
        proxy.close()
    svc = _svc(body)
    assert 100_000 - slow.balance(pid) == svc["credits_used"]
    # all of it: the first ran to its end after the cut
    assert re.search(rb'"finish_reason":"(stop|length)"', body)
    assert body.count(b'"content":') > len(received)
    assert _requests_today(slow, key) == 1


def test_a_502_the_sdk_retries_is_charged_once(slow: Server) -> None:
    pid = slow.new_account(100_000)
    key = slow.new_key(pid)
    proxy = FlakyProxy(_port(slow), "502")
    client = openai.OpenAI(base_url=proxy.base_url, api_key=key, max_retries=2)
    try:
        stream = client.chat.completions.with_raw_response.create(
            **_chat(), stream=True, extra_headers={"Idempotency-Key": "gw-1"}
        )
        body = stream.http_response.read()
    finally:
        proxy.close()
    assert proxy.connections >= 2  # the SDK retried the 502 itself
    assert stream.http_response.headers["idempotent-replayed"] == "true"
    assert 100_000 - slow.balance(pid) == _svc(body)["credits_used"]
    assert _requests_today(slow, key) == 1


# -- the JSON routes that create or grant ---------------------------------------------------


def _redis_values(server: Server) -> bytes:
    """Every Redis key and value (strings and hashes), concatenated."""
    r = redis_sync.Redis.from_url(redis_url(socket_path(server.data_dir)))
    out = []
    for name in r.scan_iter(count=1000):
        out.append(name)
        kind = r.type(name)
        if kind == b"string":
            out.append(r.get(name) or b"")
        elif kind == b"hash":
            out.extend(r.hgetall(name).values())
    return b"\n".join(out)


def test_a_key_created_twice_with_one_idempotency_key_is_one_key(slow: Server) -> None:
    pid = slow.new_account(1_000)
    manager = slow.new_key(pid, role="admin")
    body = {"name": "deploy", "environment": "live", "daily_cap_credits": 10}
    url = f"{slow.base_url}/api-keys"
    first = httpx.post(url, json=body, headers=_h(manager, "mk-1"))
    again = httpx.post(url, json=body, headers=_h(manager, "mk-1"))
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.content == first.content  # the same key, its secret shown again
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    listed = httpx.get(url, headers=_h(manager)).json()["data"]
    assert [k["id"] for k in listed].count(first.json()["id"]) == 1
    assert len(listed) == 2  # the manager and the one created
    # the record keeps the answer sealed: the secret is in no Redis value
    assert first.json()["key"].encode() not in _redis_values(slow)
    other = httpx.post(url, json={**body, "name": "other"}, headers=_h(manager, "mk-1"))
    assert (other.status_code, other.json()["error"]["code"]) == (422, "idempotency_key_reused")


def test_a_failed_request_frees_its_key(slow: Server) -> None:
    pid = slow.new_account(1_000)
    manager = slow.new_key(pid, role="admin")
    url = f"{slow.base_url}/api-keys"
    good = {"name": "x", "environment": "live", "daily_cap_credits": None}
    bad = {**good, "expires_at": "2020-01-01T00:00:00Z"}
    refused = httpx.post(url, json=bad, headers=_h(manager, "mk-2"))
    assert refused.status_code == 400
    # nothing was recorded for the failure: the corrected request runs with the same key
    assert httpx.post(url, json=good, headers=_h(manager, "mk-2")).status_code == 201


def test_a_grant_sent_twice_with_one_key_grants_once(slow: Server) -> None:
    pid = slow.new_account(0)
    answers = [
        httpx.post(
            f"{slow.root_url}/admin/v1/accounts/{pid}/grants",
            json={"credits": 500},
            headers={"authorization": f"Bearer {slow.admin_token}", "idempotency-key": "g-1"},
        )
        for _ in range(3)
    ]
    assert {a.status_code for a in answers} == {200}
    assert answers[1].content == answers[2].content == answers[0].content
    assert slow.balance(pid) == 500
    other = slow.admin("POST", f"/accounts/{pid}/grants", {"credits": 500})
    assert other.status_code == 200  # without a key: a grant each time
    assert slow.balance(pid) == 1_000


def test_a_spotlight_sent_twice_with_one_key_rewards_once(slow: Server) -> None:
    pid = slow.new_account(0)
    headers = {"authorization": f"Bearer {slow.admin_token}", "idempotency-key": "s-1"}
    url = f"{slow.root_url}/admin/v1/accounts/{pid}/spotlights"
    first = httpx.post(url, json={"view_id": "v-1"}, headers=headers)
    again = httpx.post(url, json={"view_id": "v-1"}, headers=headers)
    assert (first.status_code, again.content) == (200, first.content)
    reused = httpx.post(url, json={"view_id": "v-2"}, headers=headers)
    assert reused.status_code == 422


NODE_SCRIPT = """
import OpenAI from "openai";
const { SVC_BASE_URL: baseURL, SVC_API_KEY: apiKey } = process.env;
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const once = async () => {
  const stream = await client.chat.completions.create(
    { model: "svc-fast", messages: [{ role: "user", content: "hi" }], max_tokens: 20,
      stream: true },
    { headers: { "Idempotency-Key": "node-1" } },
  );
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
};
const first = await once();
const again = await once();
const same = JSON.stringify(first) === JSON.stringify(again);
console.log(JSON.stringify({ same, svc: first.at(-1).svc }));
"""


def test_the_node_sdk_sends_the_key_as_its_docs_say(slow: Server) -> None:
    """docs/clients.md's Node example: the header in the request options."""
    pid = slow.new_account(100_000)
    done = subprocess.run(
        ["node", "--input-type=module", "-e", NODE_SCRIPT],
        cwd=NODE_DIR,
        env={**os.environ, "SVC_BASE_URL": slow.base_url, "SVC_API_KEY": slow.new_key(pid)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["same"] is True
    assert 100_000 - slow.balance(pid) == seen["svc"]["credits_used"]
