--[[
extend: move a live reservation's deadline forward (the stream's heartbeat), so the sweeper
only ever refunds reservations whose worker died.

KEYS[1]  reservation hash    <p>:{sN}:rsv:<rid>
KEYS[2]  reservations zset   <p>:{sN}:rsv
ARGV[1]  rid
ARGV[2]  deadline            new deadline, unix seconds

Returns 1 when extended, 0 when the reservation no longer exists (settled or swept).
A bad ARGV raises "svc bad argument: <name>" before anything is written (lib/checks.lua).
]]
--- @include "lib/checks.lua"
local rid = label(1, 'rid')
local deadline = count(2, 'deadline')
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'deadline', deadline)
redis.call('ZADD', KEYS[2], 'XX', deadline, rid)
return 1
