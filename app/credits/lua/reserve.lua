--[[
reserve: check a key and its account, then hold credits for one request. Atomic.
All checks come before the first write; nothing after the first write can fail.

KEYS[1]  account hash        <p>:{sN}:acct:<pid>       earned, earned_exp, purchased,
                                                       egen, status, debt
KEYS[2]  api key hash        <p>:{sN}:key:<kid>        acct, status, env, cap, exp, models,
                                                       rpm, mcr; used (set)
KEYS[3]  cap counter         <p>:{sN}:cap:<lineage>:<day>  credits held + settled today by the
                                                       key and the keys it was rotated from
KEYS[4]  reservation hash    <p>:{sN}:rsv:<rid>        (created here)
KEYS[5]  reservations zset   <p>:{sN}:rsv              rid scored by deadline
KEYS[6]  events stream       <p>:{sN}:events           (an expiry event when earned lapses; a
                                                       cap event when a threshold is crossed)
KEYS[7]  rate log            <p>:{sN}:rl:<lineage>     when the key's lineage last started
                                                       requests (see "Rate limit" below)
KEYS[8]  cap holds counter   <p>:{sN}:cap:<lineage>:<day>:held  the part of KEYS[3] still
                                                       held by requests in flight (see "Cap
                                                       holds" below)
KEYS[9]  idempotency record  <p>:{sN}:idem:<pid>:<environment>:<digest> (only with an
                                                       Idempotency-Key; see below)

ARGV[1]  now            unix seconds
ARGV[2]  rid            reservation id
ARGV[3]  pid            account the key must belong to
ARGV[4]  kid            key id
ARGV[5]  prompt_units   the prompt's token bound x the most a prompt token may cost (the
                        input price, or the cache-write price when higher: every prompt
                        token uncached, the worst case settle.lua may charge)
ARGV[6]  output_price   credits per 1,000 output tokens
ARGV[7]  max_out        output tokens wanted
ARGV[8]  min_out        fewest output tokens acceptable (= max_out when the client set max_tokens)
ARGV[9]  deadline       unix seconds after which the sweeper may refund the reservation
ARGV[10] cap_ttl        seconds a new cap counter lives
ARGV[11] alias          alias that serves the request
ARGV[12] requested      alias the client asked for
ARGV[13] day            UTC day of the request, YYYY-MM-DD
ARGV[14] now_ms         unix milliseconds (the rate limit's clock)
ARGV[15] models         the aliases the request needs the key to allow, space-separated (the
                        alias, or every alias svc-auto may route to)
ARGV[16] give_up_ms     Redis TIME in milliseconds after which the caller no longer waits for
                        this reply (its Redis timeout); 0 = no limit. A reserve that reaches
                        Redis later (Redis was paused, the command sat in a buffer) holds
                        nothing: the caller answered 503 and will not settle.
ARGV[17] api            the API the request came through (chat | responses | messages): on the
                        reservation, for settle's usage counters and event
ARGV[18] ceiling        the most credits the request may hold (its svc-max-credits header);
                        0 = none. The key's mcr is a ceiling too: the lower one holds.
ARGV[19] fingerprint    (with KEYS[9]) what identifies the request: its route and body, hashed
ARGV[20] idem_ttl       (with KEYS[9]) seconds the record lives

Returns {status, amount, out_tokens, balance}
  0 OK                    amount credits held, out_tokens the output cap, balance left after;
                          the key's `used` is set to now (its last use, for the key list)
  1 KEY_UNKNOWN           (other fields 0)
  2 KEY_REVOKED
  3 ACCOUNT_MISSING
  4 INSUFFICIENT_CREDITS  balance = credits available
  5 DAILY_CAP_EXCEEDED    balance = credits left under the key's cap today; the request
                          does not fit under the cap even beside the settled spend alone
  6 DUPLICATE             a reservation with this rid exists (the caller's own retry: rids are
                          random): amount and out_tokens are that reservation's, balance the
                          account's credits now; nothing changed
 10 RATE_LIMITED          the key started rpm requests in the last 60 s; balance = ms until
                          the oldest of them is 60 s old
 11 GAVE_UP               Redis ran this after give_up_ms; nothing changed
 12 KEY_EXPIRED           the key's exp (unix seconds, 0 or absent = never) is not after now
 13 MODEL_NOT_ALLOWED     the key's models (absent or '*' = all) lack one of ARGV[15]
 14 IDEMPOTENCY_REUSED    KEYS[9] records another request (another fingerprint)
 15 IDEMPOTENCY_RUNNING   KEYS[9] records this request, still running
 16 REPLAY                KEYS[9] records this request's response: the reply's 5th item is
                          its bytes; nothing is held or counted
 17 UNRECORDED            KEYS[9] records this request, finished without a response kept
 19 ACCOUNT_DISABLED      the account's status is disabled (lib/keys.lua account_refusal)
 20 CEILING_TOO_LOW       the request's ceiling (ARGV[18] or the key's mcr, the lower) cannot
                          hold its prompt and one output token: out_tokens = the ceiling,
                          balance = what the prompt alone may cost
 21 DAILY_CAP_HELD        the cap is taken by holds of requests in flight: the request would
                          fit beside the settled spend alone (retry when they settle);
                          balance = credits left under the key's cap now
 22 ACCOUNT_IN_DEBT       a live key's account owes credits (a refund or a debit found its
                          pools short: take_back.lua): balance = the debt; test keys, which
                          never touch the pools, are not refused
A bad ARGV raises "svc bad argument: <name>" before anything is written (lib/checks.lua).
Rate limit: a key with rpm > 0 starts at most rpm requests in any 60 s, in its lineage's
rate log KEYS[7] (lib/rate.lua; token counts start there too: rate_start.lua).
Cap holds: a key with a cap (>= 0) or a rate limit (rpm > 0) also adds its hold to KEYS[8]
and marks the reservation (ch 1), so settle takes the whole hold back out of KEYS[8]
whatever it charges: KEYS[3] less KEYS[8] is the settled spend. The rate-limited keys count
too because a lineage is shared by the keys a capped or rate-limited key makes
(app/keys/roles.py): an uncapped creator's streams in flight must not make its capped
child's refusal final. A key with neither is alone in its lineage: no KEYS[8] write. A
refusal by the cap reads KEYS[8] (only then) to tell 21 (the holds will go) from 5. Holds
made before KEYS[8] existed (or while the key had neither) count as settled until they
settle: 5, as before.
Idempotency: with KEYS[9], after the key's checks and before any limit, a record there
answers for the request (14-17 above). Without one, a reserve that holds credits writes it
{fp, state running, rid} for idem_ttl seconds, and names it on the reservation (idem) for
settle, which records the response or, when nothing was charged, deletes it.
Test keys ("env" = test) hold against the daily cap only; balances are not touched.
Ceiling: a request with a ceiling holds at most that; its output cap (the client's
max_tokens too) is lowered to what the ceiling affords beside the prompt's worst case.
Settle never charges more than the hold, so never more than the ceiling.
Output cap: a request that did not choose it (min_out < max_out) gets max_out lowered to
what the balance affords and to what a quarter of the key's cap left today affords (never
below min_out while the cap has room for it): one request cannot hold a small cap whole.
Cap thresholds: a reserve that takes the cap counter of a key with a cap > 0 from below to
at or above 50, 80 or 100 % of the cap appends {kind cap, acct, kid, level, cap, spent (the
counter after), counter (KEYS[3]'s name: the lineage and day), ts} to KEYS[6] for each
level crossed (webhooks tell it once per counter and level: the event id is made of both;
app.kv.stream_events.EventField: KIND, ACCOUNT, KEY, LEVEL, CAP, SPENT, COUNTER, TS).
A live reserve that finds the earned pool expired zeroes it, bumps the pool's generation
(egen) and appends, in the same call, {kind expire, acct, credits (what lapsed), ts} to
KEYS[6] (lib/earned.lua record_lapse), so the durable ledger sees it. The reservation records egen: settle lets the held
earned credits lapse when the pool they came from expired meanwhile.
]]
--- @include "lib/checks.lua"
--- @include "lib/keys.lua"
--- @include "lib/earned.lua"
--- @include "lib/rate.lua"
local now = count(1, 'now')
local rid = label(2, 'rid')
local pid = label(3, 'pid')
label(4, 'kid')
local prompt_units = count(5, 'prompt_units')
local output_price = count(6, 'output_price')
local max_out = count(7, 'max_out')
local min_out = count(8, 'min_out')
local deadline = count(9, 'deadline')
local cap_ttl = count(10, 'cap_ttl')
label(11, 'alias')
label(12, 'requested')
label(13, 'day')
local now_ms = count(14, 'now_ms')
local models = text(15, 'models')
local give_up_ms = count(16, 'give_up_ms')
one_of(17, 'api', {chat = true, responses = true, messages = true})
local ceiling = count(18, 'ceiling')
local idem = KEYS[9]
local fingerprint, idem_ttl = '', 0
if idem then
  fingerprint = label(19, 'fingerprint')
  idem_ttl = count(20, 'idem_ttl')
