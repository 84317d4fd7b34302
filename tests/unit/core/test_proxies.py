"""The proxy rule every outbound connection follows (app.core.proxies)."""

from __future__ import annotations

import base64

import pytest

from app.core.errors import ProxyConfigError
from app.core.proxies import Proxy, parse_proxy, proxy_for

VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def test_no_variable_means_direct() -> None:
    assert proxy_for("https", "api.openai.com") is None
    assert proxy_for("http", "localhost") is None


def test_each_scheme_has_its_own_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://tls-proxy:3128")
    monkeypatch.setenv("HTTP_PROXY", "http://plain-proxy:8080")
    assert proxy_for("https", "api.openai.com") == Proxy("tls-proxy", 3128)
    assert proxy_for("http", "api.openai.com") == Proxy("plain-proxy", 8080)


def test_all_proxy_covers_a_scheme_without_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALL_PROXY", "egress:3128")  # no scheme: http://, as curl reads it
    monkeypatch.setenv("HTTP_PROXY", "http://plain-proxy")
    assert proxy_for("https", "api.openai.com") == Proxy("egress", 3128)
    assert proxy_for("http", "api.openai.com") == Proxy("plain-proxy", 80)


def test_the_lower_case_variable_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://upper:1")
    monkeypatch.setenv("https_proxy", "http://lower:2")
    assert proxy_for("https", "api.openai.com") == Proxy("lower", 2)


@pytest.mark.parametrize(
    ("no_proxy", "host", "direct"),
    [
        ("example.com", "example.com", True),
        ("example.com", "api.example.com", True),  # a domain covers its subdomains
        (".example.com", "api.example.com", True),
        ("example.com", "notexample.com", False),
        ("localhost,127.0.0.1", "127.0.0.1", True),
        ("*", "anything.at.all", True),
        ("other.org", "api.openai.com", False),
    ],
)
def test_no_proxy_names_hosts_reached_directly(
    monkeypatch: pytest.MonkeyPatch, no_proxy: str, host: str, direct: bool
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://egress:3128")
    monkeypatch.setenv("NO_PROXY", no_proxy)
    assert (proxy_for("https", host) is None) is direct


def test_credentials_become_a_header_and_are_never_shown() -> None:
    proxy = parse_proxy("http://svc%40acme:p%3Ass@egress:3128", "HTTPS_PROXY")
    assert proxy.headers == {
        "proxy-authorization": "Basic " + base64.b64encode(b"svc@acme:p:ss").decode()
    }
    for shown in (repr(proxy), str(proxy), proxy.url):
        assert "p:ss" not in shown
        assert "p%3Ass" not in shown
        assert "Basic" not in shown
    assert proxy.url == "http://egress:3128"


def test_an_ipv6_proxy_is_bracketed_in_its_url() -> None:
    assert parse_proxy("http://[::1]:3128", "HTTPS_PROXY").url == "http://[::1]:3128"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("https://egress:3128", "must be an http:// proxy URL"),
        ("socks5://egress:1080", "must be an http:// proxy URL"),
        ("http://egress:99999", "invalid port"),
        ("http://:3128", "names no host"),
    ],
)
def test_a_proxy_svc_cannot_use_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, value: str, says: str
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", value.replace("egress", "user:secret@egress"))
    with pytest.raises(ProxyConfigError, match=says) as raised:
        proxy_for("https", "api.openai.com")
    assert "secret" not in str(raised.value)
    assert "HTTPS_PROXY" in str(raised.value)
