"""AdMob's SSV callbacks: the parser keeps the signed bytes as sent, only the right key
verifies them, and the verifier keys are fetched rarely (memory, Redis, one refetch at a
time and per interval) and never on a forged key id's say-so more than that."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from urllib.parse import quote

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from app.core.errors import AdMobRejected, ConfigError, KeysUnavailable
from app.kv.client import RedisClient
from app.kv.layout import KeySpace
from app.spotlights.admob import (
    MAX_QUERY_BYTES,
    AdMobCallback,
    ad_units,
    parse_callback,
    timestamp_acceptable,
    verify,
)
from app.spotlights.admob_keys import VerifierKeys, check_keys_url, parse_keys

KEY_ID = 3335741209
OTHER_ID = 1234567890
PARAMS = [
    ("ad_network", "5450213213286189855"),
    ("ad_unit", "1234567890"),
    ("custom_data", "spi_Zm9v+YmFy/=="),
    ("reward_amount", "1"),
    ("reward_item", "Reward"),
    ("timestamp", "1780000000123"),
    ("transaction_id", "123456789"),
    ("user_id", "user 1"),
]


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def signed_query(
    key: ec.EllipticCurvePrivateKey, key_id: int = KEY_ID, params: list[tuple[str, str]] = PARAMS
) -> bytes:
    """A callback as Google sends it: the parameters, then the signature of those bytes and
    the key id."""
    message = "&".join(f"{name}={quote(value, safe='')}" for name, value in params).encode()
    der = key.sign(message, ec.ECDSA(hashes.SHA256()))
    signature = base64.urlsafe_b64encode(der).rstrip(b"=")
    return message + b"&signature=" + signature + b"&key_id=" + str(key_id).encode()


def keys_json(*entries: tuple[int, ec.EllipticCurvePrivateKey]) -> bytes:
    """Google's verifier-keys file for these keys."""
    keys = []
    for key_id, private in entries:
        public = private.public_key()
        der = public.public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        pem = public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        keys.append(
            {"keyId": key_id, "pem": pem.decode(), "base64": base64.b64encode(der).decode()}
        )
    return json.dumps({"keys": keys}).encode()


class KeyServer:
    """Google's key URL on 127.0.0.1: serves ``body`` (or ``status``) and counts requests."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.status = 200
        self.requests = 0
        self.delay_s = 0.0
        self._server: asyncio.Server | None = None
        self.url = ""

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/verifier-keys.json"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            self.requests += 1
            await asyncio.sleep(self.delay_s)
            head = (
                f"HTTP/1.1 {self.status} X\r\ncontent-type: application/json\r\n"
                f"content-length: {len(self.body)}\r\nconnection: close\r\n\r\n"
            )
            writer.write(head.encode() + self.body)
            await writer.drain()
        finally:
            writer.close()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def signing_key() -> ec.EllipticCurvePrivateKey:
    return new_key()


@pytest.fixture
async def key_server(
    signing_key: ec.EllipticCurvePrivateKey, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[KeyServer]:
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)  # the loopback server is reached directly
    server = KeyServer(keys_json((KEY_ID, signing_key)))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def make_keys(
    redis: RedisClient, keyspace: KeySpace
) -> AsyncIterator[Callable[..., VerifierKeys]]:
    """``VerifierKeys`` on the test's Redis (each one a worker), closed after the test."""
    made: list[VerifierKeys] = []

    def make(
        url: str, clock: Callable[[], float] = time.monotonic, refetch_interval_s: float = 60.0
    ) -> VerifierKeys:
        keys = VerifierKeys(
            url, redis, keyspace, timeout_s=2.0, clock=clock, refetch_interval_s=refetch_interval_s
        )
        made.append(keys)
        return keys

    yield make
    for keys in made:
        await keys.close()


# --- Reading and verifying a callback -----------------------------------------------------


def test_a_valid_callback_parses_and_verifies(signing_key: ec.EllipticCurvePrivateKey) -> None:
    query = signed_query(signing_key)
    callback = parse_callback(query)
    assert callback.message == query[: query.index(b"&signature=")]
    assert callback.key_id == KEY_ID
    assert callback.timestamp_ms == 1780000000123
    assert callback.custom_data == "spi_Zm9v+YmFy/=="  # percent-decoded for use
    assert callback.user_id == "user 1"
    assert callback.ad_unit == "1234567890"
    assert verify(callback, signing_key.public_key())


def test_padding_and_a_missing_user_id_are_tolerated(
    signing_key: ec.EllipticCurvePrivateKey,
) -> None:
    params = [p for p in PARAMS if p[0] != "user_id"]
    query = signed_query(signing_key, params=params)
    message, _, tail = query.partition(b"&signature=")
    signature, _, key_id = tail.partition(b"&key_id=")
    padded = signature + b"=" * (-len(signature) % 4)
    for sent in (padded, padded.replace(b"=", b"%3D")):
        callback = parse_callback(message + b"&signature=" + sent + b"&key_id=" + key_id)
        assert callback.user_id == ""
        assert verify(callback, signing_key.public_key())


