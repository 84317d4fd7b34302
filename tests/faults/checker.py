"""The checkers of a history run (issue 48 item 3), read once the nemeses have stopped and
svc has repaired: the history (``tests.faults.history``) beside the durable ledger, the
durable usage rollups and Redis. Each returns what it found, so the test asserts and the
long run (``make jepsen``) reports the figures."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field

import redis as redis_sync

from app.credits import idempotency
from app.kv.fields import AccountField
from app.store import GrantRecord, open_store
from tests.faults.history import OK, History, Op
from tests.faults.invariants import KEYS, open_reservations

KIND_OF = {"purchase": "purchase", "reward": "reward", "grant": "grant", "debit": "debit"}


@dataclass
class Findings:
    lost: list[str] = field(default_factory=list)  # acknowledged money in or out not applied
    doubled: list[str] = field(default_factory=list)  # a transaction or key applied twice
    unbalanced: list[str] = field(default_factory=list)  # conservation broken
    phantom: list[str] = field(default_factory=list)  # entries no operation asked for
    overspend: dict[str, int] = field(default_factory=dict)  # pid -> credits past balance
    served_free: int = 0  # credits clients were told they used that no ledger charges
    charged_unseen: int = 0  # charged credits of requests whose client saw no total
    counts: Counter[str] = field(default_factory=Counter)

    @property
    def largest_overspend(self) -> int:
        return max(self.overspend.values(), default=0)


def entry_id_of(op: Op) -> str | None:
    """The ledger entry id an operation's retries all share (None: found by reference)."""
    if op.kind == "grant":
        return idempotency.grant_id(op.pid, op.ref)
    if op.kind == "debit":
        return idempotency.grant_id(op.pid, op.ref, kind="debit")
    return None


def _ledgers(database_url: str, pids: list[str]) -> dict[str, tuple[list[GrantRecord], int]]:
    """Each account's ledger entries and its durable usage credits (live)."""

    async def read() -> dict[str, tuple[list[GrantRecord], int]]:
        store = open_store(database_url)
        try:
            out = {}
            for pid in pids:
                usage = await store.usage_totals(pid)
                out[pid] = (await store.list_grants(pid), usage.credits if usage else 0)
            return out
        finally:
            await store.close()

    return asyncio.run(read())


def check(history: History, r: redis_sync.Redis, database_url: str, pids: list[str]) -> Findings:
    found = Findings()
    assert open_reservations(r) == 0, "reservations left open: wait for the sweeper first"
    ledgers = _ledgers(database_url, pids)
    by_ref: dict[tuple[str, str], list[GrantRecord]] = {}
    by_id: dict[str, GrantRecord] = {}
    for entries, _ in ledgers.values():
        for entry in entries:
            by_id[entry.grant_id] = entry
            if entry.reference:
                by_ref.setdefault((entry.source, entry.reference), []).append(entry)
    for (source, ref), entries in by_ref.items():
        if source != "operator" and len(entries) > 1:  # a store's or a network's id: once
            found.doubled.append(f"{source}:{ref} x{len(entries)}")
    asked: set[str] = set()
    for op in history.ops:
        if op.kind in KIND_OF:
            asked.update(_check_op(found, r, op, _entries_of(op, by_id, by_ref)))
    for pid in pids:
        entries, used = ledgers[pid]
        for entry in entries:
            if entry.grant_id not in asked and entry.source not in ("operator", "dev"):
                found.phantom.append(f"{entry.grant_id} ({entry.source})")
        _conserve(found, r, pid, entries, used, history)
    return found


def _check_op(found: Findings, r: redis_sync.Redis, op: Op, entries: list[GrantRecord]) -> set[str]:
    """An operation's entries: at most one, and exactly one, applied and in Redis, when it
    was acknowledged. Returns their ids."""
    applied = [e for e in entries if e.applied_at is not None]
    found.counts[f"{op.kind}:{op.status}"] += 1
    if len(entries) > 1:
        found.doubled.append(f"{op.kind} {op.ref}: {len(entries)} entries")
    if op.status != OK or (op.kind == "reward" and op.value == 0):
        pass  # failed, unknown or not rewarded: at most once is all that is owed
    elif len(applied) != 1:
        found.lost.append(f"{op.kind} {op.ref} of {op.pid}: acknowledged, not applied")
    elif not r.exists(KEYS.grant_marker(KEYS.shard(op.pid), applied[0].grant_id)):
        found.lost.append(f"{op.kind} {op.ref} of {op.pid}: applied, gone from Redis")
    return {e.grant_id for e in entries}


def _entries_of(
    op: Op, by_id: dict[str, GrantRecord], by_ref: dict[tuple[str, str], list[GrantRecord]]
) -> list[GrantRecord]:
    entry_id = entry_id_of(op)
    if entry_id is not None:
        return [by_id[entry_id]] if entry_id in by_id else []
    source = "stripe" if op.kind == "purchase" else "signed"
    refs = [op.ref, op.ref.replace("cs_", "pi_", 1)] if op.kind == "purchase" else [op.ref]
    return [e for ref in refs for e in by_ref.get((source, ref), [])]


def _conserve(
    found: Findings,
    r: redis_sync.Redis,
    pid: str,
    entries: list[GrantRecord],
    used: int,
    history: History,
) -> None:
    """money in − money out (the applied entries' asks) − usage charged = available − debt,
    and how far past its balance the account was served."""
    shard = KEYS.shard(pid)
    fields = [AccountField.EARNED, AccountField.PURCHASED, AccountField.DEBT]
    earned, purchased, debt = (int(v or 0) for v in r.hmget(KEYS.account(shard, pid), fields))
    if min(earned, purchased, debt) < 0:
        found.unbalanced.append(f"{pid}: a negative pool or debt {earned} {purchased} {debt}")
    applied = [e for e in entries if e.applied_at is not None]
    asks = sum(e.credits - e.debt_change for e in applied)
    if asks - used != earned + purchased - debt:
        found.unbalanced.append(
            f"{pid}: ledger {asks} − used {used} ≠ pools {earned + purchased} − debt {debt}"
        )
    seen = [o for o in history.ops if o.pid == pid and o.kind == "completion"]
    told = sum(o.value for o in seen if o.status == OK)
    if told > used:
        found.served_free += told - used
    # the debt usage left: what the account owes beyond what its take-backs left owed
    owed_by_entries = sum(e.debt_change for e in applied)
    found.overspend[pid] = max(0, debt - max(owed_by_entries, 0))


def entry_of(op: Op, database_url: str) -> GrantRecord:
    """The ledger entry an operation made (it made exactly one)."""
    entries, _ = _ledgers(database_url, [op.pid])[op.pid]
    by_id = {e.grant_id: e for e in entries}
    by_ref: dict[tuple[str, str], list[GrantRecord]] = {}
    for e in entries:
        if e.reference:
            by_ref.setdefault((e.source, e.reference), []).append(e)
    (entry,) = _entries_of(op, by_id, by_ref)
    return entry
