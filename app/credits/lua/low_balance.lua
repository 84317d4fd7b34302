--[[
low_balance: set or clear an account's low-balance threshold (webhooks' credits.low). Atomic.

KEYS[1]  account hash        <p>:{sN}:acct:<pid>       low, lowf

ARGV[1]  now                 unix seconds (an expired earned pool counts as 0)
ARGV[2]  low                 credits; -1 = no threshold

Returns {status, balance}
  0 OK                balance = the account's credits now
  3 ACCOUNT_MISSING
The mark (lowf) is set to whether the balance is below the new threshold already: setting
a threshold is not a crossing; the next settle that leaves the balance below it (after it
was at or above) is (see settle.lua).
A bad ARGV raises "svc bad argument: <name>" before anything is written (lib/checks.lua).
]]
--- @include "lib/checks.lua"
--- @include "lib/earned.lua"
local now = count(1, 'now')
local low = cap(2, 'low')
local acct = redis.call('HMGET', KEYS[1], 'earned', 'earned_exp', 'purchased')
if not acct[3] then return {3, 0} end
local earned = tonumber(acct[1] or '0')
local earned_exp = tonumber(acct[2] or '0')
if earned_expired(earned_exp, now) then earned = 0 end
local balance = earned + tonumber(acct[3])
if low < 0 then
  redis.call('HDEL', KEYS[1], 'low', 'lowf')
elseif balance < low then
  redis.call('HSET', KEYS[1], 'low', low, 'lowf', 1)
else
  redis.call('HSET', KEYS[1], 'low', low)
  redis.call('HDEL', KEYS[1], 'lowf')
end
return {0, balance}
