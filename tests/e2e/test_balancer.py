"""The balancer of deploy/, run for real: Debian's nginx (tests/ensure-nginx.sh installs it)
with deploy/nginx/svc.conf as it is, only its ``listen`` line moved to a free port of
127.0.0.1 and deploy/nginx/svc-upstreams.conf's two instances named by their test
addresses, in front of two ``svc serve`` instances on one Valkey and one SQLite file, as
deploy/compose.yaml runs them (the same secrets, the metrics token, SVC_TRUSTED_PROXIES
naming the balancer's address).

Through nginx: each chunk of a stream arrives when svc sends it, not at the stream's end;
a client that hangs up mid-stream reaches svc, which settles the request as
``client_disconnect``; the failed-auth limit counts the client's address, not nginx's; and
both instances serve."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import (
    ROOT,
    Samples,
    Server,
    instances,
    metric_samples,
    production_valkey,
)
from tests.support.processes import free_port, stop_process

pytestmark = pytest.mark.e2e

DEPLOY_NGINX = ROOT / "deploy" / "nginx"
METRICS_TOKEN = "balancer-metrics-token-0123456789"
FAILED_AUTH_LIMIT = 5
TOKEN_DELAY_MS = 100  # the simulated upstream's pause before each token
REPLY_TOKENS = 20  # so a stream lasts about 2 s
CHAT = {"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def nginx_binary() -> str:
    """nginx (Debian puts it in /usr/sbin). Missing, the test is skipped when run by hand,
    and fails on CI (``make test`` installs it there: tests/ensure-nginx.sh)."""
    found = os.environ.get("SVC_TEST_NGINX") or shutil.which(
        "nginx", path=f"{os.environ.get('PATH', '')}:/usr/sbin"
    )
    if found is None:
        missing = "no nginx (make test installs it: tests/ensure-nginx.sh)"
        if os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(missing)
    return found


class Nginx:
    """One nginx in the foreground with deploy/nginx's files, in a folder of its own (its
    configuration, pid, logs and temporary files); the access log is its stdout, as in the
    container."""

    def __init__(self, folder: Path, upstreams: list[str]) -> None:
        self.folder = folder
        self.port = free_port()
        self.access_log = folder / "access.log"
        self.error_log = folder / "error.log"
        site, moved = re.subn(
            r"^(\s*)listen 80;$",
            rf"\1listen 127.0.0.1:{self.port};",
            (DEPLOY_NGINX / "svc.conf").read_text(),
            flags=re.MULTILINE,
        )
        assert moved == 1, "deploy/nginx/svc.conf should have one `listen 80;` line"
        (folder / "svc.conf").write_text(site)
        servers = (DEPLOY_NGINX / "svc-upstreams.conf").read_text()
        for n, address in enumerate(upstreams, 1):
            assert f"server svc-{n}:8000 " in servers
            servers = servers.replace(f"server svc-{n}:8000 ", f"server {address} ")
        (folder / "svc-upstreams.conf").write_text(servers)
        temp = "\n".join(
            f"    {kind}_temp_path {folder / kind};"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        # as root, the workers would run as nobody, who cannot enter pytest's 0700 folders
        user = "user root;\n" if os.geteuid() == 0 else ""
        (folder / "nginx.conf").write_text(
            f"{user}worker_processes 1;\npid {folder / 'nginx.pid'};\n"
            f"error_log {self.error_log} notice;\n"
            "events { worker_connections 512; }\n"
            f"http {{\n{temp}\n    include svc.conf;\n}}\n"
        )
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Nginx:
        config = self.folder / "nginx.conf"
        self._process = subprocess.Popen(
            [nginx_binary(), "-p", str(self.folder), "-c", str(config),
             "-e", str(self.error_log), "-g", "daemon off;"],
            stdout=self.access_log.open("wb"),
            stderr=(self.folder / "nginx.stderr").open("wb"),
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                break
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.02)
        self.stop()
        logs = [(self.folder / name).read_text() for name in ("nginx.stderr", "error.log")]
        raise RuntimeError("nginx did not start:\n" + "\n".join(logs))

    def stop(self) -> None:
        if self._process is not None:
            stop_process(self._process)
            self._process = None


@dataclass
class Kit:
    balancer: Nginx
    instances: list[Server]

    def metrics(self) -> list[Samples]:
        """Each instance's /metrics, scraped as Prometheus does (the bearer token)."""
        scraped = []
        for srv in self.instances:
            response = httpx.get(f"{srv.root_url}/metrics", headers=_bearer(METRICS_TOKEN))
            assert response.status_code == 200, response.text
            scraped.append(metric_samples(response.text))
        return scraped

    def account_key(self) -> str:
        srv = self.instances[0]
        return srv.new_key(srv.new_account(1_000_000))


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kit]:
    tmp = tmp_path_factory.mktemp("balancer")
    valkey = production_valkey()
    shared = {  # what compose.yaml gives every instance
        "SVC_REDIS_URL": valkey.connection_url,
        "SVC_DATABASE_URL": f"sqlite:///{tmp / 'svc.db'}",  # one file, two processes (WAL)
        "SVC_KEY_PEPPER": "balancer-pepper-0123456789abcdef",
        "SVC_ADMIN_TOKEN": "balancer-admin-token-0123456789abcdef",
        "SVC_METRICS_TOKEN": METRICS_TOKEN,
        "SVC_TRUSTED_PROXIES": "127.0.0.1",  # the balancer's address
        "SVC_DEV_BOOTSTRAP": "false",
        "SVC_FAILED_AUTH_LIMIT": str(FAILED_AUTH_LIMIT),
        "SVC_FAILED_AUTH_WINDOW_S": "600",
        "SVC_SIM_DELAY_MS": str(TOKEN_DELAY_MS),
        "SVC_SIM_REPLY_TOKENS": str(REPLY_TOKENS),
    }
    balancer: Nginx | None = None
    try:
        with instances(tmp, shared, workers=1) as servers:
            nginx_folder = tmp / "nginx"
            nginx_folder.mkdir()
            addresses = [srv.root_url.removeprefix("http://") for srv in servers]
            balancer = Nginx(nginx_folder, addresses).start()
            yield Kit(balancer, servers)
    finally:
        if balancer is not None:
            balancer.stop()
        valkey.stop()


