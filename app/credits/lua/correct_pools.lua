--[[
correct_pools: add to an account's pools what its durable ledger says they lack (or take
what they hold beyond it): rebuild-redis --force, for an account reconcile flags (a hash a
grant opened empty after Redis lost its data, say).

The caller reads Redis and the ledger at one instant and sends the difference. A reserve,
settle, sweep, expiry or grant that runs between that read and this call moves Redis and the
ledger alike (a hold moves credits from the pools into the hold, a settle's usage event
counts on the ledger what left the hold, an expiry's event what left the earned pool), so
the difference still holds: adding it needs no compare-and-set, and a busy account is
corrected as surely as an idle one.

KEYS[1]  account hash        <p>:{sN}:acct:<pid>       earned, earned_exp, purchased, egen
KEYS[2]  events stream       <p>:{sN}:events             (an expiry event when earned lapses)
ARGV[1]  sign                add | take
ARGV[2]  credits             the difference, > 0
ARGV[3]  earned_part         of credits, the part that is the earned pool's (<= credits)
ARGV[4]  earned_exp          when the ledger's earned pool expires (0 = empty pool)
ARGV[5]  now                 unix seconds
ARGV[6]  pid                 the account (named in an expiry event)

Adding: earned_part to the earned pool (its expiry the later of the two), the rest to
purchased. Taking: earned_part from earned, the rest from purchased; what a pool lacks
(spent since the read) comes from the other; never below 0 (what the pools lack of credits
is left: the ledger is below zero, the report names it).
An earned pool past its expiry is zeroed first, as grant.lua does (lib/earned.lua): its
generation bumped and {kind expire, acct, credits (what lapsed), ts} appended to KEYS[2] in
the same call, so an add neither revives the lapsed credits nor loses their expiry event.
Returns {0 OK, earned, purchased} (the pools after the call), {3 ACCOUNT_MISSING, 0, 0}
(no balance hash: nothing written; open_account restores one).
The status and the low-balance threshold are left as they are; the earned pool's generation
only moves when the pool lapsed.
A bad ARGV raises "svc bad argument: <name>" before anything is written (lib/checks.lua).
]]
--- @include "lib/checks.lua"
--- @include "lib/earned.lua"
local sign = one_of(1, 'sign', {add = true, take = true})
local credits = count(2, 'credits')
local part = count(3, 'earned_part')
local exp = count(4, 'earned_exp')
local now = count(5, 'now')
local pid = label(6, 'pid')
if credits == 0 or part > credits then refuse('credits/earned_part') end
local acct = redis.call('HMGET', KEYS[1], 'earned', 'earned_exp', 'purchased', 'egen')
if not acct[3] then return {3, 0, 0} end
local earned, earned_exp, purchased = tonumber(acct[1] or '0'), tonumber(acct[2] or '0'),
  tonumber(acct[3])

-- writes start here
if earned_expired(earned_exp, now) then
  record_lapse(KEYS[2], pid, earned, now)
  zero_earned(KEYS[1], tonumber(acct[4] or '0'))
  earned, earned_exp = 0, 0
end
if sign == 'add' then
  earned = earned + part
  purchased = purchased + credits - part
  if part > 0 and exp > earned_exp then earned_exp = exp end
else
  local from_earned = math.min(part, earned)
  local from_purchased = math.min(credits - from_earned, purchased)
  local rest = credits - from_earned - from_purchased
  from_earned = from_earned + math.min(rest, earned - from_earned)
  earned, purchased = earned - from_earned, purchased - from_purchased
end
if earned == 0 then earned_exp = 0 end
redis.call('HSET', KEYS[1], 'earned', earned, 'earned_exp', earned_exp, 'purchased', purchased)
return {0, earned, purchased}
