-- fusebox: one circuit breaker's state machine, shared by a fleet, in one atomic call.
--
-- KEYS (one hash tag, so one Cluster slot):
--   1 state hash   2 window hash   3 count-window ring (one byte per call)   4 probe leases (zset)
--   5 epoch (a string that never expires)
-- ARGV:
--   1 op: sync | rec | bat | clm | rel | cmd      2 pub/sub channel
--   3 window kind: c (count) | t (time)            4 count: size; time: bucket width (us)
--   5 time: buckets                                6 minimum_calls
--   7 failure_rate_threshold (%)                   8 slow_call_rate_threshold (%)
--   9 consecutive_failures (0: off)               10 open waits (us) of the 1st, 2nd, ... trip
--                                                    in a row, comma-separated (the last repeats)
--  11 max_half_open_wait (us, 0: none)            12 permitted_probes
--  13 probe_successes                             14 clear the window on close (1/0)
--  15 idle ttl of a CLOSED scope (ms)             16 jitter for an opening now (us)
--  17.. the op's own arguments
--
-- Time is Redis's (TIME), in microseconds; rates are compared in integers. Every reply, and
-- every message published on a transition, is the same vector of integers (see `reply`).
--
-- The epoch never repeats over the life of a scope. It lives in its own key, which never
-- expires, so a CLOSED scope whose state and window expire when idle keeps it; a scope
-- with no epoch yet (new, or after FLUSHALL or a restart with an empty data set) starts at
-- Redis's clock in microseconds; and every new epoch is the larger of the last one plus one
-- and that clock. Epochs therefore stay at or below the clock, and one started after a data
-- loss is above every epoch given out before it, as long as Redis's clock did not step back
-- past the last transition.

if redis.replicate_commands then pcall(redis.replicate_commands) end

