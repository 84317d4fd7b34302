--[[
settle: close a reservation at its actual cost, exactly once. Atomic and idempotent:
whichever of the request's own settle and the sweeper comes second changes nothing.

KEYS[1]  reservation hash    <p>:{sN}:rsv:<rid>
KEYS[2]  reservations zset   <p>:{sN}:rsv
KEYS[3]  account hash        <p>:{sN}:acct:<pid>
KEYS[4]  cap counter         the reservation's cap_key (<p>:{sN}:cap:<lineage>:<day>)
KEYS[5]  usage day hash      <p>:{sN}:use:<pid>:<day of the reservation>
KEYS[6]  usage total hash    <p>:{sN}:use:<pid>
KEYS[7]  events stream       <p>:{sN}:events            usage event; expiry event
KEYS[8]  cap holds counter   the cap counter's held part (KEYS[4] .. ':held', reserve.lua's
                             KEYS[8]): a reservation marked ch 1 takes its whole hold out of it
KEYS[9]  idempotency record  the reservation's idem (only for a request with an
                             Idempotency-Key: see reserve.lua)

ARGV[1]  now                unix seconds
ARGV[2]  rid                reservation id
ARGV[3]  input_price        credits per 1,000 uncached prompt tokens (the alias's price)
ARGV[4]  prompt_tokens      all of them: uncached, cached (ARGV[14]) and cache writes (ARGV[15])
ARGV[5]  completion_tokens  all of them, reasoning (ARGV[16]) included
                            (the caller clamps each count to what the hold covers first:
                            app.chat.settlement; this script clamps the parts to the whole)
ARGV[6]  outcome            completed | client_disconnect | upstream_error | shutdown | swept |
                            released
                            (released: nothing was served; no usage is recorded)
ARGV[7]  only_if_expired    1 = sweeper: change nothing unless the deadline has passed
ARGV[8]  usage_ttl          seconds a usage day hash lives
ARGV[9]  served             what the request's activity row tells beyond its usage, as one
                            text the event carries as it is (app.kv.fields.Served: the
                            response's id, start, time to first output, duration, usage
                            source, the prices it is settled at); empty when there is
                            nothing to tell (the sweeper)
ARGV[10] give_up_ms         Redis TIME in milliseconds after which the caller no longer waits
                            for this reply (its Redis timeout); 0 = no limit (the sweeper). A
                            settle that reaches Redis later changes nothing: its stream has
                            already told the client that nothing was charged, and the sweeper
                            refunds the reservation whole at its deadline.
ARGV[11] cached_price       credits per 1,000 cached prompt tokens
ARGV[12] cache_write_price  credits per 1,000 prompt tokens written to the provider's cache
ARGV[13] output_price       credits per 1,000 completion tokens
ARGV[14] cached_tokens      the prompt tokens the upstream read from its cache
ARGV[15] cache_write_tokens the prompt tokens the upstream wrote to its cache (reported apart)
ARGV[16] reasoning_tokens   the completion tokens spent reasoning (recorded, priced as output)
ARGV[17] failovers          the upstreams that failed before their first piece, each followed
                            by the next candidate, before the one that served (0: the first
                            served; recorded, not priced)
ARGV[18] record             (with KEYS[9]) body: ARGV[19..21] are the response, with the
                            credits charged between 19 and 20 and the balance after between
                            20 and 21; unrecorded: the response was not kept (too large, cut)
ARGV[19..21]                (with record = body) the response's parts

The charge, here and nowhere else (docs/api.md, "Pricing"): nothing for released and swept;
otherwise, with cached = min(cached_tokens, prompt_tokens), writes = min(cache_write_tokens,
prompt_tokens - cached) and uncached = prompt_tokens - cached - writes,
  max(1, ceil((uncached x input + cached x cached_price + writes x cache_write_price
               + completion_tokens x output_price) / 1000))
and never more than the reservation holds (exact while the sum is below 2^53 in a Lua
double; a larger one is far beyond any hold, which caps the charge).
Returns {status, credits_used, balance}
  0 OK           credits_used charged, balance = account balance after
  7 NOT_FOUND    no such reservation (already settled or swept); nothing changed
  8 NOT_EXPIRED  only_if_expired and the deadline is still ahead; nothing changed
 11 GAVE_UP      Redis ran this after give_up_ms; nothing changed
A bad ARGV raises "svc bad argument: <name>" before anything is written (lib/checks.lua).
Spending is earned-first: the charge comes from the earned part of the hold first and the
rest returns to the pool it came from. Held earned credits whose pool expired meanwhile lapse
instead of returning: the pool is expired now, or its generation (egen, bumped by every
script that zeroes an expired pool) is not the one the reservation recorded — whatever
grants refilled the pool since.

Usage counters (unless outcome is released), in KEYS[5] and KEYS[6]: <env>:<counter> for
every request, and <env>:<api>:<counter> as well for a request that came through an API other
than chat (chat's part is the rest). Counters: requests, prompt_tokens, completion_tokens,
credits. In the day hash KEYS[5] only, per key and per model served (GET
/v1/usage?group_by=): <env>:key:<kid>:<counter> and <env>:model:<alias>:<counter>, counters
requests, tokens (prompt and completion together: all a group shows) and credits.

Idempotency (KEYS[9], when it still names this reservation): a settle that charged nothing
(released, swept, or 0 credits) deletes the record, so the request may be sent again;
otherwise the record becomes {state done, body} (the response, complete) or {state
unrecorded}, keeping its time to live.

Debt: what a live settle returns to the pools pays the account's debt first (lib/debt.lua;
a refund or a debit took the pools while the request held credits).

Low balance: an account hash with a threshold (low) marks the first settle that leaves the
balance below it (lowf) and appends {kind low, acct, balance, low, ts} to KEYS[7] (live
keys only). Only a grant that brings the balance back to the threshold clears the mark
(grant.lua), so the next fall is told again: a refund of credits held by requests in
flight, which may lift the balance above it for a moment while it is spent down, does not.

Events appended to KEYS[7] (the flusher makes them durable):
  usage   {rid, acct, kid, env, alias, requested, day, prompt_tokens, completion_tokens,
           credits, earned (the part of credits paid from the earned pool), outcome, ts, api,
           served; cached_tokens, cache_write_tokens, reasoning_tokens, failovers only
           when not 0}
           unless outcome is released; api is chat for a reservation that recorded none
  expire  {kind expire, acct, credits, ts} when a live settle finds the earned pool expired:
           credits = the pool it zeroes plus the earned part of the hold it does not return
  (app.kv.stream_events.EventField: RESERVATION, ACCOUNT, KEY, ENVIRONMENT, ALIAS, REQUESTED,
  DAY, PROMPT_TOKENS, COMPLETION_TOKENS, CREDITS, EARNED, OUTCOME, TS, API, SERVED,
  CACHED_TOKENS, CACHE_WRITE_TOKENS, REASONING_TOKENS, FAILOVERS; KIND, BALANCE,
  LOW for low; KIND, ACCOUNT, CREDITS, TS for expire)
]]
--- @include "lib/checks.lua"
--- @include "lib/earned.lua"
--- @include "lib/debt.lua"
local now = count(1, 'now')
local rid = label(2, 'rid')
local input_price = count(3, 'input_price')
local pt = count(4, 'prompt_tokens')
local ct = count(5, 'completion_tokens')
local outcome = one_of(6, 'outcome', {completed = true, client_disconnect = true,
  upstream_error = true, shutdown = true, swept = true, released = true})