@pytest.mark.parametrize("name", [name for name, _ in PARAMS])
def test_every_parameter_tampered_fails(name: str, signing_key: ec.EllipticCurvePrivateKey) -> None:
    query = signed_query(signing_key)
    value = dict(PARAMS)[name]
    before = f"{name}={quote(value, safe='')}".encode()
    changed = "9" + value if value[0].isdigit() else "x" + value
    after = f"{name}={quote(changed, safe='')}".encode()
    tampered = query.replace(before, after, 1)
    assert tampered != query
    assert not verify(parse_callback(tampered), signing_key.public_key())


def test_the_signed_bytes_are_never_re_encoded(signing_key: ec.EllipticCurvePrivateKey) -> None:
    """The same parameters encoded otherwise (``%20`` for ``+``) are other bytes: refused."""
    query = signed_query(signing_key)
    respelled = query.replace(b"user%201", b"user+1")
    callback = parse_callback(respelled)
    assert callback.user_id == "user 1"
    assert not verify(callback, signing_key.public_key())


def test_a_truncated_signature_is_refused_or_false(
    signing_key: ec.EllipticCurvePrivateKey,
) -> None:
    query = signed_query(signing_key)
    message, _, tail = query.partition(b"&signature=")
    signature, _, key_id = tail.partition(b"&key_id=")
    for cut in (1, 2, 3, 10, len(signature) - 1):
        shortened = message + b"&signature=" + signature[:cut] + b"&key_id=" + key_id
        try:
            callback = parse_callback(shortened)
        except AdMobRejected:
            continue
        assert not verify(callback, signing_key.public_key())


def test_another_key_does_not_verify(signing_key: ec.EllipticCurvePrivateKey) -> None:
    callback = parse_callback(signed_query(signing_key))
    assert not verify(callback, new_key().public_key())
    p384 = ec.generate_private_key(ec.SECP384R1()).public_key()
    assert not verify(callback, p384)


def _valid() -> bytes:
    return signed_query(new_key())


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        (b"ad_network=1&ad_unit=2", "no signature"),
        (b"signature=AAAA&key_id=1", "no signature"),
        (_valid() + b"&extra=1", "last two"),
        (_valid().replace(b"&key_id=", b"&kid="), "last two"),
        (b"key_id=1&" + _valid(), "last two"),
        (_valid().replace(b"&signature=", b"&signature=AAAA&signature=", 1), "last two"),
        (_valid().replace(b"&ad_unit=", b"&ad_unit=1&ad_unit=", 1), "twice"),
        (_valid().replace(b"&reward_item=Reward", b""), "reward_item is missing"),
        (_valid().replace(b"custom_data=", b"custom=", 1), "custom_data is missing"),
        (_valid().replace(b"&timestamp=", b"&timestamp=-", 1), "timestamp is not a number"),
        (_valid().replace(b"&timestamp=", b"&timestamp=1e", 1), "timestamp is not a number"),
        (_valid().replace(b"&key_id=", b"&key_id=x", 1), "key_id is not a number"),
        (_valid().replace(b"&key_id=", b"&key_id=99999999999999999999", 1), "key_id"),
        (_valid().replace(b"&signature=", b"&signature=*", 1), "base64"),
        (_valid().partition(b"&signature=")[0] + b"&signature=AAAAA&key_id=1", "base64"),
        (_valid().partition(b"&signature=")[0] + b"&signature=&key_id=1", "empty"),
        (_valid().replace(b"user_id=", b"user_id=%ff", 1), "UTF-8"),
        (b"a=" + b"x" * MAX_QUERY_BYTES + _valid(), "too long"),
    ],
)
def test_malformed_callbacks_are_refused(query: bytes, reason: str) -> None:
    with pytest.raises(AdMobRejected) as caught:
        parse_callback(query)
    assert reason in caught.value.reason


def _callback(ad_unit: str = "111", timestamp_ms: int = 10_000) -> AdMobCallback:
    return AdMobCallback(
        ad_network="1",
        ad_unit=ad_unit,
        custom_data="i",
        reward_amount="1",
        reward_item="r",
        timestamp_ms=timestamp_ms,
        transaction_id="t",
        user_id="",
        key_id=1,
        message=b"",
        signature=b"",
    )


def test_the_ad_unit_allowlist() -> None:
    assert ad_units("") == ad_units(" , ") == frozenset()  # none: AdMob callbacks are off
    assert ad_units(" 222 , 111 ") == {"111", "222"}
    # a callback names the ad unit by the digits after the slash of its full id
    assert ad_units("ca-app-pub-3940256099942544/2747237135, 111") == {"2747237135", "111"}
    assert _callback("111").ad_unit in ad_units("222,111")


