"""What ``SVC_REDIS_MIN_REPLICAS=1`` costs in the bench (issue 48): the order of the points,
svc's replica waits read from its ``/metrics``, the WAITs counted from ``INFO commandstats``,
the same-run ratios and the report's section; the profile's concurrencies and the flag; and
the primary with its replica the points run on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import redis

from app.core.metrics import Metrics, exposition
from bench.measures import RedisSnapshot, redis_cost, redis_snapshot, summed
from bench.profiles import PROFILES, build_parser, run_plan
from bench.replicas import (
    ReplicaFigures,
    costs,
    grown,
    markdown,
    order,
    replica_waits,
    target,
)
from bench.valkey_replica import ValkeyReplicated


def test_the_settings_alternate_between_concurrencies() -> None:
    # A/B/B/A: 0 first at C=1, 1 first at C=50, so drift over the run favours neither
    assert order((1, 50)) == [(0, 1), (1, 1), (1, 50), (0, 50)]
    assert order((4,)) == [(0, 4), (1, 4)]
    assert order((1, 10, 50)) == [(0, 1), (1, 1), (1, 10), (0, 10), (0, 50), (1, 50)]
    assert order(()) == []
    assert (target(0), target(1)) == ("svc-min-replicas-0", "svc-min-replicas-1")


async def _no_redis() -> None:
    return None


async def test_replica_waits_are_read_from_svcs_own_metrics_text() -> None:
    metrics = Metrics()
    metrics.labelled(metrics.replica_waits, "acked").inc(41)
    metrics.labelled(metrics.replica_waits, "short").inc(2)
    metrics.labelled(metrics.replica_waits, "acked").inc()
    text = (await exposition(metrics, _no_redis)).decode()
    assert replica_waits(text) == {"acked": 42, "short": 2}
    # a server that never waited reports both results at 0
    assert replica_waits((await exposition(Metrics(), _no_redis)).decode()) == {
        "acked": 0,
        "short": 0,
    }


def test_replica_waits_ignore_other_series_and_sum_a_result_seen_twice() -> None:
    text = "\n".join(
        [
            "# HELP svc_redis_replica_waits_total WAITs",
            "# TYPE svc_redis_replica_waits_total counter",
            'svc_redis_replica_waits_total{result="acked"} 10.0',
            'svc_redis_replica_waits_total{result="acked"} 5.0',
            'svc_redis_replica_waits_created{result="acked"} 1.7e9',
            'svc_requests_total{result="short"} 99.0',
        ]
    )
    assert replica_waits(text) == {"acked": 15}
    assert replica_waits("") == {}


def test_the_waits_of_a_point_are_what_grew_over_it() -> None:
    assert grown({"acked": 3, "short": 1}, {"acked": 103, "short": 1}) == {
        "acked": 100,
        "short": 0,
    }
    assert grown({}, {"short": 2}) == {"short": 2}


def test_wait_calls_are_counted_apart_from_the_scripts() -> None:
    stats = {
        "cmdstat_evalsha": {"calls": 200, "usec": 9000},
        "cmdstat_wait": {"calls": 60, "usec": 120},
        "cmdstat_hget": {"calls": 400, "usec": 800},
    }
    before = redis_snapshot({"cmdstat_evalsha": {"calls": 0, "usec": 0}}, {})
    after = redis_snapshot(stats, {})
    assert (after.script_calls, after.script_usec, after.wait_calls) == (200, 9000, 60)
    cost = redis_cost(before, after, 100)
    assert cost is not None
    assert (cost.script_calls, cost.wait_calls, cost.script_us) == (2.0, 0.6, 90.0)
    # a server without replica waits sent none
    assert redis_snapshot({}, {}).wait_calls == 0
    assert summed([after, after]).wait_calls == 120
    assert summed([RedisSnapshot()]).wait_calls == 0


BASE = ReplicaFigures(
    min_replicas=0,
    concurrency=1,
    requests=1000,
    rps=800.0,
    ttfb_p50_ms=10.0,
    latency_p50_ms=12.0,
    cpu_ms_per_request=0.5,
    script_calls=2.0,
    wait_calls=0.0,
    main_thread_cpu_us=100.0,
    waits_acked=0,
    waits_short=0,
    errors=0,
)


def _figures(min_replicas: int, c: int, rps: float, **changed: Any) -> ReplicaFigures:
    return msgspec.structs.replace(
        BASE, min_replicas=min_replicas, concurrency=c, rps=rps, **changed
    )


def test_the_cost_is_the_setting_with_a_wait_over_the_one_without_at_each_concurrency() -> None:
    measured = [
        _figures(0, 1, 800.0),
        _figures(
            1,
            1,
            720.0,
            cpu_ms_per_request=0.55,
            latency_p50_ms=13.5,
            main_thread_cpu_us=120.0,
            wait_calls=1.0,
            waits_acked=998,
            waits_short=2,
        ),
        _figures(1, 50, 2000.0, wait_calls=0.4, waits_acked=1000, ttfb_p50_ms=12.5),
        _figures(0, 50, 2500.0),
    ]
    low, high = costs(measured)
    assert low.concurrency == 1
    assert (low.rps_ratio, low.cpu_per_request_ratio, low.ttfb_p50_ratio) == (0.9, 1.1, 1.0)
    assert (low.latency_p50_ratio, low.main_thread_ratio) == (1.125, 1.2)
    assert (low.wait_calls, low.waits_per_completion, low.waits_short) == (1.0, 1.0, 2)
    # C=50 measured 1 first: still 1's figure over 0's
    assert high.concurrency == 50
    assert (high.rps_ratio, high.ttfb_p50_ratio, high.wait_calls) == (0.8, 1.25, 0.4)


def test_a_concurrency_without_both_settings_or_a_baseline_has_no_ratio() -> None:
    assert costs([_figures(0, 1, 800.0)]) == []
    assert costs([]) == []
    (cost,) = costs([_figures(0, 1, 0.0, cpu_ms_per_request=None), _figures(1, 1, 10.0)])
    assert (cost.rps_ratio, cost.cpu_per_request_ratio) == (None, None)
    assert cost.ttfb_p50_ratio == 1.0


def test_the_report_section_lists_the_points_in_order_then_the_cost() -> None:
    measured = [
        _figures(0, 1, 800.0),
        _figures(
            1, 1, 720.0, cpu_ms_per_request=0.55, wait_calls=1.0, waits_acked=998, waits_short=2
        ),
    ]
    lines = markdown(measured, costs(measured))
    rows = [line for line in lines if line.startswith("| 0 |") or line.startswith("| 1 |")]
    assert rows == [
        "| 0 | 1 | 800 | 10.00 | 12.00 | 0.500 | 2 | 0 | 100.0 | 0 / 0 | 0 |",
        "| 1 | 1 | 720 | 10.00 | 12.00 | 0.550 | 2 | 1 | 100.0 | 998 / 2 | 0 |",
    ]
    (derived,) = [line for line in lines if line.startswith("The cost of")]
    assert "at C=1" in derived
    assert "req/s 0.900 x, server CPU per request 1.100 x, TTFB p50 1.000 x" in derived
    assert derived.endswith(
        "WAITs sent per completion 1, scripts waited for per completion 1, short waits 2."
    )
    assert markdown([], []) == []
    # a ratio without its baseline is said so, not printed empty
    (cost,) = costs([_figures(0, 1, 0.0), _figures(1, 1, 10.0)])
    assert "req/s not measured" in markdown([_figures(0, 1, 0.0)], [cost])[-1]


def test_the_default_profile_measures_c1_and_c50_and_the_flag_changes_or_drops_them() -> None:
    assert PROFILES["default"].replica_concurrency == (1, 50)
    assert PROFILES["smoke"].replica_concurrency == (4,)

    def planned(*argv: str) -> tuple[int, ...]:
        return run_plan(build_parser().parse_args(["run", *argv]))[0].replica_concurrency

    assert planned() == (1, 50)
    assert planned("--replica-concurrency", "10,200") == (10, 200)
    assert planned("--replica-concurrency", "0") == ()
    assert planned("--profile", "smoke", "--replica-concurrency", "0") == ()


def test_the_replica_is_linked_and_acknowledges_the_primarys_writes(tmp_path: Path) -> None:
    pair = ValkeyReplicated(tmp_path / "pair")
    pair.start()
    try:
        with redis.Redis.from_url(pair.url) as primary:
            primary.set("k", "v")
            assert primary.execute_command("WAIT", 1, 5000) == 1
            assert primary.info("replication")["role"] == "master"
            assert primary.config_get("repl-diskless-sync-delay") == {
                "repl-diskless-sync-delay": "0"
            }
        with redis.Redis(host="127.0.0.1", port=pair.replica.port) as replica:
            assert replica.info("replication")["master_link_status"] == "up"
            assert replica.get("k") == b"v"
    finally:
        pair.stop()
    assert not pair.primary.is_running()
    assert not pair.replica.is_running()
