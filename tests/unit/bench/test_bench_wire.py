"""The bench's count of Redis commands per completion, from a MONITOR sample."""

from __future__ import annotations

from bench.measures import tally_monitor

REQ = "unix:/tmp/v.sock:1"
BG = "unix:/tmp/v.sock:2"
NEW_BG = "unix:/tmp/v.sock:3"


def _line(addr: str, *words: str) -> str:
    quoted = " ".join(f'"{w}"' for w in words)
    return f"1700000000.000001 [0 {addr}] {quoted}"


def test_script_commands_are_part_of_their_call() -> None:
    lines = [
        _line(REQ, "EVALSHA", "abc", "1", "k"),
        _line("lua", "HGET", "k", "f"),
        _line(REQ, "EVALSHA", "def", "1", "k"),
    ]
    hot, background = tally_monitor(lines, {})
    assert hot == {"evalsha": 2}
    assert background == {}


def test_a_background_connection_opened_during_the_sample_counts_as_background() -> None:
    # redis-py's handshake (HELLO) comes before the CLIENT SETNAME that names it
    lines = [
        _line(NEW_BG, "HELLO", "3"),
        _line(REQ, "EVALSHA", "abc", "1", "k"),
        _line(NEW_BG, "CLIENT", "SETNAME", "svc-background"),
        _line(NEW_BG, "XLEN", "svc:{s0}:events"),
        _line(BG, "XLEN", "svc:{s1}:events"),
    ]
    hot, background = tally_monitor(lines, {BG: "svc-background"})
    assert hot == {"evalsha": 1}
    assert background == {"hello": 1, "client": 1, "xlen": 2}
