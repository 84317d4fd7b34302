--[[
balance: read an account's credit pools through one of its keys. Read-only; an expired
earned pool reads as 0 (the write happens lazily in reserve, settle and grant).

KEYS[1]  api key hash        <p>:{sN}:key:<kid>
KEYS[2]  account hash        <p>:{sN}:acct:<pid>       earned, earned_exp, purchased, status,
                                                       debt
ARGV[1]  now                 unix seconds
ARGV[2]  pid                 account the key must belong to

Returns {status, earned, earned_exp, purchased, debt}   (debt: owed credits, 0 when none)
  0 OK (earned_exp 0 = no expiry), 1 KEY_UNKNOWN, 2 KEY_REVOKED, 3 ACCOUNT_MISSING,
  12 KEY_EXPIRED (the key's exp is not after now), 19 ACCOUNT_DISABLED (the account's status
  is disabled: lib/keys.lua account_refusal)
A bad ARGV raises "svc bad argument: <name>" before anything is written (lib/checks.lua).
]]
--- @include "lib/checks.lua"
--- @include "lib/keys.lua"
--- @include "lib/earned.lua"
local now = count(1, 'now')
local pid = label(2, 'pid')
local key = redis.call('HMGET', KEYS[1], 'acct', 'status', 'exp')
if not key[1] or key[1] ~= pid then return {1, 0, 0, 0, 0} end
local refused = key_refusal(key[2], key[3], now)
if refused then return {refused, 0, 0, 0, 0} end
local acct = redis.call('HMGET', KEYS[2], 'earned', 'earned_exp', 'purchased', 'status', 'debt')
if not acct[3] then return {3, 0, 0, 0, 0} end
refused = account_refusal(acct[4])
if refused then return {refused, 0, 0, 0, 0} end
local earned, earned_exp = tonumber(acct[1]), tonumber(acct[2])
if earned_expired(earned_exp, now) then earned, earned_exp = 0, 0 end
return {0, earned, earned_exp, tonumber(acct[3]), tonumber(acct[5] or '0')}
