"""The set-up of the peers that come as wheels, without running them: LiteLLM's, TensorZero's
and Envoy's configurations, the platform checks, the virtualenv made from
requirements/peers.lock, and the Redis commands counted per request."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench import compiled_peers as compiled
from bench.measures import commands_per_request

ROOT = Path(__file__).resolve().parents[3]
MOCK = "http://127.0.0.1:4567/v1"
MODELS = ["bench-model", "bench-model-slow20", "bench-tokens50x10", "bench-model"]


# --- LiteLLM's configuration and command -----------------------------------------------------


def test_litellm_serves_each_mock_model_once_through_its_openai_provider_at_the_mock() -> None:
    config = yaml.safe_load(compiled.litellm_config(MOCK, MODELS, "sk-x"))
    names = [m["model_name"] for m in config["model_list"]]
    assert names == ["bench-model", "bench-model-slow20", "bench-tokens50x10"]
    for model in config["model_list"]:
        assert model["litellm_params"] == {
            "model": "openai/" + model["model_name"],  # the mock reads its delay from the name
            "api_base": MOCK,
            "api_key": "mock-key",
        }
    assert config["litellm_settings"] == {"drop_params": True, "telemetry": False}
    # it refuses to start without a master key: the key the bench sends; no database
    assert config["general_settings"] == {"master_key": "sk-x"}


def test_litellm_runs_from_the_peers_virtualenv_with_svcs_worker_count(tmp_path: Path) -> None:
    venv = compiled.PeersVenv(tmp_path / "venv", tmp_path / "peers.lock")
    config = tmp_path / "litellm.yaml"
    command = compiled.litellm_command(venv, config, 4321, 2)
    assert command[0] == str(tmp_path / "venv" / "bin" / "litellm")  # never the bench's own
    assert command[command.index("--config") + 1] == str(config)
    assert command[command.index("--host") + 1] == "127.0.0.1"
    assert command[command.index("--port") + 1] == "4321"
    assert command[command.index("--num_workers") + 1] == "2"


def test_litellm_starts_without_the_internet_and_logs_errors_only() -> None:
    # its model cost map and Anthropic beta headers: the copies its wheel ships
    assert compiled.LITELLM_ENV["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert compiled.LITELLM_ENV["LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS"] == "True"
    assert compiled.LITELLM_ENV["LITELLM_LOG"] == "ERROR"


# --- TensorZero's configuration ---------------------------------------------------------------


def test_tensorzero_serves_each_mock_model_through_an_openai_provider_at_the_mock() -> None:
    config = tomllib.loads(compiled.tensorzero_config(MOCK, MODELS, rate_limit=False))
    assert set(config["models"]) == {"bench-model", "bench-model-slow20", "bench-tokens50x10"}
    for name, model in config["models"].items():
        assert model["routing"] == ["mock"]
        assert model["providers"]["mock"] == {
            "type": "openai",
            "api_base": MOCK + "/",
            "model_name": name,  # the mock reads its delay from the name it is sent
            "api_key_location": "none",
        }
    assert config["gateway"]["observability"]["enabled"] is False
    assert "rate_limiting" not in config


def test_the_valkey_variant_rate_limits_every_inference_far_above_the_load() -> None:
    config = tomllib.loads(compiled.tensorzero_config(MOCK, MODELS, rate_limit=True))
    (rule,) = config["rate_limiting"]["rules"]
    assert rule == {"always": True, "model_inferences_per_second": 1_000_000_000}
    assert "scope" not in rule  # every request, whatever its tags


def test_tensorzero_model_names_are_quoted_in_its_configuration() -> None:
    odd = 'with "quotes" and dots.x'
    config = tomllib.loads(compiled.tensorzero_config(MOCK, [odd], rate_limit=False))
    assert config["models"][odd]["providers"]["mock"]["model_name"] == odd


def test_tensorzero_launcher_and_its_command(tmp_path: Path) -> None:
    compile(compiled.TENSORZERO_LAUNCHER, "launcher", "exec")  # valid Python
    venv = compiled.PeersVenv(tmp_path / "venv", tmp_path / "peers.lock")
    config, url = tmp_path / "tz.toml", tmp_path / "tz.url"
    plain = compiled.tensorzero_command(venv, config, url, None)
    assert plain[:3] == [str(venv.python), "-c", compiled.TENSORZERO_LAUNCHER]
    assert plain[3:] == [str(config), str(url), ""]  # no Valkey: an empty argument
    assert compiled.tensorzero_command(venv, config, url, "redis://127.0.0.1:1/0")[-1] == (
        "redis://127.0.0.1:1/0"
    )
    # the gateway listens on 127.0.0.1 only; the launcher hands its URL over through a file
    assert "_start_http_gateway" in compiled.TENSORZERO_LAUNCHER
    assert "sigwait" in compiled.TENSORZERO_LAUNCHER


# --- Envoy's configuration --------------------------------------------------------------------


def _manager(config: dict[str, Any]) -> dict[str, Any]:
    (listener,) = config["static_resources"]["listeners"]
    (chain,) = listener["filter_chains"]
    (relay,) = chain["filters"]
    assert relay["name"] == "envoy.filters.network.http_connection_manager"
    manager: dict[str, Any] = relay["typed_config"]
    return manager


def test_envoy_has_one_listener_on_loopback_and_one_cluster_the_mock() -> None:
    config = compiled.envoy_config(8100, 8101, MOCK)
    (listener,) = config["static_resources"]["listeners"]  # type: ignore[index]
    assert listener["address"]["socket_address"] == {"address": "127.0.0.1", "port_value": 8100}
    assert config["admin"]["address"]["socket_address"] == {  # type: ignore[index]
        "address": "127.0.0.1",
        "port_value": 8101,
    }
    (cluster,) = config["static_resources"]["clusters"]  # type: ignore[index]
    assert cluster["type"] == "STATIC"
    (endpoints,) = cluster["load_assignment"]["endpoints"]
    (endpoint,) = endpoints["lb_endpoints"]
    assert endpoint["endpoint"]["address"]["socket_address"] == {
        "address": "127.0.0.1",
        "port_value": 4567,
    }
    # the default breakers (1,024) would cap the C=1000 point
    (limits,) = cluster["circuit_breakers"]["thresholds"]
    assert min(limits.values()) >= 10_000


def test_envoy_relays_plain_http1_with_the_router_alone_and_no_timeout() -> None:
    manager = _manager(compiled.envoy_config(8100, 8101, MOCK))
    assert manager["codec_type"] == "HTTP1"
    assert manager["generate_request_id"] is False
    assert [f["name"] for f in manager["http_filters"]] == ["envoy.filters.http.router"]
    (host,) = manager["route_config"]["virtual_hosts"]
    (route,) = host["routes"]
    assert route == {"match": {"prefix": "/"}, "route": {"cluster": "mock", "timeout": "0s"}}


def test_envoy_needs_the_mocks_host_and_port() -> None:
    with pytest.raises(ValueError, match="host and port"):
        compiled.envoy_config(8100, 8101, "http://127.0.0.1/v1")


def test_envoy_command_runs_svcs_worker_count_without_hot_restart(tmp_path: Path) -> None:
    command = compiled.envoy_command(tmp_path / "envoy", tmp_path / "envoy.json", 2)
    assert command[0] == str(tmp_path / "envoy")
    joined = " ".join(command)
    assert f"--config-path {tmp_path / 'envoy.json'}" in joined
    assert "--concurrency 2" in joined
    assert "--disable-hot-restart" in command


# --- Where they can run -----------------------------------------------------------------------


@pytest.mark.parametrize("name", compiled.VENV_PEERS)
def test_every_peer_of_the_virtualenv_runs_on_linux_x86_64_with_a_recent_glibc(name: str) -> None:
    assert compiled.platform_problem(name, "Linux", "x86_64", ("glibc", "2.36")) is None


@pytest.mark.parametrize(
    ("name", "system", "machine", "libc", "says"),
    [
        ("envoy", "Linux", "x86_64", ("glibc", "2.28"), "needs glibc >= 2.31, found 2.28"),
        ("envoy", "Linux", "x86_64", ("", ""), "needs glibc"),
        ("tensorzero", "Darwin", "arm64", ("", ""), "Linux x86_64 only, not Darwin arm64"),
        ("tensorzero-valkey", "Linux", "aarch64", ("glibc", "2.36"), "Linux x86_64 only"),
        ("litellm", "Linux", "x86_64", ("glibc", "2.27"), "needs glibc >= 2.28, found 2.27"),
        ("litellm", "Darwin", "arm64", ("", ""), "litellm for Linux x86_64 only"),
    ],
)
def test_a_platform_the_wheels_do_not_fit_is_named(
    name: str, system: str, machine: str, libc: tuple[str, str], says: str
) -> None:
    problem = compiled.platform_problem(name, system, machine, libc)
    assert problem is not None
    assert says in problem
    assert "\n" not in problem


def test_tensorzero_needs_only_glibc_2_17() -> None:
    assert compiled.platform_problem("tensorzero", "Linux", "x86_64", ("glibc", "2.28")) is None


# --- The lock and the virtualenv --------------------------------------------------------------


def test_the_peers_lock_pins_every_peers_package_with_hashes_as_peers_in_asks() -> None:
    lock = ROOT / "requirements" / "peers.lock"
    pins = compiled.lock_pins(lock)
    asked = (ROOT / "requirements" / "peers.in").read_text()
    wanted = dict(re.findall(r"^([a-z0-9-]+)(?:\[[a-z0-9,-]+\])?==(\S+)", asked, re.M))
    packages = {compiled.PACKAGE[name] for name in compiled.VENV_PEERS}
    assert wanted == {package: pins[package] for package in packages}
    assert "litellm[proxy]==" in asked  # its proxy server's dependencies, in the lock too
    assert {"fastapi", "uvicorn", "orjson"} <= set(pins)
    # every pin carries at least one hash (pip installs it with --require-hashes)
    blocks = re.split(r"\n(?=[a-z0-9])", lock.read_text().split("\n\n", 1)[1])
    assert len(blocks) == len(pins)
    assert all("--hash=sha256:" in block for block in blocks)


def _venv(tmp_path: Path) -> compiled.PeersVenv:
    lock = tmp_path / "peers.lock"
    lock.write_text("tensorzero==1.0 \\\n    --hash=sha256:00\n")
    return compiled.PeersVenv(tmp_path / "venv", lock)


def test_the_virtualenv_is_current_only_while_its_stamp_matches_the_lock(tmp_path: Path) -> None:
    venv = _venv(tmp_path)
    assert not venv.is_current()
    venv.python.parent.mkdir(parents=True)
    venv.python.touch()
    venv.stamp.write_text(venv.wanted_stamp())
    assert venv.is_current()
    venv.lock.write_text(venv.lock.read_text() + "# changed\n")
    assert not venv.is_current()


def test_the_virtualenv_is_made_anew_from_the_lock_hashes_checked(tmp_path: Path) -> None:
    venv = _venv(tmp_path)
    make, install, check = venv.install_commands("/py")
    assert make == ["/py", "-m", "venv", "--clear", "--without-pip", str(venv.root)]
    assert install[:3] == ["/py", "-m", "pip"]
    assert install[install.index("--python") + 1] == str(venv.python)  # never the bench's own
    for flag in ("--require-hashes", "--no-deps"):
        assert flag in install
    assert install[install.index("--only-binary") + 1] == ":all:"
    assert install[-2:] == ["-r", str(venv.lock)]
    assert check[-1] == "check"


def test_ensure_installs_once_and_writes_the_stamp_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    venv = _venv(tmp_path)
    ran: list[list[str]] = []

    def fake_run(command: list[str], **kwargs: Any) -> None:
        assert not venv.stamp.exists()
        ran.append(command)
        if "venv" in command:
            venv.python.parent.mkdir(parents=True, exist_ok=True)
            venv.python.touch()

    monkeypatch.setattr(compiled.subprocess, "run", fake_run)
    assert venv.ensure() is True
    assert len(ran) == 3
    assert venv.stamp.read_text() == venv.wanted_stamp()
    assert venv.ensure() is False  # reused
    assert len(ran) == 3


def test_a_failed_install_is_one_line_and_leaves_no_stamp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    venv = _venv(tmp_path)

    def failing(command: list[str], **kwargs: Any) -> None:
        if "install" in command:
            said = b"Collecting tensorzero\nERROR: No matching distribution found for x\n"
            raise subprocess.CalledProcessError(1, command, b"", said)

    monkeypatch.setattr(compiled.subprocess, "run", failing)
    problem = compiled.install_problem(venv)
    assert problem == (
        f"could not install peers.lock into {venv.root}: "
        "ERROR: No matching distribution found for x"
    )
    assert not venv.stamp.exists()


def test_unavailable_says_the_platform_before_trying_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compiled.platform, "machine", lambda: "riscv64")

    def never(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("nothing is installed for a platform the wheels do not fit")

    monkeypatch.setattr(compiled.subprocess, "run", never)
    problem = compiled.unavailable("envoy", _venv(tmp_path))
    assert problem is not None
    assert "Linux x86_64 only" in problem


def test_envoy_binary_is_found_inside_the_virtualenv(tmp_path: Path) -> None:
    venv = _venv(tmp_path)
    with pytest.raises(FileNotFoundError):
        venv.envoy_binary()
    binary = venv.root / "lib/python3.11/site-packages/envoy/_bin/envoy"
    binary.parent.mkdir(parents=True)
    binary.touch()
    assert venv.envoy_binary() == binary


# --- Redis per request (the Valkey variant) ---------------------------------------------------


def test_commands_per_request_counts_growth_without_the_benchs_own_info() -> None:
    before = {"fcall": 10, "hset": 10, "info": 3, "get": 5}
    after = {"fcall": 30, "hset": 30, "info": 9, "get": 5, "time": 20}
    assert commands_per_request(before, after, 20) == {"fcall": 1.0, "hset": 1.0, "time": 1.0}
    assert commands_per_request({}, {"fcall": 3}, 0) == {"fcall": 3.0}  # no division by zero
