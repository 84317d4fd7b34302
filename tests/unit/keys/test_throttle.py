"""Failed-auth throttling per address, and the client address behind trusted proxies."""

from __future__ import annotations

import asyncio

import pytest
import redis.exceptions

from app.core.errors import ApiError, ErrorKind
from app.credits.throttle_counts import WindowCount
from app.keys.throttle import UNIX_SOCKET, FailedAuthThrottle, client_address, parse_networks
from tests.conftest import Clock
from tests.support.ledgers import Ledgers


def _throttle(ledger: Ledgers, limit: int, window_s: float, clock: Clock) -> FailedAuthThrottle:
    """One worker's throttle; several made on one ledger are several workers (or instances)."""
    return FailedAuthThrottle(limit, window_s, ledger.throttle.count_failed_auth, clock=clock)


async def _fail(
    throttle: FailedAuthThrottle, address: str, kind: ErrorKind = ErrorKind.INVALID_API_KEY
) -> ErrorKind:
    """One wrong key (or admin token: ``kind``) from ``address``: what the client is
    answered."""
    with pytest.raises(ApiError) as answered:
        async with throttle.guarding(address):
            raise ApiError(kind, "wrong key")
    return answered.value.kind


async def _passes(throttle: FailedAuthThrottle, address: str) -> bool:
    try:
        async with throttle.guarding(address):
            return True
    except ApiError as refused:
        if refused.kind is not ErrorKind.AUTH_RATE_LIMITED:
            raise
        return False


async def test_the_limit_holds_exactly_across_workers(ledger: Ledgers, clock: Clock) -> None:
    workers = [_throttle(ledger, 3, 60.0, clock) for _ in range(4)]
    answers = [await _fail(workers[n % 4], "203.0.113.7") for n in range(8)]
    # three 401s in all, however the failures were spread; then 429 on every worker
    assert answers == [ErrorKind.INVALID_API_KEY] * 3 + [ErrorKind.AUTH_RATE_LIMITED] * 5
    # a worker that saw the address over its limit answers its wrong keys 429 at once, for
    # the window's rest, without counting them in Redis again
    counter = ledger.layout.failed_auths("203.0.113.7")
    counted = await ledger.redis.get(counter)
    assert await _fail(workers[3], "203.0.113.7") is ErrorKind.AUTH_RATE_LIMITED
    assert await ledger.redis.get(counter) == counted
    # issue 30, item 7: a valid key from that address is never refused for the failures
    assert await _passes(workers[3], "203.0.113.7")
    with pytest.raises(ApiError) as refused:
        workers[3].check("203.0.113.7")
    assert refused.value.status == 429
    assert 55 <= int(refused.value.headers["retry-after"]) <= 60
    assert refused.value.headers["x-should-retry"] == "false"
    assert await _passes(workers[0], "203.0.113.8")  # other addresses are not affected
    clock.advance(61)
    workers[3].check("203.0.113.7")  # this worker's window is over


async def test_the_window_ends_in_redis_too(ledger: Ledgers, clock: Clock) -> None:
    workers = [_throttle(ledger, 2, 0.3, clock) for _ in range(2)]
    for throttle in workers:
        assert await _fail(throttle, "198.51.100.1") is ErrorKind.INVALID_API_KEY
    assert await _fail(workers[0], "198.51.100.1") is ErrorKind.AUTH_RATE_LIMITED
    await asyncio.sleep(0.35)  # the counter expires with its window
    clock.advance(1)
    assert await _fail(workers[1], "198.51.100.1") is ErrorKind.INVALID_API_KEY


async def test_limit_zero_turns_throttling_off(ledger: Ledgers, clock: Clock) -> None:
    throttle = _throttle(ledger, 0, 60.0, clock)
    for _ in range(50):
        assert await _fail(throttle, "192.0.2.1") is ErrorKind.INVALID_API_KEY
    assert not await ledger.redis.keys("*authfail*")  # nothing counted, no Redis call


async def test_redis_down_leaves_the_401_and_counts_nothing(clock: Clock) -> None:
    async def unreachable(_address: str, _window_s: float) -> WindowCount:
        raise redis.exceptions.ConnectionError("Connection refused")

    throttle = FailedAuthThrottle(1, 60.0, unreachable, clock=clock)
    for _ in range(3):
        assert await _fail(throttle, "192.0.2.5") is ErrorKind.INVALID_API_KEY


