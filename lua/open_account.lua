--[[
open_account: create an account's balance hash unless it exists (new accounts, and
rebuilding Redis from the durable store).

KEYS[1]  account hash        <p>:{sN}:acct:<pid>
ARGV[1]  earned              credits in the earned pool
ARGV[2]  earned_exp          unix seconds the earned pool expires (0 = empty pool)
ARGV[3]  purchased           credits in the purchased pool

Returns 1 when created, 0 when the account existed (left unchanged).
]]
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'earned', ARGV[1], 'earned_exp', ARGV[2],
  'purchased', ARGV[3], 'status', 'active')
return 1
