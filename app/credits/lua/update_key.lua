--[[
update_key: change an API key's settings (name, daily cap, expiry, models, rate limit) in
its hot-path record. Takes effect for the very next reserve on any worker, since every
reserve reads them. The key's status is never changed here: an update racing a revocation cannot undo it. Writes the full
record (with the status given) when Redis lost it.

KEYS[1]  api key hash        <p>:{sN}:key:<kid>
ARGV[1]  acct                account pid the key belongs to
ARGV[2]  status              active | revoked (used only when the record is missing)
ARGV[3]  env                 live | test (used only when the record is missing)
ARGV[4..9]                   the key's settings (lib/keys.lua key_record): cap, name,
                             exp, models, rpm, mcr

Returns 1 when written, -1 when the record names another account (nothing changed).
A bad ARGV raises "svc bad argument: <name>" before anything is written (lib/checks.lua).
]]
--- @include "lib/checks.lua"
--- @include "lib/keys.lua"
local acct = label(1, 'acct')
local status = one_of(2, 'status', {active = true, revoked = true})
local env = one_of(3, 'env', {live = true, test = true})
local settings = key_record(4)
local owner = redis.call('HGET', KEYS[1], 'acct')
if owner and owner ~= acct then return -1 end
if owner then
  redis.call('HSET', KEYS[1], unpack(settings))
else
  redis.call('HSET', KEYS[1], 'acct', acct, 'status', status, 'env', env, unpack(settings))
end
return 1