local only_if_expired = one_of(7, 'only_if_expired', {['0'] = true, ['1'] = true}) == '1'
local usage_ttl = count(8, 'usage_ttl')
local served = text(9, 'served')
local give_up_ms = count(10, 'give_up_ms')
local idem = KEYS[9]
local record = ''
local cached_price = count(11, 'cached_price')
local write_price = count(12, 'cache_write_price')
local output_price = count(13, 'output_price')
local cached = math.min(count(14, 'cached_tokens'), pt)
local writes = math.min(count(15, 'cache_write_tokens'), pt - cached)
local reasoning = math.min(count(16, 'reasoning_tokens'), ct)
local failovers = count(17, 'failovers')
if idem then record = one_of(18, 'record', {body = true, unrecorded = true}) end

local r = redis.call('HMGET', KEYS[1], 'amount', 'fe', 'fp', 'env', 'deadline',
  'acct', 'kid', 'alias', 'requested', 'day', 'egen', 'api', 'ch')
if not r[1] then return {7, 0, 0} end
if only_if_expired and tonumber(r[5]) > now then return {8, 0, 0} end
if gave_up(give_up_ms) then return {11, 0, 0} end

local amount, held_earned, held_purchased = tonumber(r[1]), tonumber(r[2]), tonumber(r[3])
local used = 0
if outcome ~= 'released' and outcome ~= 'swept' then
  local units = (pt - cached - writes) * input_price + cached * cached_price
    + writes * write_price + ct * output_price
  used = math.max(1, math.ceil(units / 1000))
end
if used > amount then used = amount end
local env = r[4]

local acct = redis.call('HMGET', KEYS[3], 'earned', 'earned_exp', 'purchased', 'egen', 'debt')
local earned = tonumber(acct[1] or '0')
local earned_exp = tonumber(acct[2] or '0')
local egen = tonumber(acct[4] or '0')
local expired = earned_expired(earned_exp, now)
-- the pool the held earned credits came from is gone (reservations made before egen existed:
-- the pool was zeroed, earned_exp 0, since the reserve)
local pool_gone
if r[11] then pool_gone = tonumber(r[11]) ~= egen else pool_gone = earned_exp == 0 end