end
if min_out > max_out or cap_ttl == 0 then refuse('min_out/cap_ttl') end

local key = redis.call('HMGET', KEYS[2], 'acct', 'status', 'env', 'cap', 'exp', 'models', 'rpm',
  'mcr')
if not key[1] or key[1] ~= pid then return {1, 0, 0, 0} end

local function available_now()
  local a = redis.call('HMGET', KEYS[1], 'earned', 'earned_exp', 'purchased')
  local e = tonumber(a[1] or '0')
  local exp = tonumber(a[2] or '0')
  if earned_expired(exp, now) then e = 0 end
  return e + tonumber(a[3] or '0')
end

local held = redis.call('HMGET', KEYS[4], 'acct', 'amount', 'out')
if held[1] then
  if held[1] ~= pid then return {6, 0, 0, 0} end
  return {6, tonumber(held[2]), tonumber(held[3] or '0'), available_now()}
end
if gave_up(give_up_ms) then return {11, 0, 0, 0} end
local refused = key_refusal(key[2], key[5], now)
if refused then return {refused, 0, 0, 0} end
-- the account's pools and status, in the read every reserve makes anyway
local acct = redis.call('HMGET', KEYS[1], 'earned', 'earned_exp', 'purchased', 'egen', 'status',
  'debt')
