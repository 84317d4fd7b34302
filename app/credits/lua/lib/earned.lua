--[[
earned: the earned pool's expiry, one rule for every script that reads or zeroes the pool
(app.kv.fields.earned_expired is the same rule, for the reads made outside the scripts).

  earned_expired(earned_exp, now)  whether a pool whose earned_exp (unix seconds; 0 = an
                                   empty pool, which never expires) is that has expired at
                                   now (unix seconds): from that second on
  zero_earned(acct, egen)          zero the pool of the account hash acct and bump its
                                   generation (egen, read as egen): reservations holding
                                   credits of the old pool let them lapse at settlement;
                                   returns the new generation
  record_lapse(events, pid, credits, now)
                                   append the expiry event {kind expire, acct, credits, ts}
                                   (EventField KIND, ACCOUNT, CREDITS, TS) to the stream
                                   events, when credits > 0
]]
local function earned_expired(earned_exp, now)
  return earned_exp > 0 and now >= earned_exp
end

local function zero_earned(acct, egen)
  redis.call('HSET', acct, 'earned', 0, 'earned_exp', 0, 'egen', egen + 1)
  return egen + 1
end

local function record_lapse(events, pid, credits, now)
  if credits > 0 then
    redis.call('XADD', events, '*', 'kind', 'expire', 'acct', pid, 'credits', credits, 'ts', now)
  end
end
