--[[
take_back: take credits back from an account, once per ledger entry id (a refund, a dispute,
an operator's debit: the entry is durable before this runs, app.accounts.ledger). The credits
come out of the purchased pool first, then the earned one; what the pools lack becomes the
account's debt (lib/debt.lua), so no pool ever goes below 0.

KEYS[1]  account hash        <p>:{sN}:acct:<pid>
KEYS[2]  entry marker        <p>:{sN}:grant:<entry_id>   (idempotency; grants' namespace: one
                             entry id is a grant or a take-back, never both)
KEYS[3]  events stream       <p>:{sN}:events             (an expiry event when earned lapses)

ARGV[1]  now                 unix seconds
ARGV[2]  credits             > 0: what to take
ARGV[3]  marker_ttl          seconds the entry marker lives
ARGV[4]  pid                 the account (named in an expiry event)

Returns {status, earned, earned_exp, purchased, debt, taken, owed, applied_at}   (the pools
and the debt after the call; taken: out of the pools; owed: added to the debt; taken + owed
= credits)
  0 OK                applied_at = now
  3 ACCOUNT_MISSING   (zeros): nothing taken
  6 DUPLICATE         the entry was applied before: nothing taken; taken, owed and
                      applied_at are the first call's (the marker holds
                      "<applied_at>:<taken>:<owed>")
An earned pool found expired is zeroed first, its lapse recorded as every script does
(lib/earned.lua record_lapse). A bad ARGV raises "svc bad argument: <name>" before anything
is written (lib/checks.lua).
]]
--- @include "lib/checks.lua"
--- @include "lib/earned.lua"
local now = count(1, 'now')
local credits = count(2, 'credits')
local marker_ttl = count(3, 'marker_ttl')
local pid = label(4, 'pid')
if credits == 0 or marker_ttl == 0 then refuse('credits/marker_ttl') end

local acct = redis.call('HMGET', KEYS[1], 'earned', 'earned_exp', 'purchased', 'egen', 'debt')
if not acct[3] then return {3, 0, 0, 0, 0, 0, 0, 0} end
local earned, earned_exp, purchased = tonumber(acct[1]), tonumber(acct[2]), tonumber(acct[3])
local debt = tonumber(acct[5] or '0')
local expired = earned_expired(earned_exp, now)
if expired then earned, earned_exp = 0, 0 end
local marker = redis.call('GET', KEYS[2])
if marker then
  local at, taken, owed = string.match(marker, '^(%d+):(%d+):(%d+)$')
  return {6, earned, earned_exp, purchased, debt, tonumber(taken), tonumber(owed), tonumber(at)}
end

-- writes start here
if expired then
  record_lapse(KEYS[3], pid, tonumber(acct[1]), now)
  zero_earned(KEYS[1], tonumber(acct[4] or '0'))
end
local from_purchased = math.min(purchased, credits)
local from_earned = math.min(earned, credits - from_purchased)
local owed = credits - from_purchased - from_earned
purchased, earned, debt = purchased - from_purchased, earned - from_earned, debt + owed
-- earned_exp stays: credits an open reservation holds of this pool come back to it at settle
redis.call('HSET', KEYS[1], 'earned', earned, 'purchased', purchased, 'debt', debt)
local taken = from_purchased + from_earned
redis.call('SET', KEYS[2], now .. ':' .. taken .. ':' .. owed, 'EX', marker_ttl)
return {0, earned, earned_exp, purchased, debt, taken, owed, now}
