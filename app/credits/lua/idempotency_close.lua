--[[
idempotency_close: after a request that claimed its Idempotency-Key (idempotency_claim.lua)
ran: its answer is recorded for the key's time to live, or, when it failed, the key is
freed so the request may be sent again. Only the run that claimed the key closes it.

KEYS[1]  idempotency record  <p>:{sN}:idem:<pid>:<environment>:<digest>
ARGV[1]  token               the id the claim was made with
ARGV[2]  outcome             done (ARGV[3..5] are the answer) | failed
ARGV[3]  status              (done) the HTTP status sent
ARGV[4]  body                (done) the body sent, as kept: of any size (not text()'s 4,096
                             bytes); the caller bounds it by the request-size limit
                             (app.credits.idempotency.answer_limit)
ARGV[5]  ttl                 (done) seconds the record lives from now on (the claim's own
                             time to live is short: a run that never closes frees its key)

Returns 1 when closed, 0 when the record is not this run's (expired, or another's).
]]
--- @include "lib/checks.lua"
local token = label(1, 'token')
local outcome = one_of(2, 'outcome', {done = true, failed = true})
local status, body, ttl = '', '', 0
if outcome == 'done' then
  status = count(3, 'status')
  body = ARGV[4]
  if type(body) ~= 'string' then refuse('body') end
  ttl = count(5, 'ttl')
end
if redis.call('HGET', KEYS[1], 'rid') ~= token then return 0 end
if outcome == 'failed' then
  redis.call('DEL', KEYS[1])
else
  redis.call('HSET', KEYS[1], 'state', 'done', 'status', status, 'body', body)
  redis.call('EXPIRE', KEYS[1], ttl)
end
return 1
