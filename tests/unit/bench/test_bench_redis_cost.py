"""Redis's own cost per completion from INFO commandstats and INFO cpu, and the floor's
launch (bench.floor)."""

from __future__ import annotations

import pytest

from bench.floor import (
    REDIS_ENV,
    RELAY_APP,
    STREAMS_ENV,
    UPSTREAM_ENV,
    WORKER_STREAMS,
    relay_command,
    relay_env,
)
from bench.measures import (
    RedisSnapshot,
    idle_per_completion,
    redis_cost,
    redis_snapshot,
    summed,
)

STATS = {
    "cmdstat_evalsha": {"calls": 200, "usec": 9000, "usec_per_call": 45.0},
    "cmdstat_hget": {"calls": 400, "usec": 800},  # ran inside the scripts: in their usec
    "cmdstat_fcall": {"calls": 10, "usec": 300},
    "cmdstat_info": {"calls": 3, "usec": 30},
    "errorstat_ERR": "not a command",
}
CPU = {
    "used_cpu_user": 1.5,
    "used_cpu_sys": 0.5,
    "used_cpu_user_main_thread": 1.0,
    "used_cpu_sys_main_thread": 0.25,
}


def test_a_snapshot_sums_the_script_and_function_calls_only() -> None:
    snap = redis_snapshot(STATS, CPU)
    assert snap == RedisSnapshot(210, 9300, 1.25, 2.0)


def test_a_server_without_main_thread_figures_counts_none() -> None:
    snap = redis_snapshot({}, {"used_cpu_user": 1.0, "used_cpu_sys": 1.0})
    assert (snap.main_thread_cpu_s, snap.process_cpu_s) == (0.0, 2.0)


def test_a_cluster_is_the_sum_of_its_primaries() -> None:
    one = RedisSnapshot(10, 500, 0.5, 0.75)
    assert summed([one, one, RedisSnapshot(1, 20, 0.25, 0.25)]) == RedisSnapshot(
        21, 1020, 1.25, 1.75
    )
    assert summed([]) == RedisSnapshot()


def test_the_cost_per_completion_is_the_growth_over_the_point() -> None:
    before = RedisSnapshot(100, 4000, 1.0, 2.0)
    after = RedisSnapshot(300, 13000, 1.01, 2.015)
    cost = redis_cost(before, after, 100)
    assert cost is not None
    assert cost.script_calls == 2.0
    assert cost.script_us == 90.0
    assert cost.main_thread_cpu_us == pytest.approx(100.0)
    assert cost.process_cpu_us == pytest.approx(150.0)
    assert redis_cost(before, after, 0) is None


def test_the_floor_is_served_as_svc_is_with_its_upstream_and_redis() -> None:
    command = relay_command(8123, 2)
    assert command[-1] == RELAY_APP
    joined = " ".join(command[1:])
    assert "-m granian --interface rsgi --workers 2 --loop uvloop --no-ws" in joined
    assert "--host 127.0.0.1 --port 8123" in joined
    env = relay_env("http://127.0.0.1:9/v1", "redis://127.0.0.1:6/0")
    assert (env[UPSTREAM_ENV], env[REDIS_ENV]) == ("http://127.0.0.1:9/v1", "redis://127.0.0.1:6/0")
    assert REDIS_ENV not in relay_env("http://127.0.0.1:9/v1", None)
    assert f"--backpressure {WORKER_STREAMS} --backlog {WORKER_STREAMS}" in joined
    assert env[STREAMS_ENV] == str(WORKER_STREAMS)


def test_a_scale_level_lets_each_floor_worker_hold_all_its_streams() -> None:
    # as svc's workers at a scale level: granian's backpressure, and connections upstream
    joined = " ".join(relay_command(8123, 2, 10_000))
    assert "--backpressure 10000 --backlog 10000" in joined
    assert relay_env("http://127.0.0.1:9/v1", None, 10_000)[STREAMS_ENV] == "10000"


def test_the_idle_rate_is_spread_over_the_point_per_completion() -> None:
    before, after = RedisSnapshot(main_thread_cpu_s=1.0), RedisSnapshot(main_thread_cpu_s=1.002)
    # 2 ms a second idle, over a 5 s point of 1,000 completions: 10 µs each
    assert idle_per_completion(before, after, 1.0, 5.0, 1000) == pytest.approx(10.0)
    assert idle_per_completion(after, before, 1.0, 5.0, 1000) == 0.0  # never below nothing
    assert idle_per_completion(before, after, 0.0, 5.0, 1000) is None
    assert idle_per_completion(before, after, 1.0, 5.0, 0) is None
