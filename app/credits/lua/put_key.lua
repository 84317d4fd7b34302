--[[
put_key: write an API key's hot-path record unless it exists (key creation, and re-warming
a key that Redis lost from the durable store). An existing record is never overwritten, so
a revocation can't be undone by a late re-warm.

KEYS[1]  api key hash        <p>:{sN}:key:<kid>
ARGV[1]  acct                account pid
ARGV[2]  status              active | revoked
ARGV[3]  env                 live | test
ARGV[4..9]                   the key's settings (lib/keys.lua key_record): cap, name,
                             exp, models, rpm, mcr

Returns 1 when written, 0 when a record existed (left unchanged).
A bad ARGV raises "svc bad argument: <name>" before anything is written (lib/checks.lua).
]]
--- @include "lib/checks.lua"
--- @include "lib/keys.lua"
local acct = label(1, 'acct')
local status = one_of(2, 'status', {active = true, revoked = true})
local env = one_of(3, 'env', {live = true, test = true})
local settings = key_record(4)
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'acct', acct, 'status', status, 'env', env, unpack(settings))
return 1
