"""The models file: the minimal example, defaults, and errors that name line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.completion.catalog import DEFAULT_ALIASES, UpstreamRef, load_catalog, price
from app.core.errors import ModelsFileError

MINIMAL = """\
[providers.local]
base_url = "http://127.0.0.1:9000/v1"
api_key_env = "LOCAL_API_KEY"   # sent as Authorization: Bearer <value>

[aliases.svc-fast]
upstreams = [
  { provider = "local", model = "llama-3.1-8b-instruct" },   # tried first
  { provider = "local", model = "qwen2.5-7b-instruct" },     # then this
]
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "models.toml"
    path.write_text(text)
    return path


def test_the_minimal_file_is_accepted_as_it_is(tmp_path: Path) -> None:
    catalog = load_catalog(_write(tmp_path, MINIMAL))
    fast = catalog.aliases["svc-fast"]
    assert fast.upstreams == (
        UpstreamRef(provider="local", model="llama-3.1-8b-instruct"),
        UpstreamRef(provider="local", model="qwen2.5-7b-instruct"),
    )
    assert fast.price == DEFAULT_ALIASES["svc-fast"].price
    assert catalog.aliases["svc-code"] == DEFAULT_ALIASES["svc-code"]
    provider = catalog.providers["local"]
    assert (provider.api_key_env, provider.first_byte_timeout_s) == ("LOCAL_API_KEY", 30.0)


def test_every_alias_setting(tmp_path: Path) -> None:
    text = MINIMAL + (
        "\n[aliases.svc-smart]\nenabled = false\ncreated = 123\ninput_price = 7\n"
        "output_price = 9\ndefault_output_tokens = 100\nmax_output_tokens = 200\n"
    )
    smart = load_catalog(_write(tmp_path, text)).aliases["svc-smart"]
    assert (smart.enabled, smart.created, smart.price) == (False, 123, price(7, 9))
    assert (smart.price.cached_input, smart.price.cache_write) == (2, 7)  # follow the input
    assert (smart.default_output_tokens, smart.max_output_tokens) == (100, 200)


def test_cached_and_cache_write_prices(tmp_path: Path) -> None:
    text = MINIMAL + (
        "\n[aliases.svc-code]\ncached_input_price = 0\ncache_write_price = 30\n"
        "\n[aliases.svc-smart]\ninput_price = 8\n"
    )
    aliases = load_catalog(_write(tmp_path, text)).aliases
    assert aliases["svc-code"].price.rates == (20, 0, 30, 60)
    assert aliases["svc-code"].price.prompt_worst == 30
    assert aliases["svc-smart"].price.rates == (8, 2, 8, 150)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("cached_input_price = 21", "field 'aliases.svc-code.cached_input_price': 21 is more"),
        ("cached_input_price = -1", "field 'aliases.svc-code.cached_input_price': out of range"),
        ("cache_write_price = -1", "field 'aliases.svc-code.cache_write_price': out of range"),
    ],
)
def test_cached_price_above_input_refused(tmp_path: Path, setting: str, message: str) -> None:
    with pytest.raises(ModelsFileError, match=message):
        load_catalog(_write(tmp_path, MINIMAL + f"\n[aliases.svc-code]\n{setting}\n"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '[providers.local]\nbase_url = "http://x/v1"\nconnect_timeout_s = "fast"\n',
            "models.toml:3: field 'providers.local.connect_timeout_s': Expected `float`",
        ),
        ('[providers.local]\nbase_url = "x"\n', "models.toml:2: field 'providers.local.base_url'"),
        (
            "[aliases.svc-code]\ninput_price = 3\nbogus = 1\n",
            "models.toml:3: field 'aliases.svc-code.bogus'",
        ),
        ("[aliases.svc-turbo]\ninput_price = 3\n", "models.toml:1: field 'aliases.svc-turbo'"),
        (
            '[aliases.svc-code]\nupstreams = [{ provider = "nope", model = "m" }]\n',
            "models.toml:2: field 'aliases.svc-code.upstreams': no provider named 'nope'",
        ),
        (
            "[aliases.svc-code]\nupstreams = []\n",
            "models.toml:2: field 'aliases.svc-code.upstreams'",
        ),
        (
            "[aliases.svc-code]\noutput_price = -1\n",
            "models.toml:2: field 'aliases.svc-code.output_price': out of range",
        ),
        ("[aliases.svc-code\n", "at line 1"),
        ("[extras]\nx = 1\n", "field 'extras': unknown section"),
    ],
)
def test_broken_files_name_line_and_field(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ModelsFileError) as info:
        load_catalog(_write(tmp_path, text))
    assert expected in str(info.value)


@pytest.mark.parametrize("setting", ["first_byte_timeout_s", "idle_timeout_s"])
def test_a_timeout_a_waiting_stream_could_be_swept_in_is_refused(
    tmp_path: Path, setting: str
) -> None:
    # a third of the 900 s deadline is 300 s: the limit itself is too long already
    path = _write(tmp_path, f'[providers.local]\nbase_url = "http://x/v1"\n{setting} = 300\n')
    with pytest.raises(ModelsFileError) as info:
        load_catalog(path, reservation_deadline_s=900)
    message = str(info.value)
    assert f"models.toml:3: field 'providers.local.{setting}': 300 s" in message
    assert "SVC_RESERVATION_DEADLINE_S (900 s / 3 = 300 s)" in message
    assert "provider 'local'" in message
    (tmp_path / "models.toml").write_text(
        f'[providers.local]\nbase_url = "http://x/v1"\n{setting} = 299.5\n'
    )
    assert "local" in load_catalog(path, reservation_deadline_s=900).providers


def test_the_default_timeouts_fit_the_default_deadline_but_not_a_short_one(
    tmp_path: Path,
) -> None:
    path = _write(tmp_path, MINIMAL)  # first byte 30 s, idle 60 s
    assert load_catalog(path, reservation_deadline_s=900).providers["local"]
    with pytest.raises(ModelsFileError, match="first_byte_timeout_s': 30 s is not shorter"):
        load_catalog(path, reservation_deadline_s=90)
