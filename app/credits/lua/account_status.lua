--[[
account_status: set an account's status: disabled refuses every key of the account from the
next request on, on every worker (reserve and balance read it in the account hash they read
anyway; lib/keys.lua account_refusal), active serves them again. Streams already running
finish and settle as usual.

KEYS[1]  account hash        <p>:{sN}:acct:<pid>       status (set)
ARGV[1]  status              active | disabled

Returns 0 OK (set, whatever it was), 3 ACCOUNT_MISSING (no balance hash: nothing written,
so no partial hash is made; open_account or rebuild-redis writes the status with the pools).
A bad ARGV raises "svc bad argument: <name>" before anything is written (lib/checks.lua).
]]
--- @include "lib/checks.lua"
local status = one_of(1, 'status', {active = true, disabled = true})
if redis.call('EXISTS', KEYS[1]) == 0 then return 3 end
redis.call('HSET', KEYS[1], 'status', status)
return 0
