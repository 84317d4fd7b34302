--[[
keys: an API key's record and whether its account lets it be used, one rule for every
script that writes or checks them (app.credits.key_records keeps the same rules for the
reads made outside the scripts).

  key_record(i)                  ARGV[i .. i+5], an API key's settings, checked, as HSET
                                 field-value pairs: cap (a cap), name (text), exp (a count:
                                 unix seconds, 0 = never), models (see below), rpm (a count:
                                 requests in any 60 s, 0 = no limit), mcr (a count: the most
                                 credits one request may hold, 0 = no ceiling)
  key_refusal(status, exp, now)  what a key whose status and exp fields (as HMGET gives them)
                                 are says at now (unix seconds): nil when it may be used, 2
                                 KEY_REVOKED (its status is not active), 12 KEY_EXPIRED (its
                                 exp, absent or 0 = never, is not after now)
  models_allow(allowed, wanted)  whether the key's models field allowed lets a request use
                                 every alias of wanted (space-separated)
  account_refusal(status)        what the status field of the key's account hash (as HMGET
                                 gives it) says: nil when its keys may be used (active, or
                                 absent: accounts made before it existed), 19
                                 ACCOUNT_DISABLED (disabled by an operator)
The models field: '*' (or absent) = every alias; else the aliases the key may use, each
between spaces (' a b '), so one plain find of ' alias ' tells.
]]
--- @include "lib/checks.lua"

local ALL_MODELS = '*'

local function key_record(i)
  local models = text(i + 3, 'models')
  if models ~= ALL_MODELS and not string.match(models, '^ [%w%-%._ ]*$') then
    refuse('models')
  end
  return {'cap', cap(i, 'cap'), 'name', text(i + 1, 'name'), 'exp', count(i + 2, 'exp'),
    'models', models, 'rpm', count(i + 4, 'rpm'), 'mcr', count(i + 5, 'mcr')}
end

local function key_refusal(status, exp, now)
  if status ~= 'active' then return 2 end
  local key_exp = tonumber(exp or '0')
  if key_exp > 0 and now >= key_exp then return 12 end
  return nil
end

local function models_allow(allowed, wanted)
  if not allowed or allowed == ALL_MODELS then return true end
  for alias in string.gmatch(wanted, '%S+') do
    if not string.find(allowed, ' ' .. alias .. ' ', 1, true) then return false end
  end
  return true
end

local function account_refusal(status)
  if status == 'disabled' then return 19 end
  return nil
end
