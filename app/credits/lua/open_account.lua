--[[
open_account: create an account's balance hash unless it exists (new accounts, and
rebuilding Redis from the durable store).

KEYS[1]  account hash        <p>:{sN}:acct:<pid>
ARGV[1]  earned              credits in the earned pool
ARGV[2]  earned_exp          unix seconds the earned pool expires (0 = empty pool)
ARGV[3]  purchased           credits in the purchased pool
ARGV[4]  status              active | disabled (the durable record's; lib/keys.lua
                             account_refusal reads it)
ARGV[5]  debt                (optional) credits owed (lib/debt.lua): a rebuilt account whose
                             ledger is below what its open reservations hold

Returns 1 when created, 0 when the account existed (left unchanged: its status is
account_status.lua's to change).
A bad ARGV raises "svc bad argument: <name>" before anything is written (lib/checks.lua).
]]
--- @include "lib/checks.lua"
local earned = count(1, 'earned')
local earned_exp = count(2, 'earned_exp')
local purchased = count(3, 'purchased')
local status = one_of(4, 'status', {active = true, disabled = true})
local debt = 0
if ARGV[5] then debt = count(5, 'debt') end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'earned', earned, 'earned_exp', earned_exp,
  'purchased', purchased, 'status', status)
if debt > 0 then redis.call('HSET', KEYS[1], 'debt', debt) end
return 1