async def test_memory_is_bounded_by_evicting_the_oldest_address(
    ledger: Ledgers, clock: Clock
) -> None:
    throttle = FailedAuthThrottle(
        1, 60.0, ledger.throttle.count_failed_auth, max_addresses=10, clock=clock
    )
    for n in range(30):
        await _fail(throttle, f"10.0.0.{n}")
    assert len(throttle._blocked) == 10


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
async def test_guarding_counts_failed_authentications_only(
    ledger: Ledgers, clock: Clock, kind: ErrorKind, counted: bool
) -> None:
    throttle = _throttle(ledger, 1, 60.0, clock)
    with pytest.raises(ApiError):
        async with throttle.guarding("192.0.2.9"):
            raise ApiError(kind, "refused")
    # the limit (1) was reached by a counted failure: the next wrong key is answered 429
    assert (await _fail(throttle, "192.0.2.9") is ErrorKind.AUTH_RATE_LIMITED) is counted
    assert await _passes(throttle, "192.0.2.9")  # and valid credentials always pass


async def test_an_address_over_its_limit_is_refused_the_admin_token_too(
    ledger: Ledgers, clock: Clock
) -> None:
    """Issue 44, item 9: wrong admin tokens are never followed by a served right one from
    the same address, whichever worker (or instance) saw the failures."""
    counts = ledger.throttle
    workers = [
        FailedAuthThrottle(
            3, 60.0, counts.count_failed_admin, read=counts.failed_admin, clock=clock
        )
        for _ in range(2)
    ]
    keys = _throttle(ledger, 3, 60.0, clock)  # the API keys' throttle, on its own counter
    guesser, operator = "203.0.113.9", "203.0.113.10"
    await workers[1].refuse_over_limit(guesser)  # no failure yet: served
    assert await counts.failed_admin(guesser) == WindowCount(0, 0.0)
    for _ in range(3):
        wrong = await _fail(workers[0], guesser, ErrorKind.ADMIN_UNAUTHORIZED)
        assert wrong is ErrorKind.ADMIN_UNAUTHORIZED
    counter = ledger.layout.failed_admin_tokens(guesser)
    counted = await ledger.redis.get(counter)
    # worker 1 saw none of the failures: it reads them in Redis, and counts nothing
    for worker in workers:
        with pytest.raises(ApiError) as refused:
            await worker.refuse_over_limit(guesser)
        assert refused.value.kind is ErrorKind.AUTH_RATE_LIMITED
        assert 55 <= int(refused.value.headers["retry-after"]) <= 60
    assert await ledger.redis.get(counter) == counted
    await workers[1].refuse_over_limit(operator)  # other addresses are not affected
    assert await _passes(keys, guesser)  # API keys keep issue 30's rule (NAT neighbours)


async def test_wrong_api_keys_never_refuse_the_admin_token(ledger: Ledgers, clock: Clock) -> None:
    """Issue 44 review: the right admin token is refused for wrong admin tokens alone; an
    address's wrong API keys (a crowd behind one balancer) count on their own counter."""
    counts = ledger.throttle
    keys = _throttle(ledger, 3, 60.0, clock)
    admin = FailedAuthThrottle(
        3, 60.0, counts.count_failed_admin, read=counts.failed_admin, clock=clock
    )
    crowd = "203.0.113.11"
    for _ in range(10):
        await _fail(keys, crowd)
    assert await _fail(keys, crowd) is ErrorKind.AUTH_RATE_LIMITED
    await admin.refuse_over_limit(crowd)  # served: no wrong admin token yet
    assert await counts.failed_admin(crowd) == WindowCount(0, 0.0)


async def test_the_admin_token_is_throttled_only_when_throttling_is_on(
    ledger: Ledgers, clock: Clock
) -> None:
    counts = ledger.throttle
    off = FailedAuthThrottle(0, 60.0, counts.count_failed_admin, read=counts.failed_admin)
    for _ in range(5):
        wrong = await _fail(off, "192.0.2.20", ErrorKind.ADMIN_UNAUTHORIZED)
        assert wrong is ErrorKind.ADMIN_UNAUTHORIZED
    await off.refuse_over_limit("192.0.2.20")

    async def unreachable(_address: str) -> WindowCount:
        raise redis.exceptions.ConnectionError("Connection refused")

    down = FailedAuthThrottle(1, 60.0, counts.count_failed_admin, read=unreachable, clock=clock)
    await down.refuse_over_limit("192.0.2.21")  # Redis down: the token's own check decides


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
