"""Identifiers made without a Redis call."""

from __future__ import annotations

import os
import secrets
import threading
import time

BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_EPOCH_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
_SEQ_BITS = 12
_WORKER_BITS = 10


class CompletionIds:
    """63-bit ids: 41 bits of milliseconds, 10 bits of worker, 12 bits of sequence.

    Unique across workers (the worker part is the low bits of the process id, re-read after
    fork: granian's workers of one host get distinct pids) and restarts (time moves on).
    When the sequence wraps within a millisecond the id moves on to the next millisecond.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = -1
        self._worker = 0
        self._last_ms = 0
        self._seq = 0

    def next(self) -> int:
        with self._lock:
            if self._pid != os.getpid():
                self._pid = os.getpid()
                self._worker = self._pid & ((1 << _WORKER_BITS) - 1)
            now = int(time.time() * 1000) - _EPOCH_MS
            if now <= self._last_ms:
                now = self._last_ms
                self._seq = (self._seq + 1) & ((1 << _SEQ_BITS) - 1)
                if self._seq == 0:
                    now += 1
            else:
                self._seq = 0
            self._last_ms = now
            return (now << (_WORKER_BITS + _SEQ_BITS)) | (self._worker << _SEQ_BITS) | self._seq


completion_ids = CompletionIds()


def random_id(prefix: str, length: int = 20) -> str:
    """``prefix`` + ``length`` random base62 characters (account ids, reservation ids).

    One ``urandom`` read per id (it runs per request): 8 bytes more than the characters
    need keeps the modulo bias below 2**-64."""
    n = int.from_bytes(secrets.token_bytes(length * 6 // 8 + 8))
    chars = []
    for _ in range(length):
        n, digit = divmod(n, 62)
        chars.append(BASE62[digit])
    return prefix + "".join(chars)


def random_base62(length: int) -> str:
    """``length`` random base62 characters, each drawn on its own (key secrets)."""
    return "".join(secrets.choice(BASE62) for _ in range(length))


def base62(number: int, width: int) -> str:
    """``number`` in base62, ``width`` characters (the high digits beyond it are dropped)."""
    chars = []
    for _ in range(width):
        number, rem = divmod(number, 62)
        chars.append(BASE62[rem])
    return "".join(reversed(chars))


def hex_id(prefix: str, random_bytes: int) -> str:
    """``prefix`` + ``random_bytes`` random bytes in hex (ids made per response and item,
    as OpenAI's are: a fifth of ``random_id``'s cost)."""
    return prefix + secrets.token_hex(random_bytes)


def hex_ids(*prefixes: str, random_bytes: int) -> list[str]:
    """One ``hex_id`` per prefix, from one ``urandom`` read (a system call each saved)."""
    width = 2 * random_bytes
    digits = secrets.token_hex(random_bytes * len(prefixes))
    return [prefix + digits[i * width : (i + 1) * width] for i, prefix in enumerate(prefixes)]
