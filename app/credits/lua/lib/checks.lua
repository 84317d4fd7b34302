--[[
checks: the argument checks every script includes (an @include of lib/checks.lua), so that
each script refuses a bad ARGV before its first write (Redis has no rollback: a command that
fails after a write leaves the writes before it in place), and reads an Idempotency-Key's
record the same way wherever one is read.

A failed check raises an error reply "svc bad argument: <name>" and changes nothing.
  count(i, name)         ARGV[i] as a whole number 0 .. 999,999,999,999,999, plain digits
                         (15 at most: exact in a Lua double, far below HINCRBY's int64 limit)
  cap(i, name)           a count, or -1 (no cap)
  one_of(i, name, set)   ARGV[i], which must be a key of the table set
  label(i, name)         ARGV[i] as a non-empty string of at most 256 bytes (ids, days, aliases)
  text(i, name)          ARGV[i] as a string of at most 4,096 bytes, maybe empty (a key's name)
  recorded(key, fp)      what the Idempotency-Key record at key (a hash: fp, state, body,
                         status) says of the request fp: nil when there is none; else 14
                         (another request), 15 (running), 17 (finished, no answer kept), or
                         16, body, status (finished: its answer)
  gave_up(ms)            whether Redis's TIME is past ms (unix milliseconds; 0 = never): the
                         caller stopped waiting for this reply (its Redis timeout), so a
                         script that reaches Redis later (Redis was paused, the command sat
                         in a buffer) must change nothing
]]
local function refuse(name)
  error('svc bad argument: ' .. name)
end

local function count(i, name)
  local s = ARGV[i]
  if type(s) ~= 'string' or #s > 15 or not string.match(s, '^%d+$') then refuse(name) end
  return tonumber(s)
end

local function cap(i, name)
  if ARGV[i] == '-1' then return -1 end
  return count(i, name)
end

local function one_of(i, name, set)
  local s = ARGV[i]
  if type(s) ~= 'string' or not set[s] then refuse(name) end
  return s
end

local function label(i, name)
  local s = ARGV[i]
  if type(s) ~= 'string' or #s == 0 or #s > 256 then refuse(name) end
  return s
end

local function text(i, name)
  local s = ARGV[i]
  if type(s) ~= 'string' or #s > 4096 then refuse(name) end
  return s
end

local function recorded(key, fp)
  local r = redis.call('HMGET', key, 'fp', 'state', 'body', 'status')
  if not r[1] then return nil end
  if r[1] ~= fp then return 14 end
  if r[2] == 'done' then return 16, r[3], r[4] end
  if r[2] == 'unrecorded' then return 17 end
  return 15
end

local function gave_up(ms)
  if ms == 0 then return false end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > ms
end
