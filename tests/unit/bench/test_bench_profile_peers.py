"""Which peers a run measures: the default profile's four gateways (TensorZero twice, once with
its rate limit in Valkey), none in the smoke profile, ``--no-peers`` and ``--peer NAME``."""

from __future__ import annotations

from bench import compiled_peers
from bench.profiles import PROFILES, build_parser, run_peers, run_plan

GATEWAYS = ("litellm", "portkey", "tensorzero", "tensorzero-valkey", "envoy")


def plan(*argv: str) -> tuple[str, ...]:
    return run_peers(*run_plan(build_parser().parse_args(["run", *argv])))


def test_the_default_profile_names_litellm_portkey_tensorzero_and_envoy() -> None:
    assert PROFILES["default"].peers == GATEWAYS
    # LiteLLM, TensorZero and Envoy from requirements/peers.lock; Portkey from its npm lock
    assert set(GATEWAYS) - {"portkey"} == set(compiled_peers.VENV_PEERS)
    assert PROFILES["smoke"].peers == ()


def test_a_default_run_measures_the_floor_then_every_gateway() -> None:
    assert plan() == ("floor", *GATEWAYS)
    assert plan("--no-floor") == GATEWAYS


def test_no_peers_empties_the_profiles_peers_but_not_the_ones_named() -> None:
    assert plan("--no-peers") == ("floor",)
    assert plan("--no-peers", "--no-floor") == ()
    assert plan("--no-peers", "--peer", "envoy") == ("floor", "envoy")
    assert plan("--profile", "smoke", "--no-peers", "--peer", "litellm") == ("litellm",)


def test_a_peer_named_again_runs_once_where_it_came_first() -> None:
    assert plan("--no-floor", "--peer", "tensorzero", "--peer", "floor") == (*GATEWAYS, "floor")
    assert plan("--profile", "smoke", "--peer", "envoy", "--peer", "envoy") == ("envoy",)
    # the floor keeps its place when named (first only when the profile adds it)
    assert plan("--no-peers", "--peer", "envoy", "--peer", "floor") == ("envoy", "floor")


def test_the_profile_keeps_its_other_settings_when_its_peers_are_dropped() -> None:
    profile, named = run_plan(build_parser().parse_args(["run", "--no-peers", "--peer", "x"]))
    assert named == ("x",)
    assert profile.peers == ()
    assert profile.scenarios == PROFILES["default"].scenarios
    assert profile.floor is True
