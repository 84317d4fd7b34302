"""Issue 30 item 10 and issue 44 item 12: an IPv6 address that carries an IPv4 one
(IPv4-mapped, IPv4-translated, IPv4-compatible, 6to4, NAT64 and local-use NAT64) is judged
as the IPv4 address inside, when a webhook is created, changed, and at every delivery (by
address, and by a name resolving to one); a site-local one (fec0::/10) is refused."""

from __future__ import annotations

import asyncio
import ipaddress
import socket

import fakeredis
import pytest

from app.core.errors import ApiError, TargetRefused
from app.kv.layout import KeySpace
from app.store import AccountRecord, Store
from app.webhooks.registry import WebhookCreateRequest, Webhooks, WebhookUpdateRequest
from app.webhooks.targets import NOBODY, check_url, public
from tests.support.ledgers import Ledgers

# The IPv4 addresses a webhook must never reach, and one it may.
INSIDE = {
    "loopback": "127.0.0.1",
    "private": "10.1.2.3",
    "link-local": "169.254.1.1",
    "metadata": "169.254.169.254",
    "shared": "100.64.0.1",
}
OUTSIDE = "8.8.8.8"


def _forms(v4: str) -> dict[str, str]:
    """``v4`` carried in each IPv6 form."""
    n = int(ipaddress.IPv4Address(v4))
    hi, lo = n >> 16, n & 0xFFFF
    return {
        "mapped": f"::ffff:{v4}",
        "translated": f"::ffff:0:{hi:x}:{lo:x}",
        "compatible": f"::{hi:x}:{lo:x}",
        "6to4": f"2002:{hi:x}:{lo:x}::1",
        "nat64": f"64:ff9b::{hi:x}:{lo:x}",
        "nat64-local": f"64:ff9b:1::{hi:x}:{lo:x}",
    }


REFUSED = [
    pytest.param(address, id=f"{form}-{name}")
    for name, v4 in INSIDE.items()
    for form, address in _forms(v4).items()
]
ALLOWED = [pytest.param(address, id=form) for form, address in _forms(OUTSIDE).items()]


@pytest.mark.parametrize("address", REFUSED)
def test_an_inside_ipv4_address_carried_in_ipv6_is_not_public(address: str) -> None:
    assert public(ipaddress.ip_address(address)) is False


@pytest.mark.parametrize("address", ALLOWED)
def test_a_public_ipv4_address_carried_in_ipv6_is_public(address: str) -> None:
    assert public(ipaddress.ip_address(address)) is True


@pytest.mark.parametrize(
    "address",
    ["64:ff9b:1:a9fe:a9:fe00::", "64:ff9b:1:808:8:800::", "64:ff9b:1:0:0:1:808:808"],
)
def test_a_local_use_nat64_address_not_in_its_96_form_is_refused(address: str) -> None:
    # which IPv4 address it reaches depends on the network's prefix length (RFC 6052):
    # 169.254.169.254 at /48 for the first; a public-looking one is refused all the same
    assert public(ipaddress.ip_address(address)) is False


SITE_LOCAL = ["fec0::1", "fec0:1234:5678::abcd", "feff:ffff::1"]


@pytest.mark.parametrize("address", SITE_LOCAL)
def test_a_site_local_address_is_not_public(address: str) -> None:
    # Python's is_global says True for fec0::/10 (deprecated, still routed inside networks)
    assert public(ipaddress.ip_address(address)) is False


@pytest.mark.parametrize("address", SITE_LOCAL)
async def test_a_name_resolving_to_a_site_local_address_is_refused(
    address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _resolving_to(monkeypatch, address)
    with pytest.raises(TargetRefused):
        await check_url("https://hooks.example.com/hook", NOBODY)
    with pytest.raises(TargetRefused):
        await check_url(f"https://[{address}]/hook", NOBODY)


@pytest.mark.parametrize("address", REFUSED)
async def test_a_url_naming_one_is_refused(address: str) -> None:
    # check_url is the check of create, PATCH and every delivery (before its connection)
    with pytest.raises(TargetRefused):
        await check_url(f"https://[{address}]/hook", NOBODY)


@pytest.mark.parametrize("address", ALLOWED)
async def test_a_url_naming_a_public_one_is_allowed(address: str) -> None:
    assert (await check_url(f"https://[{address}]/hook", NOBODY)).parts.hostname == address


def _resolving_to(monkeypatch: pytest.MonkeyPatch, address: str) -> None:
    """Every name resolves to ``address`` (what a hostile DNS server would say)."""
    loop = asyncio.get_running_loop()

    async def answer(host: str, port: int, **_: object) -> list[tuple[object, ...]]:
        return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, port, 0, 0))]

    monkeypatch.setattr(loop, "getaddrinfo", answer)


@pytest.mark.parametrize("address", REFUSED)
async def test_a_delivery_to_a_name_resolving_to_one_gets_no_connection(
    address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _resolving_to(monkeypatch, address)
    with pytest.raises(TargetRefused):
        await check_url("https://hooks.example.com/hook", NOBODY)


@pytest.mark.parametrize("address", ALLOWED)
async def test_a_delivery_to_a_name_resolving_to_a_public_one_connects_to_it(
    address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the delivery connects to these addresses, not to what the name resolves to later
    _resolving_to(monkeypatch, address)
    target = await check_url("https://hooks.example.com/hook", NOBODY)
    assert target.addresses == (address,)


@pytest.fixture
async def webhooks(store: Store) -> Webhooks:
    await store.create_account(AccountRecord(pid="acct_A", created_at=1))
    redis = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    ledger = Ledgers(redis, KeySpace("svc", 4), cap_ttl_s=172_800, usage_ttl_s=86_400)
    return Webhooks(store, ledger.money, b"pepper", NOBODY)


async def test_create_and_patch_refuse_each_form(webhooks: Webhooks) -> None:
    allowed = _forms(OUTSIDE)["nat64"]
    created = await webhooks.create(
        "acct_A", WebhookCreateRequest(url=f"https://[{allowed}]/hook", events=["key.revoked"])
    )
    for form, address in _forms(INSIDE["metadata"]).items():
        url = f"https://[{address}]/hook"
        with pytest.raises(ApiError) as created_info:
            await webhooks.create("acct_A", WebhookCreateRequest(url=url, events=["key.revoked"]))
        with pytest.raises(ApiError) as patched_info:
            await webhooks.update("acct_A", created.id, WebhookUpdateRequest(url=url))
        for info in (created_info, patched_info):
            assert (info.value.status, info.value.param) == (400, "url"), form
    listed = await webhooks.list("acct_A")
    assert [w.url for w in listed.data] == [f"https://[{allowed}]/hook"]
