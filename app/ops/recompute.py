"""``rebuild-redis --force``'s correction of a kept account whose balance (pools + holds) is
not its ledger's (what ``reconcile`` flags: a hash a grant opened empty after Redis lost its
data, say), confirmed before it is written.

A spend, a settle or an expiry moves Redis and the ledger alike, so the difference measured
on one consistent read still holds later (correct_pools.lua). A grant does not: it writes
the ledger and Redis at different moments (an operator's purchase: the store's row first,
then grant.lua; a spotlight reward: grant.lua first, then the row). A read between its two
writes sees a difference of the grant's credits that the grant's second write removes:
correcting it would take the reward away, or add the purchase twice. So each flagged
account's difference is measured on two consistent reads ``CONFIRM_S`` apart and corrected
only when it is the same in both and no grant row of the account appeared since the first
(a grant in flight finishes within that time); the others are named in the report as
changing, for the operator to run ``--force`` again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import msgspec

from app.credits.money import Money
from app.credits.outcomes import ScriptStatus
from app.ops.shard_state import ShardRead, Shards, Sums, consistent_shards
from app.store import Store

CONFIRM_S = 1.5  # between the two reads: longer than a grant's two writes take apart


class Difference(msgspec.Struct, frozen=True):
    """What a kept account's pools lack of its ledger's (below 0: hold beyond it)."""

    credits: int
    earned_part: int  # of |credits|, the earned pool's
    earned_exp: int  # when the ledger's earned pool expires (0: empty)
    granted: int  # the ledger's grants' credits, as read


class Corrected(msgspec.Struct):
    accounts: int = 0
    credits: int = 0
    changing: list[str] = msgspec.field(default_factory=list)  # not confirmed: run again


def restored_pools(sums: Sums, held: tuple[int, int]) -> tuple[int, int, int]:
    """(earned, earned_exp, purchased) an account's hash should hold by its ledger, less
    what its open reservations hold. Rollups from before the earned split was recorded
    count as purchased; the split is clamped so that neither pool is negative."""
    total = max(0, sums.total - held[0] - held[1])
    earned = sums.granted_earned - sums.used_earned - sums.expired - held[0]
    earned = min(max(0, earned), total)
    exp = (sums.last_earned_expiry or 0) if earned > 0 else 0
    return earned, exp, total - earned


def difference(state: ShardRead, pid: str, sums: Sums) -> Difference | None:
    """The account's difference on one read; None when there is none to write (reconcile
    flags nothing, or the ledger is below what is held: the pools cannot go below 0)."""
    if pid not in state.pools or state.debts.get(pid):
        return None  # an account in debt is left to the operator (reconcile names it)
    read_e, read_p = state.pools[pid]
    held = state.held.get(pid, (0, 0))
    if sums.total == read_e + read_p + sum(held):
        return None
    earned, exp, purchased = restored_pools(sums, held)
    credits = earned + purchased - read_e - read_p
    if not credits:
        return None
    shift = earned - read_e if credits > 0 else read_e - earned
    part = min(max(0, shift), abs(credits))
    return Difference(credits, part, exp, sums.granted_earned + sums.granted_purchased)


def differences(shards: Shards, pids: Iterable[str]) -> dict[str, Difference]:
    """The difference of each of ``pids`` that Redis holds and that has one."""
    wanted = set(pids)
    found = {}
    for state, shard_sums in shards.values():
        for pid, sums in shard_sums.items():
            if pid in wanted and (diff := difference(state, pid, sums)) is not None:
                found[pid] = diff
    return found


async def correct_confirmed(
    money: Money,
    store: Store,
    first: dict[str, Difference],
    *,
    now: float,
    earned_ttl_s: int,
    confirm_s: float = CONFIRM_S,
) -> Corrected:
    """Correct each account of ``first`` (its difference on the first read) whose
    difference a second read ``confirm_s`` later finds the same, with no grant row of it
    added or taken back since the first; name the others that still differ as changing
    (one the second read finds without a difference needs nothing)."""
    done = Corrected()
    if not first:
        return done
    await asyncio.sleep(confirm_s)
    shards, _known = await consistent_shards(
        money.redis, money.layout, store, set(first), earned_ttl_s
    )
    second = differences(shards, first)
    for pid, diff in sorted(first.items()):
        again = second.get(pid)
        if again is None:
            continue  # nothing to correct now (a grant in flight at the first read landed)
        # the rows as they are now, after the second read: a grant whose row lands after
        # it changes the ledger's grants from both reads'
        granted = sum(
            g.credits - g.debt_change
            for g in await store.list_grants(pid)
            if g.applied_at is not None
        )
        if again.credits != diff.credits or granted != diff.granted:
            done.changing.append(pid)
            continue
        written = await money.correct_pools(
            pid,
            again.credits,
            earned_part=again.earned_part,
            earned_exp=again.earned_exp,
            now=now + confirm_s,
        )
        if written.status is ScriptStatus.OK:
            done.accounts += 1
            done.credits += again.credits
    return done
