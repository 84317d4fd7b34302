--[[
window_count: count one attempt of a client address in a fixed window shared by every worker
and instance (failed authentications; argon2 verifications on the cold path). The window
starts with its first attempt and ends window_ms later, when the counter expires.

KEYS[1]  counter             <p>:authfail:<address> or <p>:coldauth:<address>
ARGV[1]  window_ms           the window's length, milliseconds (> 0)

Returns {count, ms_left}: the attempts in the window, this one included, and the
milliseconds until it ends.
A bad ARGV raises "svc bad argument: <name>" before anything is written (lib/checks.lua).
]]
--- @include "lib/checks.lua"
local window_ms = count(1, 'window_ms')
if window_ms == 0 then refuse('window_ms') end
local attempts = redis.call('INCR', KEYS[1])
local left = redis.call('PTTL', KEYS[1])
if attempts == 1 or left < 0 then
  redis.call('PEXPIRE', KEYS[1], window_ms)
  left = window_ms
end
return {attempts, left}