if not acct[3] then return {3, 0, 0, 0} end
refused = account_refusal(acct[5])
if refused then return {refused, 0, 0, 0} end
local debt = tonumber(acct[6] or '0')
if debt > 0 and key[3] ~= 'test' then return {22, 0, 0, debt} end
if not models_allow(key[6], models) then return {13, 0, 0, 0} end

if idem then
  local state, body = recorded(idem, fingerprint)
  if state then return {state, 0, 0, 0, body} end
end

local function cost(out)
  local c = math.ceil((prompt_units + out * output_price) / 1000)
  if c < 1 then c = 1 end
  return c
end

local key_ceiling = tonumber(key[8] or '0')
if key_ceiling > 0 and (ceiling == 0 or key_ceiling < ceiling) then ceiling = key_ceiling end
if ceiling > 0 then
  if cost(1) > ceiling then return {20, 0, ceiling, cost(0)} end
  if cost(max_out) > ceiling then
    -- cost(1) fits, so at least one output token does
    max_out = math.floor((ceiling * 1000 - prompt_units) / output_price)
    if min_out > max_out then min_out = max_out end
  end
end

local rpm = tonumber(key[7] or '0')
-- full: the log holds rpm starts, so the oldest goes when this one is logged
local wait, full = rate_wait(KEYS[7], rpm, now_ms)
if wait > 0 then return {10, 0, 0, wait} end
local earned = tonumber(acct[1])
local earned_exp = tonumber(acct[2])
local purchased = tonumber(acct[3])
local egen = tonumber(acct[4] or '0')
local expired = earned_expired(earned_exp, now)
if expired then earned = 0 end
local available = earned + purchased
local live = key[3] == 'live'

local cap = tonumber(key[4])
local cap_left = -1
local counted = 0  -- KEYS[3]: held + settled today
if cap >= 0 then
  counted = tonumber(redis.call('GET', KEYS[3]) or '0')
  cap_left = cap - counted
  if cap_left < 0 then cap_left = 0 end
