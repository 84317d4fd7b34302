--[[
rate_start: count one start of a request that holds no credits (a token count) against its
key lineage's rate limit, the completions' own (lib/rate.lua). Atomic.

KEYS[1]  api key hash        <p>:{sN}:key:<kid>        rpm (requests in any 60 s, 0 or
                                                       absent = no limit)
KEYS[2]  rate log            <p>:{sN}:rl:<lineage>     as reserve.lua's KEYS[7]

ARGV[1]  now_ms              unix milliseconds (the rate limit's clock)

Returns {status, wait}
  0 OK                       the start is logged (when the key has a limit); wait 0
 10 RATE_LIMITED             the key started rpm requests in the last 60 s; wait = ms until the
                             oldest of them is 60 s old; nothing changed
A bad ARGV raises "svc bad argument: <name>" before anything is written (lib/checks.lua).
]]
--- @include "lib/checks.lua"
--- @include "lib/rate.lua"
local now_ms = count(1, 'now_ms')
local rpm = tonumber(redis.call('HGET', KEYS[1], 'rpm') or '0')
local wait, full = rate_wait(KEYS[2], rpm, now_ms)
if wait > 0 then return {10, wait} end
rate_log(KEYS[2], rpm, full, now_ms)
return {0, 0}