local S, W, R, L, E = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local op, chan = ARGV[1], ARGV[2]
local wkind = ARGV[3]
local wsize = tonumber(ARGV[4])
local nbuckets = tonumber(ARGV[5])
local min_calls = tonumber(ARGV[6])
local fthr = tonumber(ARGV[7])
local sthr = tonumber(ARGV[8])
local consec = tonumber(ARGV[9])
local open_waits = {}
for w in string.gmatch(ARGV[10], '%d+') do open_waits[#open_waits + 1] = tonumber(w) end
local max_half = tonumber(ARGV[11])
local probes = tonumber(ARGV[12])
local need_ok = tonumber(ARGV[13])
local clear_on_close = ARGV[14] == '1'
local idle_ms = tonumber(ARGV[15])
local jitter = tonumber(ARGV[16])

local CLOSED, OPEN, HALF, FORCED, DISABLED, MONLY = 0, 1, 2, 3, 4, 5
-- Reasons: 0 failure_rate, 1 slow_call_rate, 2 consecutive_failures, 3 open_wait_elapsed,
-- 4 probe_failed, 5 half_open_timeout, 6 probes_succeeded, 7 forced_open, 8 disabled,
-- 9 metrics_only, 10 reset.

local function num(v) return tonumber(v) or 0 end
local function s(n) return string.format('%d', n) end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

-- The state (a missing record reads as CLOSED) and the epoch.
local raw = redis.call('HGETALL', S)
local f = {}
for i = 1, #raw, 2 do f[raw[i]] = raw[i + 1] end
local exists = #raw > 0
local state = num(f.st)
local epoch = tonumber(redis.call('GET', E))
if epoch == nil then
  epoch = now
  redis.call('SET', E, s(epoch))
end
local ou, hs, okc, trips, cf = num(f.ou), num(f.hs), num(f.ok), num(f.tr), num(f.cf)
local wo, wr, reason, from = num(f.wo), num(f.wr), num(f.rs), num(f.fr)
local entered, prev_entered, open_for, jit = num(f.en), num(f.pe), num(f.of), num(f.ji)
local dirty, moved, opened = false, false, 0

-- The window: calls, failures, slow, and the ring's next slot (count) or newest bucket (time).
local wv = redis.call('HMGET', W, 'n', 'f', 's', 'x')
local wn, wf, ws = num(wv[1]), num(wv[2]), num(wv[3])
local wx = tonumber(wv[4])
local wdirty = false

local function is_clean()
  if wkind == 'c' and (state == CLOSED or state == MONLY) and wn == wsize and wf == 0
      and ws == 0 and cf == 0 then
    return 1
  end
  return 0
end
local clean_before, wo_before = is_clean(), wo

-- Time window: drop the buckets that left the window (at most one pass over them).
local function advance()
  local idx = math.floor(now / wsize)
  if wx == nil then wx = idx; wdirty = true; return end
  if idx <= wx then return end
  if idx - wx >= nbuckets then
    redis.call('DEL', W)
    wn, wf, ws = 0, 0, 0
  else
    for i = wx + 1, idx do
      local k = s(i % nbuckets)
      local b = redis.call('HMGET', W, 'c' .. k, 'f' .. k, 's' .. k)
      if b[1] then
        wn, wf, ws = wn - num(b[1]), wf - num(b[2]), ws - num(b[3])
        redis.call('HDEL', W, 'c' .. k, 'f' .. k, 's' .. k)
      end
    end
  end
  wx = idx
  wdirty = true
end

-- The totals as of now, without writing (expired buckets subtracted).
local function totals_now()
  if wkind ~= 't' or wx == nil then return wn, wf, ws end
  local idx = math.floor(now / wsize)
  if idx <= wx then return wn, wf, ws end
  if idx - wx >= nbuckets then return 0, 0, 0 end
  local n, fl, sl = wn, wf, ws
  for i = wx + 1, idx do
    local k = s(i % nbuckets)
    local b = redis.call('HMGET', W, 'c' .. k, 'f' .. k, 's' .. k)
    n, fl, sl = n - num(b[1]), fl - num(b[2]), sl - num(b[3])
  end
  return n, fl, sl
end

-- Count window: push n calls (fl failed, sl slow) into the ring of wsize slots.
local function ring_push(n, fl, sl)
  local size = wsize
  if wn == size and wf == 0 and ws == 0 and fl == 0 and sl == 0 then
    return -- a clean window stays the same whichever slots fast successes replace
  end
  local both = math.max(0, fl + sl - n)
  local fo, so = fl - both, sl - both
  local okn = n - both - fo - so
  if n >= size then
    -- More calls than slots: the window becomes a proportional sample of the batch.
    local pb = math.floor(both * size / n)
    local pf = math.floor(fo * size / n)
    local ps = math.floor(so * size / n)
    local po = size - pb - pf - ps
    redis.call('SET', R, string.rep('0', po) .. string.rep('2', ps) .. string.rep('1', pf)
      .. string.rep('3', pb))
    wn, wf, ws, wx = size, pf + pb, ps + pb, 0
  else
    local codes = string.rep('0', okn) .. string.rep('2', so) .. string.rep('1', fo)
      .. string.rep('3', both)
    local x = wx or 0
    local first = math.min(n, size - x)
    local old = redis.call('GETRANGE', R, x, x + first - 1)
    if first < n then old = old .. redis.call('GETRANGE', R, 0, n - first - 1) end
    local evf, evs = 0, 0
    for i = 1, #old do
      -- Slots after the ring's end hold calls only once the window is full; slots the
      -- push wrapped around to always do.
      if wn == size or i > first then
        local b = string.byte(old, i)
        if b >= 48 then
          local c = b - 48
          if c % 2 == 1 then evf = evf + 1 end
          if c >= 2 then evs = evs + 1 end
        end
      end
    end
    redis.call('SETRANGE', R, x, string.sub(codes, 1, first))
    if first < n then redis.call('SETRANGE', R, 0, string.sub(codes, first + 1)) end
    wn = math.min(size, wn + n)
    wf, ws = wf - evf + fl, ws - evs + sl
    wx = (x + n) % size
  end
  wdirty = true
end

local function record(n, fl, sl)
  if wkind == 'c' then
    ring_push(n, fl, sl)
  else
    advance()
    local k = s(wx % nbuckets)
    redis.call('HINCRBY', W, 'c' .. k, n)
    if fl > 0 then redis.call('HINCRBY', W, 'f' .. k, fl) end
    if sl > 0 then redis.call('HINCRBY', W, 's' .. k, sl) end
    wn, wf, ws = wn + n, wf + fl, ws + sl
    wdirty = true
  end
end

local function trip_reason()
  if consec > 0 and cf >= consec then return 2 end
  if wn < min_calls or wn == 0 then return nil end
  if wf * 100 >= fthr * wn then return 0 end
  if ws * 100 >= sthr * wn then return 1 end
  return nil
end

-- Transitions. The epoch moves on every one except OPEN -> HALF_OPEN.
local function move(to, why)
  from, state, epoch = state, to, math.max(epoch + 1, now)
  redis.call('SET', E, s(epoch))
  prev_entered, entered, reason = entered, now, why
  open_for, jit = 0, 0
  moved, dirty = true, true
end

local function enter_open(why)
  trips = trips + 1
  move(OPEN, why)
  open_for, jit = open_waits[math.min(trips, #open_waits)] + jitter, jitter
  ou = now + open_for
  opened = 1
  redis.call('DEL', L)
end

local function enter_half_open()
  from, state = state, HALF
  prev_entered, entered, reason = entered, now, 3
  open_for, jit = 0, 0
  hs, okc = now, 0
  moved, dirty = true, true
  redis.call('DEL', L)
end

local function enter_closed(why)
  move(CLOSED, why)
  if why == 10 or clear_on_close then
    redis.call('DEL', W, R)
    wn, wf, ws, wx, wdirty = 0, 0, 0, nil, false
  end
  trips, cf, wo, okc = 0, 0, 0, 0
  redis.call('DEL', L)
end

local function half_open_timed_out()
  if state == HALF and max_half > 0 and now >= hs + max_half then
    enter_open(5)
    return true
  end
  return false
end

local function counted(n, fl, sl, trailing)
  record(n, fl, sl)
  if trailing == nil then
    if fl > 0 then cf = cf + 1 else cf = 0 end
  elseif n > fl then
    cf = trailing
  else
    cf = cf + fl
  end
  dirty = true
  local why = trip_reason()
  if state == MONLY then
    local would = 0
    if why then would = 1 end
    if would ~= wo then wo, wr = would, why or 0 end
  elseif why then
    enter_open(why)
  end
end

local applied = 0
if op == 'sync' then
  if exists and half_open_timed_out() then applied = 1 end
elseif op == 'rec' or op == 'bat' then
  local ep = tonumber(ARGV[17])
  half_open_timed_out()
  if ep == epoch then
    if op == 'bat' then
      if state == CLOSED or state == MONLY then
        counted(tonumber(ARGV[18]), tonumber(ARGV[19]), tonumber(ARGV[20]), tonumber(ARGV[21]))
        applied = 1
      end
    else
      local kind, token = ARGV[18], ARGV[19]
      local fl, sl = tonumber(ARGV[20]), tonumber(ARGV[21])
      if kind == 'c' and (state == CLOSED or state == MONLY) then
        counted(1, fl, sl, nil)
        applied = 1
      elseif kind == 'p' and state == HALF then
        local expiry = redis.call('ZSCORE', L, token)
        if expiry and tonumber(expiry) >= now then
          applied = 1
          if fl > 0 or sl > 0 then
            enter_open(4)
          else
            redis.call('ZREM', L, token)
            okc, dirty = okc + 1, true
            if okc >= need_ok then enter_closed(6) end
          end
        end
      end
    end
  end
elseif op == 'clm' then
  -- As many of the tokens ARGV[18..] as the budget has room for, in order.
  local lease_us = tonumber(ARGV[17])
  if state == OPEN and now >= ou then enter_half_open() end
  if not half_open_timed_out() and state == HALF then
    redis.call('ZREMRANGEBYSCORE', L, '-inf', '(' .. s(now))
    local room = probes - redis.call('ZCARD', L) - okc
    for i = 18, #ARGV do
      if applied >= room then break end
      redis.call('ZADD', L, s(now + lease_us), ARGV[i])
      applied = applied + 1
    end
    if applied > 0 then
      redis.call('PEXPIRE', L, s(math.floor(lease_us / 1000) + 1000))
    end
  end
elseif op == 'rel' then
  if state == HALF and tonumber(ARGV[17]) == epoch then
    applied = redis.call('ZREM', L, ARGV[18])
  end
elseif op == 'cmd' then
  local c = ARGV[17]
  if c == 'r' then
    enter_closed(10)
  else
    local to, why = MONLY, 9
    if c == 'f' then to, why = FORCED, 7 elseif c == 'd' then to, why = DISABLED, 8 end
    if state ~= to then
      move(to, why)
      wo = 0
      redis.call('DEL', L)
    end
  end
  applied = 1
end

if dirty then
  redis.call('HSET', S, 'st', s(state), 'ou', s(ou), 'hs', s(hs), 'ok', s(okc),
    'tr', s(trips), 'cf', s(cf), 'wo', s(wo), 'wr', s(wr), 'rs', s(reason), 'fr', s(from),
    'en', s(entered), 'pe', s(prev_entered), 'of', s(open_for), 'ji', s(jit))
  exists = true
end
if wdirty then
  redis.call('HSET', W, 'n', s(wn), 'f', s(wf), 's', s(ws), 'x', s(wx or 0))
end
if state == CLOSED then
  -- A CLOSED scope may disappear when idle (a missing record reads as CLOSED) ...
  if dirty or wdirty then
    redis.call('PEXPIRE', S, idle_ms)
    redis.call('PEXPIRE', W, idle_ms)
    redis.call('PEXPIRE', R, idle_ms)
  end
elseif moved then
  -- ... any other state never expires.
  redis.call('PERSIST', S)
  redis.call('PERSIST', W)
  redis.call('PERSIST', R)
end

local rn, rf, rsl = totals_now()
local live = 0
if state == HALF then live = redis.call('ZCOUNT', L, s(now), '+inf') end
local clean_after = is_clean()
local ex = 0
if exists then ex = 1 end
local reply = { applied, state, epoch, now, ou, hs, rn, rf, rsl, live, okc, clean_after, wo,
  reason, from, entered, prev_entered, open_for, jit, trips, ex, wr, opened }
if moved or clean_before ~= clean_after or wo_before ~= wo then
  local parts = {}
  for i = 1, #reply do parts[i] = s(reply[i]) end
  -- What this call did is its caller's to know, not the listeners'.
  parts[1], parts[#parts] = '0', '0'
  redis.call('PUBLISH', chan, table.concat(parts, ' '))
end
return reply
