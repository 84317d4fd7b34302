--[[
extend: move a live reservation's deadline forward (the stream's heartbeat), so the sweeper
only ever refunds reservations whose worker died.

KEYS[1]  reservation hash    <p>:{sN}:rsv:<rid>
KEYS[2]  reservations zset   <p>:{sN}:rsv
ARGV[1]  rid
ARGV[2]  deadline            new deadline, unix seconds

Returns 1 when extended, 0 when the reservation no longer exists (settled or swept).
]]
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'deadline', ARGV[2])
redis.call('ZADD', KEYS[2], 'XX', ARGV[2], ARGV[1])
return 1
