--[[
rate: a key lineage's rate limit, one rule for every script that starts a request of a key
(reserve.lua for the completions, rate_start.lua for the token counts).

A key with rpm > 0 starts at most rpm requests in any 60 s (a sliding window: no burst at a
window's edge). The rate log (<p>:{sN}:rl:<lineage>) is a list of the unix ms times of the
lineage's latest starts, oldest first, at most rpm long. A request may start when the list
holds fewer than rpm times or the rpm-th newest is 60 s old (one LINDEX, from the list's
nearer end); the start is pushed, and the oldest trimmed when the list was full. A changed
rpm needs nothing: the list is read with the new one. Refusals do not count; starts made
while the key had no limit are not logged. The list lives 60 s after the last start.

  rate_wait(log, rpm, now_ms)        reads only: the ms until a start is allowed (> 0: refused),
                                     else 0 and whether the log is full (its oldest goes when
                                     this start is logged)
  rate_log(log, rpm, full, now_ms)   writes the start (nothing when rpm is 0)
]]

local RATE_WINDOW_MS = 60000

local function rate_wait(log, rpm, now_ms)
  if rpm <= 0 then return 0, false end
  local oldest = redis.call('LINDEX', log, -rpm)
  if not oldest then return 0, false end
  local wait = tonumber(oldest) + RATE_WINDOW_MS - now_ms
  if wait > 0 then return wait, false end
  return 0, true
end

local function rate_log(log, rpm, full, now_ms)
  if rpm <= 0 then return end
  redis.call('RPUSH', log, now_ms)
  if full then redis.call('LTRIM', log, -rpm, -1) end
  redis.call('PEXPIRE', log, RATE_WINDOW_MS)
end
