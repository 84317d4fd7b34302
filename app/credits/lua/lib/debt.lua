--[[
debt: what an account owes when a take-back (take_back.lua: a refund, a dispute, an
operator's debit) found its pools short. The account hash's debt field (absent: 0) is never
below 0, and the pools never go negative: what could not be taken is owed instead. One rule
for every script that adds credits to the pools (a grant, a settle's release), so that no
account holds both credits and debt for longer than one script call.

  pay_debt(acct, earned, purchased, debt)
      pay the debt of the account hash acct (its debt field, read as debt) out of its pools
      as read (earned, purchased), purchased first, then earned; writes only when it pays.
      Returns earned, purchased, debt (after the payment), paid.
]]
local function pay_debt(acct, earned, purchased, debt)
  if debt <= 0 then return earned, purchased, debt, 0 end
  local from_purchased = math.min(purchased, debt)
  local from_earned = math.min(earned, debt - from_purchased)
  local paid = from_purchased + from_earned
  if paid == 0 then return earned, purchased, debt, 0 end
  earned, purchased, debt = earned - from_earned, purchased - from_purchased, debt - paid
  redis.call('HSET', acct, 'earned', earned, 'purchased', purchased, 'debt', debt)
  return earned, purchased, debt, paid
end
