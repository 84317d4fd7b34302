--[[
revoke_key: mark an API key revoked. Takes effect for the very next reserve on any worker,
since every reserve reads the key's status. Writes the full record when Redis lost it, so a
revoked key can never be re-warmed as active.

KEYS[1]  api key hash        <p>:{sN}:key:<kid>
ARGV[1]  acct                account pid the key belongs to
ARGV[2]  env                 live | test
ARGV[3]  cap                 daily cap; -1 = no cap
ARGV[4]  name                the key's label

Returns 1 when revoked now, 0 when it was revoked already, -1 when the record names
another account (nothing changed).
]]
local key = redis.call('HMGET', KEYS[1], 'acct', 'status')
if key[1] and key[1] ~= ARGV[1] then return -1 end
if key[2] == 'revoked' then return 0 end
if key[1] then
  redis.call('HSET', KEYS[1], 'status', 'revoked')
else
  redis.call('HSET', KEYS[1], 'acct', ARGV[1], 'status', 'revoked', 'env', ARGV[2],
    'cap', ARGV[3], 'name', ARGV[4])
end
return 1