def _bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def _content_times(root_url: str, key: str) -> tuple[list[float], float]:
    """One stream: when each chunk with content arrived, and when the stream ended, in
    seconds from the request's start."""
    start = time.perf_counter()
    arrivals: list[float] = []
    with httpx.Client(timeout=30) as client, client.stream(
        "POST", f"{root_url}/v1/chat/completions", json=CHAT, headers=_bearer(key)
    ) as response:  # fmt: skip
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if _has_content(line):
                arrivals.append(time.perf_counter() - start)
    return arrivals, time.perf_counter() - start


def _has_content(line: str) -> bool:
    """Whether an SSE line is a chunk carrying text."""
    if not line.startswith("data: {"):
        return False
    choices = json.loads(line[6:]).get("choices") or [{}]
    return bool(choices[0].get("delta", {}).get("content"))


def test_each_chunk_comes_through_the_balancer_when_svc_sends_it(kit: Kit) -> None:
    key = kit.account_key()
    for _ in kit.instances:  # each instance knows the key; nginx holds a connection to it
        warm = {**CHAT, "max_tokens": 1}
        url = f"{kit.balancer.url}/v1/chat/completions"
        assert httpx.post(url, json=warm, headers=_bearer(key)).status_code == 200
    direct, direct_end = _content_times(kit.instances[0].root_url, key)
    proxied, proxied_end = _content_times(kit.balancer.url, key)
    print(
        f"first chunk: direct {direct[0] * 1000:.0f} ms, through nginx "
        f"{proxied[0] * 1000:.0f} ms; stream ended at {direct_end * 1000:.0f} / "
        f"{proxied_end * 1000:.0f} ms"
    )
    assert len(proxied) == len(direct) == REPLY_TOKENS
    span = (REPLY_TOKENS - 1) * TOKEN_DELAY_MS / 1000  # from the first token to the last
    # the first token is not held back: as early as direct, long before the stream ends
    assert proxied[0] < direct[0] + 0.25, (proxied, direct)
    assert proxied[0] < proxied_end - 0.8 * span
    # and every later chunk arrives on its own, about one token delay after the one before
    gaps = [later - earlier for earlier, later in itertools.pairwise(proxied)]
    assert sum(gap > TOKEN_DELAY_MS / 2000 for gap in gaps) >= 0.8 * len(gaps), gaps