def test_the_timestamp_window() -> None:
    now = 1_000_000

    def ok(t: int, since: int = 0, until: int = 10**12) -> bool:
        return timestamp_acceptable(
            _callback(timestamp_ms=t), now_ms=now, since_ms=since, until_ms=until
        )

    assert ok(now)
    assert ok(now + 300_000)
    assert not ok(now + 300_001)
    assert not ok(now, since=now + 1)
    assert not ok(now, until=now - 1)


# --- The property: nothing but Google's key verifies ----------------------------------

_GOOGLE = new_key()
_FORGER = new_key()
_query_text = st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=300
).map(str.encode)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=_query_text, tail=st.booleans(), key_id=st.integers(0, 2**40))
@example(body=signed_query(_FORGER).partition(b"&signature=")[0], tail=True, key_id=KEY_ID)
def test_random_queries_never_verify(body: bytes, tail: bool, key_id: int) -> None:
    query = body
    if tail:  # a well-formed tail, signed by someone else's key
        der = _FORGER.sign(body, ec.ECDSA(hashes.SHA256()))
        signature = base64.urlsafe_b64encode(der).rstrip(b"=")
        query = body + b"&signature=" + signature + b"&key_id=" + str(key_id).encode()
    try:
        callback = parse_callback(query)
    except AdMobRejected:
        return
    assert not verify(callback, _GOOGLE.public_key())


# --- The key file ---------------------------------------------------------------------


def test_only_p256_keys_are_kept(signing_key: ec.EllipticCurvePrivateKey) -> None:
    p384 = ec.generate_private_key(ec.SECP384R1()).public_key()
    edwards = ed25519.Ed25519PrivateKey.generate().public_key()
    pem_only = json.loads(keys_json((7, signing_key)))["keys"][0]
    del pem_only["base64"]
    pem_only["keyId"] = "7"  # a number in a string is still the number
    doc = {
        "keys": [
            pem_only,
            {
                "keyId": 8,
                "pem": p384.public_bytes(
                    serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
                ).decode(),
            },
            {
                "keyId": 9,
                "base64": base64.b64encode(
                    edwards.public_bytes(
                        serialization.Encoding.DER,
                        serialization.PublicFormat.SubjectPublicKeyInfo,
                    )
                ).decode(),
            },
            {"keyId": 10, "base64": "not base64!"},
            {"keyId": "eleven", "base64": ""},
        ]
    }
    keys = parse_keys(json.dumps(doc).encode())
    assert list(keys) == [7]
    callback = parse_callback(signed_query(signing_key))
    assert verify(callback, keys[7])


@pytest.mark.parametrize("raw", [b"", b"{", b'{"keys": 1}', b'{"keys": []}'])
def test_a_key_file_without_keys_is_unavailable(raw: bytes) -> None:
    with pytest.raises(KeysUnavailable):
        parse_keys(raw)


@pytest.mark.parametrize(
    "url", ["http://keys.example/k.json", "ftp://example.com/k", "https://", "file://", "keys"]
)
def test_only_fetchable_urls_are_configured(url: str) -> None:
    with pytest.raises(ConfigError):
        check_keys_url(url)


def test_fetchable_urls() -> None:
    for url in ("https://www.gstatic.com/k.json", "file:///etc/k.json", "http://[::1]:8/k"):
        check_keys_url(url)


# --- VerifierKeys ---------------------------------------------------------------------


async def test_keys_from_a_file_are_shared_through_redis(
    tmp_path: Path,
    signing_key: ec.EllipticCurvePrivateKey,
    make_keys: Callable[..., VerifierKeys],
    redis: RedisClient,
    keyspace: KeySpace,
) -> None:
    path = tmp_path / "keys.json"
    path.write_bytes(keys_json((KEY_ID, signing_key)))
    first = make_keys(path.as_uri())
    key = await first.key(KEY_ID)
    assert key is not None
    assert verify(parse_callback(signed_query(signing_key)), key)
    assert first.fetches == 1
    assert 0 < await redis.ttl(keyspace.admob_keys()) <= 24 * 3600

    path.unlink()  # a second worker cannot fetch: it must not need to
    second = make_keys(path.as_uri())
    assert await second.key(KEY_ID) is not None
    assert second.fetches == 0
    assert await first.key(KEY_ID) is not None  # from memory
    assert first.fetches == 1


