--[[
revoke_key: mark an API key revoked. Takes effect for the very next reserve on any worker,
since every reserve reads the key's status. Writes the full record when Redis lost it, so a
revoked key can never be re-warmed as active.

KEYS[1]  api key hash        <p>:{sN}:key:<kid>
ARGV[1]  acct                account pid the key belongs to
ARGV[2]  env                 live | test
ARGV[3..8]                   the key's settings (lib/keys.lua key_record): cap, name,
                             exp, models, rpm, mcr

Returns 1 when revoked now, 0 when it was revoked already, -1 when the record names
another account (nothing changed).
A bad ARGV raises "svc bad argument: <name>" before anything is written (lib/checks.lua).
]]
--- @include "lib/checks.lua"
--- @include "lib/keys.lua"
local acct = label(1, 'acct')
local env = one_of(2, 'env', {live = true, test = true})
local settings = key_record(3)
local key = redis.call('HMGET', KEYS[1], 'acct', 'status')
if key[1] and key[1] ~= acct then return -1 end
if key[2] == 'revoked' then return 0 end
if key[1] then
  redis.call('HSET', KEYS[1], 'status', 'revoked')
else
  redis.call('HSET', KEYS[1], 'acct', acct, 'status', 'revoked', 'env', env,
    unpack(settings))
end
return 1
