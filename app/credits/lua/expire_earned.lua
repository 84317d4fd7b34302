--[[
expire_earned: zero an account's earned pool once it has expired, as reserve, settle and
grant do when they meet it; for an account nothing touches (the webhook scanner calls it,
so the expiry is recorded, and told, when it happens). Atomic.

KEYS[1]  account hash        <p>:{sN}:acct:<pid>
KEYS[2]  events stream       <p>:{sN}:events             (the expiry event)

ARGV[1]  now                 unix seconds
ARGV[2]  pid                 the account (named in the expiry event)

Returns {status, lapsed}
  0 OK                lapsed = the earned credits that lapsed (0: the pool was not expired,
                      or empty; nothing changed)
  3 ACCOUNT_MISSING
The pool is zeroed, its generation (egen) bumped and {kind expire, acct, credits, ts}
appended to KEYS[2] (lib/earned.lua record_lapse: EventField KIND, ACCOUNT, CREDITS, TS), as
in the other scripts that meet an expired pool.
A bad ARGV raises "svc bad argument: <name>" before anything is written (lib/checks.lua).
]]
--- @include "lib/checks.lua"
--- @include "lib/earned.lua"
local now = count(1, 'now')
local pid = label(2, 'pid')
local acct = redis.call('HMGET', KEYS[1], 'earned', 'earned_exp', 'purchased', 'egen')
if not acct[3] then return {3, 0} end
local earned_exp = tonumber(acct[2] or '0')
if not earned_expired(earned_exp, now) then return {0, 0} end
local lapsed = tonumber(acct[1] or '0')
zero_earned(KEYS[1], tonumber(acct[4] or '0'))
record_lapse(KEYS[2], pid, lapsed, now)
return {0, lapsed}
