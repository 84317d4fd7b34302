--[[
idempotency_claim: before a request with an Idempotency-Key runs (the routes other than the
streams, whose reserve script does this itself): the key's record answers for it, or the
request claims the key.

KEYS[1]  idempotency record  <p>:{sN}:idem:<pid>:<environment>:<digest>   fp, state, rid,
                             body, status
ARGV[1]  fp                  what identifies the request: its environment, route and body,
                             hashed
ARGV[2]  token               this run's id (only it may close the claim)
ARGV[3]  ttl                 seconds the claim lives while its request runs (closing it
                             sets the record's own)

Returns {0 OK} when claimed (state running), else {status, body, http status} as
lib/checks.lua recorded() says: 14 IDEMPOTENCY_REUSED (another request), 15
IDEMPOTENCY_RUNNING (running), 16 REPLAY (finished with its answer: the body and HTTP status
to send again), 17 UNRECORDED (finished without one).
]]
--- @include "lib/checks.lua"
local fp = label(1, 'fp')
local token = label(2, 'token')
local ttl = count(3, 'ttl')
local state, body, status = recorded(KEYS[1], fp)
if state then return {state, body or '', status or '0'} end
redis.call('HSET', KEYS[1], 'fp', fp, 'state', 'running', 'rid', token)
redis.call('EXPIRE', KEYS[1], ttl)
return {0}
