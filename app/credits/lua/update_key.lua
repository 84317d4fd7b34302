--[[
update_key: change an API key's name, daily cap and expiry in its hot-path record. Takes
effect for the very next reserve on any worker, since every reserve reads them. The key's
status is never changed here: an update racing a revocation cannot undo it. Writes the full
record (with the status given) when Redis lost it.

KEYS[1]  api key hash        <p>:{sN}:key:<kid>
ARGV[1]  acct                account pid the key belongs to
ARGV[2]  status              active | revoked (used only when the record is missing)
ARGV[3]  env                 live | test (used only when the record is missing)
ARGV[4]  cap                 daily cap in credits; -1 = no cap
ARGV[5]  name                the key's label
ARGV[6]  exp                 unix seconds from which the key is expired; 0 = never

Returns 1 when written, -1 when the record names another account (nothing changed).
A bad ARGV raises "svc bad argument: <name>" before anything is written (lib/checks.lua).
]]
local acct = label(1, 'acct')
local status = one_of(2, 'status', {active = true, revoked = true})
local env = one_of(3, 'env', {live = true, test = true})
local daily_cap = cap(4, 'cap')
local name = text(5, 'name')
local exp = count(6, 'exp')
local owner = redis.call('HGET', KEYS[1], 'acct')
if owner and owner ~= acct then return -1 end
if owner then
  redis.call('HSET', KEYS[1], 'cap', daily_cap, 'name', name, 'exp', exp)
else
  redis.call('HSET', KEYS[1], 'acct', acct, 'status', status, 'env', env,
    'cap', daily_cap, 'name', name, 'exp', exp)
end
return 1
