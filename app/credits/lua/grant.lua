--[[
grant: add credits to one pool of an account, once per grant id (a ledger entry's id: the
entry is durable before this runs, app.accounts.ledger). Earned grants roll the whole earned
pool's expiry to now + earned_ttl; an optional daily limit counts them. A grant pays the
account's debt first (lib/debt.lua): only what is left of it stays in the pools.

KEYS[1]  account hash        <p>:{sN}:acct:<pid>       (status read with KEYS[5])
KEYS[2]  grant marker        <p>:{sN}:grant:<grant_id>   (idempotency)
KEYS[3]  daily counter       <p>:{sN}:spot:<pid>:<day>   (only read when daily_limit > 0)
KEYS[4]  events stream       <p>:{sN}:events             (an expiry event when earned lapses)
KEYS[5]  intent marker       <p>:{sN}:intent:<intent_id> (optional: a spotlight intent the
                             grant consumes; a grant that finds it taken grants nothing,
                             nor one whose account is disabled)

ARGV[1]  now                 unix seconds
ARGV[2]  pool                earned | purchased
ARGV[3]  credits             > 0
ARGV[4]  earned_ttl          seconds an earned pool lives after its last grant
ARGV[5]  daily_limit         grants allowed per day on KEYS[3]; 0 = no limit
ARGV[6]  marker_ttl          seconds the grant marker lives
ARGV[7]  counter_ttl         seconds a new daily counter lives
ARGV[8]  pid                 the account (named in an expiry event)
ARGV[9]  intent_ttl          (with KEYS[5]) seconds the marker lives: the intent's life left

Returns {status, earned, earned_exp, purchased, granted_at, debt, paid}   (the pools and the
debt after the call; paid: what the grant paid of the debt)
  0 OK                granted_at = now
  3 ACCOUNT_MISSING   (zeros)
  6 DUPLICATE         grant id seen before: nothing granted; granted_at and paid are the
                      first call's (the marker holds "<granted_at>:<paid>"; a marker of an
                      older svc holds granted_at alone: paid 0)
 19 ACCOUNT_DISABLED  (with KEYS[5]) the account's status is disabled (lib/keys.lua
                      account_refusal): nothing granted, the intent left; granted_at = 0
 18 INTENT_USED       KEYS[5] was consumed by an earlier grant: nothing granted; granted_at = 0
  9 DAILY_LIMIT       the day's limit is reached: nothing granted; granted_at = 0
The checks run in that order: a grant id seen before answers DUPLICATE even when its intent
is consumed (a network's retry of a rewarded view); only a grant applied consumes the intent.
The status is read here, in the same call that grants, so a disable that lands while a
view's callback is on its way refuses it; grants without an intent (purchases, operators'
grants) are the operator's own and apply to a disabled account too.
A grant that finds the earned pool expired zeroes it (before adding), bumps the pool's
generation (egen: reservations still holding credits of the old pool let them lapse) and
appends, in the same call, {kind expire, acct, credits (what lapsed), ts} to KEYS[4]
(lib/earned.lua record_lapse: EventField KIND, ACCOUNT, CREDITS, TS).
A grant that brings the balance back to the account's low-balance threshold or above
clears the mark settle set when it fell below (see settle.lua), so the next fall is told.
A bad ARGV raises "svc bad argument: <name>" before anything is written (lib/checks.lua).
]]
--- @include "lib/checks.lua"
--- @include "lib/keys.lua"
--- @include "lib/earned.lua"
--- @include "lib/debt.lua"
local now = count(1, 'now')
local pool = one_of(2, 'pool', {earned = true, purchased = true})
local credits = count(3, 'credits')
local earned_ttl = count(4, 'earned_ttl')
local limit = count(5, 'daily_limit')
local marker_ttl = count(6, 'marker_ttl')
local counter_ttl = count(7, 'counter_ttl')
local pid = label(8, 'pid')
if credits == 0 or marker_ttl == 0 or counter_ttl == 0 then refuse('credits/ttl') end
local intent = KEYS[5]
local intent_ttl = 0
if intent then
  intent_ttl = count(9, 'intent_ttl')
  if intent_ttl == 0 then refuse('intent_ttl') end
end

local acct = redis.call('HMGET', KEYS[1], 'earned', 'earned_exp', 'purchased', 'egen', 'status',
  'debt')
if not acct[3] then return {3, 0, 0, 0, 0, 0, 0} end
local earned, earned_exp, purchased = tonumber(acct[1]), tonumber(acct[2]), tonumber(acct[3])
local egen = tonumber(acct[4] or '0')
local debt = tonumber(acct[6] or '0')
local expired = earned_expired(earned_exp, now)
if expired then earned, earned_exp = 0, 0 end
local marker = redis.call('GET', KEYS[2])
if marker then
  local at, paid_then = string.match(marker, '^(%d+):?(%d*)$')
  return {6, earned, earned_exp, purchased, tonumber(at), debt, tonumber(paid_then) or 0}
end
local refusal = intent and account_refusal(acct[5])
if refusal then return {refusal, earned, earned_exp, purchased, 0, debt, 0} end
if intent and redis.call('EXISTS', intent) == 1 then
  return {18, earned, earned_exp, purchased, 0, debt, 0}
end
if limit > 0 and tonumber(redis.call('GET', KEYS[3]) or '0') >= limit then
  return {9, earned, earned_exp, purchased, 0, debt, 0}
end

-- writes start here
if expired then
  record_lapse(KEYS[4], pid, tonumber(acct[1]), now)
  zero_earned(KEYS[1], egen)
end
if pool == 'earned' then
  earned = earned + credits
  earned_exp = now + earned_ttl
  redis.call('HSET', KEYS[1], 'earned', earned, 'earned_exp', earned_exp)
else
  purchased = redis.call('HINCRBY', KEYS[1], 'purchased', credits)
end
if limit > 0 and redis.call('INCR', KEYS[3]) == 1 then
  redis.call('EXPIRE', KEYS[3], counter_ttl)
end
local paid
earned, purchased, debt, paid = pay_debt(KEYS[1], earned, purchased, debt)
redis.call('SET', KEYS[2], now .. ':' .. paid, 'EX', marker_ttl)
if intent then redis.call('SET', intent, now, 'EX', intent_ttl) end
local mark = redis.call('HMGET', KEYS[1], 'low', 'lowf')
if mark[2] and earned + purchased >= tonumber(mark[1] or '0') then
  redis.call('HDEL', KEYS[1], 'lowf')  -- back above the threshold: the next drop is told
end
return {0, earned, earned_exp, purchased, now, debt, paid}