async def test_an_unknown_key_is_found_after_one_refetch(
    key_server: KeyServer,
    signing_key: ec.EllipticCurvePrivateKey,
    make_keys: Callable[..., VerifierKeys],
    redis: RedisClient,
    keyspace: KeySpace,
) -> None:
    clock = Clock()
    keys = make_keys(key_server.url, clock=clock, refetch_interval_s=60.0)
    assert await keys.key(KEY_ID) is not None
    assert key_server.requests == 1

    rotated = new_key()
    key_server.body = keys_json((KEY_ID, signing_key), (OTHER_ID, rotated))
    clock.now += 61
    key = await keys.key(OTHER_ID)
    assert key is not None
    assert key_server.requests == 2
    assert verify(parse_callback(signed_query(rotated, OTHER_ID)), key)

    clock.now += 30  # within the interval: an unknown id does not refetch
    assert await keys.key(999) is None
    assert key_server.requests == 2
    assert await keys.key(KEY_ID) is not None  # the known ones still answer

    clock.now += 31
    await redis.delete(keyspace.admob_keys_lease())  # its 60 s in Redis are over too
    assert await keys.key(999) is None
    assert key_server.requests == 3


async def test_concurrent_unknown_ids_share_one_fetch(
    key_server: KeyServer,
    signing_key: ec.EllipticCurvePrivateKey,
    make_keys: Callable[..., VerifierKeys],
) -> None:
    clock = Clock()
    keys = make_keys(key_server.url, clock=clock)
    await keys.key(KEY_ID)
    clock.now += 3600
    rotated = new_key()
    key_server.body = keys_json((OTHER_ID, rotated))
    key_server.delay_s = 0.05
    found = await asyncio.gather(*(keys.key(OTHER_ID) for _ in range(50)))
    assert all(k is not None for k in found)
    assert key_server.requests == 2


async def test_a_caller_that_leaves_does_not_cancel_the_fetch(
    key_server: KeyServer,
    make_keys: Callable[..., VerifierKeys],
) -> None:
    keys = make_keys(key_server.url)
    key_server.delay_s = 0.1
    leaving = asyncio.create_task(keys.key(KEY_ID))
    staying = asyncio.create_task(keys.key(KEY_ID))
    await asyncio.sleep(0.02)
    leaving.cancel()
    assert await staying is not None
    assert key_server.requests == 1


async def test_a_key_server_that_is_down_is_unavailable(
    key_server: KeyServer,
    make_keys: Callable[..., VerifierKeys],
) -> None:
    clock = Clock()
    url = key_server.url
    await key_server.stop()
    keys = make_keys(url, clock=clock)
    with pytest.raises(KeysUnavailable):
        await keys.key(KEY_ID)
    assert keys.fetches == 1
    with pytest.raises(KeysUnavailable):  # not asked again within the interval
        await keys.key(KEY_ID)
    assert keys.fetches == 1


@pytest.mark.parametrize(("status", "body"), [(500, b"{}"), (404, b""), (200, b"{oops")])
async def test_a_bad_answer_is_unavailable_and_not_cached(
    status: int,
    body: bytes,
    key_server: KeyServer,
    make_keys: Callable[..., VerifierKeys],
    redis: RedisClient,
    keyspace: KeySpace,
) -> None:
    key_server.status, key_server.body = status, body
    with pytest.raises(KeysUnavailable):
        await make_keys(key_server.url).key(KEY_ID)
    assert await redis.get(keyspace.admob_keys()) is None


async def test_one_refetch_across_workers_per_interval(
    key_server: KeyServer,
    signing_key: ec.EllipticCurvePrivateKey,
    make_keys: Callable[..., VerifierKeys],
) -> None:
    clock = Clock()
    one, two = make_keys(key_server.url, clock=clock), make_keys(key_server.url, clock=clock)
    assert await one.key(KEY_ID) is not None
    assert await two.key(KEY_ID) is not None
    assert key_server.requests == 1  # the second read Redis

    clock.now += 61  # past each worker's own interval
    rotated = new_key()
    key_server.body = keys_json((KEY_ID, signing_key), (OTHER_ID, rotated))
    assert await one.key(OTHER_ID) is not None  # its refetch took the lease
    assert key_server.requests == 2
    assert await two.key(OTHER_ID) is not None  # the lease is taken: Redis has it
    assert key_server.requests == 2


async def test_memory_follows_the_redis_copy_life(
    tmp_path: Path,
    signing_key: ec.EllipticCurvePrivateKey,
    make_keys: Callable[..., VerifierKeys],
    redis: RedisClient,
    keyspace: KeySpace,
) -> None:
    path = tmp_path / "keys.json"
    path.write_bytes(keys_json((KEY_ID, signing_key)))
    clock = Clock()
    keys = make_keys(path.as_uri(), clock=clock, refetch_interval_s=0.0)
    assert await keys.key(KEY_ID) is not None
    await redis.set(keyspace.admob_keys(), b"damaged")
    clock.now += 24 * 3600  # the memory copy is done: Redis's is broken, so fetch
    assert await keys.key(KEY_ID) is not None
    assert keys.fetches == 2
