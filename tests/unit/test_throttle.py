"""Failed-auth throttling per address, and the client address behind trusted proxies."""

from __future__ import annotations

import pytest

from app.core.errors import ApiError, ErrorKind
from app.keys.throttle import UNIX_SOCKET, FailedAuthThrottle, client_address, parse_networks


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_address_is_refused_after_the_limit_until_the_window_ends() -> None:
    clock = Clock()
    throttle = FailedAuthThrottle(3, 60.0, clock=clock)
    for _ in range(3):
        throttle.check("203.0.113.7")  # three failures are allowed
        throttle.failed("203.0.113.7")
    clock.now += 10
    with pytest.raises(ApiError) as refused:
        throttle.check("203.0.113.7")
    assert refused.value.kind is ErrorKind.AUTH_RATE_LIMITED
    assert refused.value.status == 429
    assert refused.value.headers["retry-after"] == "50"
    throttle.check("203.0.113.8")  # other addresses are not affected
    clock.now += 50
    throttle.check("203.0.113.7")  # the window is over


def test_failures_spread_over_windows_never_block() -> None:
    clock = Clock()
    throttle = FailedAuthThrottle(2, 10.0, clock=clock)
    for _ in range(20):
        throttle.failed("198.51.100.1")
        clock.now += 10
        throttle.check("198.51.100.1")


def test_limit_zero_turns_throttling_off() -> None:
    throttle = FailedAuthThrottle(0, 60.0)
    for _ in range(1000):
        throttle.failed("192.0.2.1")
    throttle.check("192.0.2.1")


def test_memory_is_bounded_by_evicting_the_oldest_address() -> None:
    throttle = FailedAuthThrottle(1, 60.0, max_addresses=100)
    for n in range(1000):
        throttle.failed(f"10.0.{n // 256}.{n % 256}")
    assert len(throttle._windows) == 100


@pytest.mark.parametrize(
    ("kind", "counted"),
    [
        (ErrorKind.INVALID_API_KEY, True),
        (ErrorKind.ADMIN_UNAUTHORIZED, True),
        (ErrorKind.API_KEY_REVOKED, False),  # a real key: no guess
        (ErrorKind.AUTH_RATE_LIMITED, False),  # the cold path's budget, not the client's fault
        (ErrorKind.INVALID_VALUE, False),
    ],
)
def test_guarding_counts_failed_authentications_only(kind: ErrorKind, counted: bool) -> None:
    throttle = FailedAuthThrottle(1, 60.0, clock=Clock())
    with pytest.raises(ApiError), throttle.guarding("192.0.2.9"):
        raise ApiError(kind, "refused")
    if counted:
        with pytest.raises(ApiError) as refused, throttle.guarding("192.0.2.9"):
            pass
        assert refused.value.kind is ErrorKind.AUTH_RATE_LIMITED
    else:
        with throttle.guarding("192.0.2.9"):
            pass


PROXIES = "10.0.0.0/8, 127.0.0.1"


@pytest.mark.parametrize(
    ("proxies", "peer", "forwarded", "expected"),
    [
        # no trusted proxies configured: the header is ignored
        ("", "198.51.100.9", ["203.0.113.7"], "198.51.100.9"),
        # an untrusted peer cannot choose its address with the header
        (PROXIES, "198.51.100.9", ["1.2.3.4"], "198.51.100.9"),
        # behind a trusted proxy: the hop it saw
        (PROXIES, "10.1.2.3", ["203.0.113.7"], "203.0.113.7"),
        # forged hops to the left of the real one are ignored; trusted hops are skipped
        (PROXIES, "10.1.2.3", ["6.6.6.6, 203.0.113.7, 10.9.9.9"], "203.0.113.7"),
        (PROXIES, "127.0.0.1", ["6.6.6.6", "203.0.113.8"], "203.0.113.8"),
        # all hops trusted: the first one
        (PROXIES, "10.1.2.3", ["10.0.0.5, 10.0.0.6"], "10.0.0.5"),
        # a trusted proxy that sent no header
        (PROXIES, "10.1.2.3", [], "10.1.2.3"),
        (PROXIES, None, ["203.0.113.7"], UNIX_SOCKET),
    ],
)
def test_client_address(
    proxies: str, peer: str | None, forwarded: list[str], expected: str
) -> None:
    assert client_address(peer, forwarded, parse_networks(proxies)) == expected


def test_bad_proxy_networks_are_refused() -> None:
    with pytest.raises(ValueError):
        parse_networks("10.0.0.0/8, not-an-address")