local used_earned = math.min(held_earned, used)

-- writes start here
if acct[3] and env == 'live' then
  local refund_earned = held_earned - used_earned
  local refund_purchased = held_purchased - (used - used_earned)
  local lapsed = 0
  if expired then
    zero_earned(KEYS[3], egen)
    lapsed = earned
  end
  if expired or pool_gone then
    lapsed = lapsed + refund_earned
  elseif refund_earned > 0 then
    redis.call('HINCRBY', KEYS[3], 'earned', refund_earned)
  end
  record_lapse(KEYS[7], r[6], lapsed, now)
  if refund_purchased > 0 then redis.call('HINCRBY', KEYS[3], 'purchased', refund_purchased) end
  -- a take-back while this request held credits left a debt: what comes back pays it
  local debt = tonumber(acct[5] or '0')
  if debt > 0 then
    local back = redis.call('HMGET', KEYS[3], 'earned', 'purchased')
    pay_debt(KEYS[3], tonumber(back[1]), tonumber(back[2]), debt)
  end
end

local unused = amount - used
if unused > 0 then
  local held_today = tonumber(redis.call('GET', KEYS[4]) or '0')
  if held_today > 0 then
    redis.call('SET', KEYS[4], math.max(0, held_today - unused), 'KEEPTTL')
  end
end
-- the hold is no longer in flight: what KEYS[4] keeps of it (used) is settled spend now.
-- Reservations made before the held counter existed (no ch) were never in it.
if r[13] == '1' and redis.call('DECRBY', KEYS[8], amount) <= 0 then redis.call('DEL', KEYS[8]) end

if outcome ~= 'released' then
  local api = r[12] or 'chat'
  local prefixes = {env .. ':'}
  if api ~= 'chat' then prefixes[2] = env .. ':' .. api .. ':' end
  for _, k in ipairs({KEYS[5], KEYS[6]}) do
    for _, f in ipairs(prefixes) do
      redis.call('HINCRBY', k, f .. 'requests', 1)
      redis.call('HINCRBY', k, f .. 'prompt_tokens', pt)
      redis.call('HINCRBY', k, f .. 'completion_tokens', ct)
      redis.call('HINCRBY', k, f .. 'credits', used)
    end
  end
  for _, f in ipairs({env .. ':key:' .. r[7] .. ':', env .. ':model:' .. r[8] .. ':'}) do
    redis.call('HINCRBY', KEYS[5], f .. 'requests', 1)
    redis.call('HINCRBY', KEYS[5], f .. 'tokens', pt + ct)
    redis.call('HINCRBY', KEYS[5], f .. 'credits', used)
  end
  redis.call('EXPIRE', KEYS[5], usage_ttl)
  local event = {'rid', rid, 'acct', r[6], 'kid', r[7], 'env', env, 'alias', r[8],
    'requested', r[9], 'day', r[10], 'prompt_tokens', pt, 'completion_tokens', ct,
    'credits', used, 'earned', used_earned, 'outcome', outcome, 'ts', now, 'api', api,
    'served', served}
  for _, part in ipairs({{'cached_tokens', cached}, {'cache_write_tokens', writes},
      {'reasoning_tokens', reasoning}, {'failovers', failovers}}) do
    if part[2] > 0 then
      event[#event + 1] = part[1]
      event[#event + 1] = part[2]
    end
  end
  redis.call('XADD', KEYS[7], '*', unpack(event))
end

redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], rid)

local after = redis.call('HMGET', KEYS[3], 'earned', 'purchased', 'low', 'lowf')
local earned_after = tonumber(after[1] or '0')
if expired then earned_after = 0 end
local balance = earned_after + tonumber(after[2] or '0')
local low = tonumber(after[3] or '-1')
if env == 'live' and low >= 0 and balance < low and not after[4] then
  redis.call('HSET', KEYS[3], 'lowf', 1)
  redis.call('XADD', KEYS[7], '*', 'kind', 'low', 'acct', r[6], 'balance', balance,
    'low', low, 'ts', now)
end

if idem and redis.call('HGET', idem, 'rid') == rid then
  if used == 0 or outcome == 'released' or outcome == 'swept' then
    redis.call('DEL', idem)
  elseif record == 'body' then
    redis.call('HSET', idem, 'state', 'done',
      'body', ARGV[19] .. string.format('%d', used) .. ARGV[20] ..
        string.format('%d', balance) .. ARGV[21])
  else
    redis.call('HSET', idem, 'state', 'unrecorded')
  end
end
return {0, used, balance}