def test_a_client_hanging_up_mid_stream_reaches_svc_through_the_balancer(kit: Kit) -> None:
    key = kit.account_key()
    before = kit.metrics()
    with httpx.Client(timeout=30) as client, client.stream(
        "POST", f"{kit.balancer.url}/v1/chat/completions", json=CHAT, headers=_bearer(key)
    ) as response:  # fmt: skip
        assert response.status_code == 200
        lines = response.iter_lines()
        while not _has_content(next(lines)):
            pass
    # the connection is closed here, after the first token and long before the last
    deadline = time.monotonic() + 15
    rows: list[dict[str, object]] = []
    while time.monotonic() < deadline and not rows:
        rows = httpx.get(f"{kit.balancer.url}/v1/activity", headers=_bearer(key)).json()["data"]
        time.sleep(0.2)
    assert [row["outcome"] for row in rows] == ["client_disconnect"]
    assert 0 < int(rows[0]["completion_tokens"]) < REPLY_TOKENS  # type: ignore[call-overload]
    name = "svc_settlements_total"
    label = (("outcome", "client_disconnect"),)
    settled = [
        after.get((name, label), 0) - earlier.get((name, label), 0)
        for earlier, after in zip(before, kit.metrics(), strict=True)
    ]
    assert sorted(settled) == [0, 1]  # on the one instance that served it


def _bad_key(kit: Kit, source: str, forwarded_for: str | None = None) -> httpx.Response:
    """A wrong key sent to the balancer from the address ``source`` (any 127.x address
    reaches 127.0.0.1), with an X-Forwarded-For of its own if given."""
    headers = _bearer("svc_live_wrong")
    if forwarded_for is not None:
        headers["x-forwarded-for"] = forwarded_for
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(transport=transport, timeout=30) as client:
        return client.get(f"{kit.balancer.url}/v1/models", headers=headers)


def _throttled(response: httpx.Response) -> bool:
    if response.status_code == 401:
        return False
    assert response.status_code == 429, response.text
    assert response.json()["error"]["code"] == "auth_rate_limited"
    return True


def test_the_failed_auth_limit_counts_each_client_behind_the_balancer(kit: Kit) -> None:
    # nginx appends the client's address; svc trusts nginx (127.0.0.1) and counts that
    # address, on both instances together (requests alternate between them)
    assert not any(_throttled(_bad_key(kit, "127.0.0.5")) for _ in range(FAILED_AUTH_LIMIT))
    assert _throttled(_bad_key(kit, "127.0.0.5"))
    assert not _throttled(_bad_key(kit, "127.0.0.6"))  # another client: not nginx's count
    # a header the client wrote itself names nobody else: nginx's hop is the rightmost
    assert _throttled(_bad_key(kit, "127.0.0.5", forwarded_for="198.51.100.9"))
    # behind a proxy svc also trusts (here: a client on 127.0.0.1), the address that proxy
    # forwarded is the client, kept by nginx left of its own hop
    for _ in range(FAILED_AUTH_LIMIT):
        assert not _throttled(_bad_key(kit, "127.0.0.1", forwarded_for="203.0.113.7"))
    assert _throttled(_bad_key(kit, "127.0.0.1", forwarded_for="203.0.113.7"))
    assert not _throttled(_bad_key(kit, "127.0.0.1", forwarded_for="203.0.113.8"))


def test_both_instances_serve_and_metrics_are_scraped_from_each(kit: Kit) -> None:
    key = kit.account_key()
    route = (("model", "svc-fast"), ("route", "/v1/chat/completions"), ("status", "200"))
    before = kit.metrics()
    body = {**CHAT, "max_tokens": 1}
    for _ in range(6):
        response = httpx.post(
            f"{kit.balancer.url}/v1/chat/completions", json=body, headers=_bearer(key)
        )
        assert response.status_code == 200, response.text
    served = [
        after[("svc_requests_total", route)] - earlier.get(("svc_requests_total", route), 0)
        for earlier, after in zip(before, kit.metrics(), strict=True)
    ]
    assert sum(served) == 6
    assert min(served) >= 2, served  # round robin: each instance its share
    upstreams = set(re.findall(r"upstream=(\S+)", kit.balancer.access_log.read_text()))
    assert {srv.root_url.removeprefix("http://") for srv in kit.instances} <= upstreams
    # the balancer does not serve /metrics (Prometheus scrapes each instance), and an
    # instance wants the metrics token
    assert httpx.get(f"{kit.balancer.url}/metrics", headers=_bearer(METRICS_TOKEN)).is_error
    assert httpx.get(f"{kit.instances[0].root_url}/metrics").status_code == 401