end

-- A request that left its output cap to svc (min_out < max_out) holds at most a share of
-- what the key's cap has left (but always enough for min_out, when that is left): holds at
-- the default output cap would otherwise take a small cap whole, and starve every other
-- request of the key while they run. A request that chose max_tokens gets it or a refusal.
local CAP_SHARE = 4
local cap_limit = cap_left
if cap_left >= 0 and min_out < max_out then
  cap_limit = math.max(math.floor(cap_left / CAP_SHARE), math.min(cost(min_out), cap_left))
end

-- limit: the most this request may hold (-1 = no limit: a test key without a cap)
local limit = -1
if live then limit = available end
if cap_limit >= 0 and (limit < 0 or cap_limit < limit) then limit = cap_limit end

local out = max_out
if limit >= 0 and cost(out) > limit then
  -- lower the output cap to what the limit affords
  out = -1
  if output_price > 0 then out = math.floor((limit * 1000 - prompt_units) / output_price) end
  if out > max_out then out = max_out end
  if out < min_out or cost(out) > limit then
    if live and cost(min_out) > available then return {4, 0, 0, available} end
    -- refused by the cap: final (5) unless the request fits beside the settled spend alone
    local held_now = tonumber(redis.call('GET', KEYS[8]) or '0')
    if held_now > counted then held_now = counted end
    if held_now > 0 and cost(min_out) <= cap - (counted - held_now) then
      return {21, 0, 0, cap_left}
    end
    return {5, 0, 0, cap_left}
  end
end

-- writes start here
local amount = cost(out)
local from_earned, from_purchased = 0, 0
local balance = available
if live then
  if expired then
    egen = zero_earned(KEYS[1], egen)
    record_lapse(KEYS[6], pid, tonumber(acct[1]), now)
  end
  from_earned = math.min(earned, amount)
  from_purchased = amount - from_earned
  if from_earned > 0 then redis.call('HINCRBY', KEYS[1], 'earned', -from_earned) end
  if from_purchased > 0 then redis.call('HINCRBY', KEYS[1], 'purchased', -from_purchased) end
  balance = available - amount
end

rate_log(KEYS[7], rpm, full, now_ms)
local spent = redis.call('INCRBY', KEYS[3], amount)
if spent == amount then redis.call('EXPIRE', KEYS[3], cap_ttl) end
local cap_held = 0  -- the reservation's ch: whether its hold is in KEYS[8]
-- a rate-limited key shares its lineage with the capped keys it makes: its holds are holds
-- for them (21, not 5); an uncapped, unlimited key is alone in its lineage (no INCRBY)
if cap >= 0 or rpm > 0 then
  cap_held = 1
  if redis.call('INCRBY', KEYS[8], amount) == amount then redis.call('EXPIRE', KEYS[8], cap_ttl) end
end
if cap > 0 then
  for _, level in ipairs({50, 80, 100}) do
    if (spent - amount) * 100 < level * cap and spent * 100 >= level * cap then
      redis.call('XADD', KEYS[6], '*', 'kind', 'cap', 'acct', pid, 'kid', ARGV[4],
        'level', level, 'cap', cap, 'spent', spent, 'counter', KEYS[3], 'ts', now)
    end
  end
end
redis.call('HSET', KEYS[4],
  'acct', pid, 'kid', ARGV[4], 'env', key[3], 'amount', amount, 'out', out,
  'fe', from_earned, 'fp', from_purchased, 'egen', egen, 'cap_key', KEYS[3],
  'alias', ARGV[11], 'requested', ARGV[12], 'day', ARGV[13],
  'deadline', deadline, 'created', now, 'api', ARGV[17], 'ch', cap_held)
redis.call('ZADD', KEYS[5], deadline, rid)
if idem then
  redis.call('HSET', KEYS[4], 'idem', idem)
  redis.call('HSET', idem, 'fp', fingerprint, 'state', 'running', 'rid', rid)
  redis.call('EXPIRE', idem, idem_ttl)
end
redis.call('HSET', KEYS[2], 'used', now)
return {0, amount, out, balance}
