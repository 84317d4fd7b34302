"""Every Redis key name svc uses, built in one place.

All keys of one account carry the hash tag of its shard (``{sN}``), so each script touches
a single cluster slot. Only the digest → identity mapping and the per-address throttle
counters have no tag: they are used before the account is known.
"""

from __future__ import annotations

import zlib
from typing import Any


def as_text(value: Any) -> str:
    """A Redis reply (bytes, or str with decode_responses) as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


def shard_of(account_pid: str, shards: int) -> int:
    """Stable shard of an account (CRC32, so every process and language agrees)."""
    return zlib.crc32(account_pid.encode()) % shards


_ADDRESS_CHARS = 64  # an IPv6 address with its zone fits; anything longer is not an address


class KeySpace:
    """Key names under one prefix (default ``svc``)."""

    def __init__(self, prefix: str, shards: int) -> None:
        self.prefix = prefix
        self.shards = shards

    def shard(self, account_pid: str) -> int:
        return shard_of(account_pid, self.shards)

    def all_shards(self) -> range:
        """Every shard, in order (the sweeper, the flusher and the gauges walk them all)."""
        return range(self.shards)

    def _tagged(self, shard: int, rest: str) -> str:
        return f"{self.prefix}:{{s{shard}}}:{rest}"

    def digest(self, key_digest: str) -> str:
        """string: identity of a key secret's digest (``pid kid environment``)."""
        return f"{self.prefix}:kd:{key_digest}"

    def account(self, shard: int, pid: str) -> str:
        """hash: earned, earned_exp, purchased, status."""
        return self._tagged(shard, f"acct:{pid}")

    def api_key(self, shard: int, kid: str) -> str:
        """hash: the fields of ``KeyField``."""
        return self._tagged(shard, f"key:{kid}")

    def cap(self, shard: int, kid: str, day: str) -> str:
        """string: credits held + settled on a UTC day (``YYYYMMDD``) by a key lineage (the
        kid of its first key)."""
        return self._tagged(shard, f"cap:{kid}:{day}")

    @staticmethod
    def cap_held(cap_key: str) -> str:
        """string: the part of the cap counter ``cap_key`` (a ``cap`` name) still held by
        requests in flight; the rest is settled spend (reserve.lua, settle.lua). Named from
        the counter's own name, so it is in its slot and a reservation's ``cap_key`` names
        both."""
        return f"{cap_key}:held"

    def rate(self, shard: int, kid: str) -> str:
        """list: when a key lineage last started requests (reserve.lua's rate log)."""
        return self._tagged(shard, f"rl:{kid}")

    def idempotency(self, shard: int, pid: str, environment: str, key_digest: str) -> str:
        """hash: one Idempotency-Key of an account in one environment (``live``, ``test``, or
        ``operator`` for the admin API): fp, state, rid, body (reserve.lua)."""
        return self._tagged(shard, f"idem:{pid}:{environment}:{key_digest}")

    def reservation(self, shard: int, rid: str) -> str:
        """hash: one open reservation."""
        return self._tagged(shard, f"rsv:{rid}")

    def reservations(self, shard: int) -> str:
        """zset: open reservation ids scored by deadline (unix seconds)."""
        return self._tagged(shard, "rsv")

    def spotlight(self, shard: int, pid: str, day: str) -> str:
        """string: spotlight rewards granted to an account on a UTC day."""
        return self._tagged(shard, f"spot:{pid}:{day}")

    def failed_auths(self, address: str) -> str:
        """string: failed authentications of a client address in its current window (no
        hash tag: one key per script call, any slot)."""
        return f"{self.prefix}:authfail:{address[:_ADDRESS_CHARS]}"

    def failed_admin_tokens(self, address: str) -> str:
        """string: wrong admin tokens of a client address in its current window: a counter
        of their own, so wrong API keys from a shared address never lock the operator out
        (no hash tag)."""
        return f"{self.prefix}:adminfail:{address[:_ADDRESS_CHARS]}"

    def cold_auths(self, address: str) -> str:
        """string: a client address's cold-path key verifications in the current second."""
        return f"{self.prefix}:coldauth:{address[:_ADDRESS_CHARS]}"

    def spotlight_intent(self, shard: int, intent_id: str) -> str:
        """string: a spotlight intent its reward consumed (lives as long as the intent)."""
        return self._tagged(shard, f"intent:{intent_id}")

    def grant_marker(self, shard: int, grant_id: str) -> str:
        """string: a grant id already applied (idempotency)."""
        return self._tagged(shard, f"grant:{grant_id}")

    def usage_day(self, shard: int, pid: str, day: str) -> str:
        """hash: usage counters of an account on a UTC day, fields ``<env>:<counter>``."""
        return self._tagged(shard, f"use:{pid}:{day}")

    def usage_total(self, shard: int, pid: str) -> str:
        """hash: all-time usage counters of an account, fields ``<env>:<counter>``."""
        return self._tagged(shard, f"use:{pid}")

    def events(self, shard: int) -> str:
        """stream: usage and earned-credit expiry events, drained by the flusher."""
        return self._tagged(shard, "events")

    def flush_lease(self, shard: int) -> str:
        """string: the token of the flusher draining the shard's events (SET NX PX)."""
        return self._tagged(shard, "flush-lease")

    def webhook_scan_lease(self) -> str:
        """string: the token of the worker looking for time-based webhook events."""
        return f"{self.prefix}:webhook-scan-lease"

    def activity_prune_lease(self) -> str:
        """string: the token of the worker pruning old activity rows (SET NX PX)."""
        return f"{self.prefix}:activity-prune-lease"

    def admob_keys(self) -> str:
        """string: AdMob's verifier keys as last fetched (their JSON, EX at most 24 h), shared
        by every worker."""
        return f"{self.prefix}:admob-keys"

    def admob_keys_lease(self) -> str:
        """string: the token of the worker refetching AdMob's verifier keys for an unknown
        key id (SET NX PX: one refetch per interval across the workers)."""
        return f"{self.prefix}:admob-keys-lease"

    def google_consume_lease(self, order_id: str) -> str:
        """string: the token of the worker consuming a Google Play purchase (SET NX PX: one
        consume call per purchase while svc is credited it by several requests at once)."""
        return f"{self.prefix}:google-consume:{order_id}"

    def usage_epoch(self) -> str:
        """string: the first day (unix seconds at 00:00 UTC) whose usage counters this
        Redis holds completely; a Redis that lost its data starts a new epoch."""
        return f"{self.prefix}:usage-epoch"

    def group_usage_epoch(self) -> str:
        """string: the first day (as ``usage_epoch``) whose usage day hashes this Redis
        holds the per-key and per-model counters of completely (``GROUPS``: the days
        before it were counted by versions of settle that wrote none)."""
        return f"{self.prefix}:usage-groups-epoch"
