-- admit.lua: checks and charges every quota of one call, all or nothing.
--
-- One script run is one admission decision, so Redis' serial execution makes it
-- atomic across every process that shares the quotas. Time is Redis' TIME in
-- microseconds (never a client clock), unless ARGV[1] overrides it (tests only).
--
-- KEYS[i]   state key of quota i (i = 1..n), all in the call's hash slot
-- ARGV[1]   now in µs, or "" to read TIME
-- ARGV[2]   max wait in µs: "-1" admits now or never; >= 0 reserves the earliest
--           time within it (wait mode)
-- ARGV[3]   admission id (unique): names the members this call adds
-- ARGV[4]   lease TTL in µs (concurrency)
-- ARGV[5]   n, the number of quotas (= #KEYS)
-- ARGV[6 + 7*(i-1) ...] for quota i, seven values:
--   kind     "b" token bucket (GCRA), "s" sliding log, "c" concurrency leases
--   shadow   "1" evaluated and charged only if every shadow quota fits; never enforced
--   cost     > 0
--   b: pq, pr, den, burst — one token is pq + pr/den µs (0 <= pr < den)
--   s: limit, period_us, 0, 0
--   c: limit, 0, 0, 0
--
-- Bucket state: a string of four little-endian doubles (struct '<dddd'), all
-- integers below 2^53: t = whole µs and k = remainder in 1/den µs of the theoretical
-- arrival time TAT = t + k/den, r = the last reserved time, e = the key's expiry
-- (Unix ms, PXAT) as last set, or 0 when set relative to a test clock. A missing key
-- is a full bucket. It expires 1 ms after the first whole ms at which the bucket is
-- full again (and r is past); a write that would set the same expiry keeps it (SET
-- ... KEEPTTL, cheaper for Redis than a new one).
-- Sliding state: sorted set, one member "id:j" per admitted unit, score = its time.
-- Concurrency state: sorted set, one member "id:j" per unit in flight, score = the
-- lease's expiry.
--
-- Returns
--   {1, at, wait, shadow_ok, shadow_blame}  admitted at `at` (wait = at - now µs)
--   {0, blame, code, retry}                 denied by quota `blame`; nothing charged.
--       code 1: not before `retry` µs from now; 2: concurrency full;
--       code 3: predicted wait `retry` µs exceeds the max wait

local n = tonumber(ARGV[5])
assert(n and n >= 1 and #KEYS == n and #ARGV == 5 + 7 * n,
  'admit.lua: expected n >= 1 keys and 5 + 7n args')

local function fmt(x) return string.format('%.0f', x) end

local now = tonumber(ARGV[1])
local test = now ~= nil
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local max_wait = tonumber(ARGV[2])
local id = ARGV[3]
local lease_ttl = tonumber(ARGV[4])

-- Quotas, with their state read (and trimmed) once.
local q = {}
for i = 1, n do
  local b = 5 + 7 * (i - 1)
  local e = {
    key = KEYS[i], kind = ARGV[b + 1], shadow = ARGV[b + 2] == '1',
    cost = tonumber(ARGV[b + 3]), a = tonumber(ARGV[b + 4]), b = tonumber(ARGV[b + 5]),
    c = tonumber(ARGV[b + 6]), d = tonumber(ARGV[b + 7]),
  }
  if e.kind == 'b' then
    local v = redis.call('GET', e.key)
    e.t, e.k, e.r, e.e = now, 0, 0, 0
    if v then e.t, e.k, e.r, e.e = struct.unpack('<dddd', v) end
    if e.k >= e.c then e.k = e.c - 1 end -- the rate changed: keep within one µs
  elseif e.kind == 's' then
    redis.call('ZREMRANGEBYSCORE', e.key, '-inf', fmt(now - e.b))
    e.total = redis.call('ZCARD', e.key)
  elseif e.kind == 'c' then
    redis.call('ZREMRANGEBYSCORE', e.key, '-inf', fmt(now))
    e.total = redis.call('ZCARD', e.key)
  else
    return redis.error_reply('admit.lua: unknown quota kind ' .. tostring(e.kind))
  end
  q[i] = e
end

-- cost tokens as (whole µs, remainder) of a bucket.
local function units(e, cost)
  local whole = cost * e.a
  local rem = cost * e.b
  return whole + math.floor(rem / e.c), rem % e.c
end

-- The earliest time (>= now) at which quota e fits its cost; nil when a concurrency
-- limit is full.
local function fit(e)
  if e.kind == 'b' then
    local cw, cr = units(e, e.cost)
    local tw, tr = units(e, e.d)
    local lw, lr = e.t + cw - tw, e.k + cr - tr
    while lr < 0 do lr = lr + e.c; lw = lw - 1 end
    while lr >= e.c do lr = lr - e.c; lw = lw + 1 end
    if lr > 0 then lw = lw + 1 end
    return math.max(now, lw, e.r)
  elseif e.kind == 's' then
    local floor = now
    local newest = redis.call('ZRANGE', e.key, -1, -1, 'WITHSCORES')
    if newest[2] then floor = math.max(floor, tonumber(newest[2])) end
    local excess = e.total + e.cost - e.a
    if excess <= 0 then return floor end
    local kth = redis.call('ZRANGE', e.key, excess - 1, excess - 1, 'WITHSCORES')
    return math.max(floor, tonumber(kth[2]) + e.b)
  else
    if e.total + e.cost <= e.a then return now end
    return nil
  end
end

-- Charges quota e at time `at` and sets its expiry to when it is idle again.
local function charge(e, at)
  if e.kind == 'b' then
    if e.t < at then e.t = at; e.k = 0 end
    local cw, cr = units(e, e.cost)
    e.t = e.t + cw
    e.k = e.k + cr
    if e.k >= e.c then e.k = e.k - e.c; e.t = e.t + 1 end
    if at > e.r then e.r = at end
    local full = e.t + ((e.k > 0) and 1 or 0)
    if test then
      redis.call('SET', e.key, struct.pack('<dddd', e.t, e.k, e.r, 0),
        'PX', math.ceil((full - now) / 1000) + 1)
    else
      local x = math.ceil(full / 1000) + 1
      if x == e.e then
        redis.call('SET', e.key, struct.pack('<dddd', e.t, e.k, e.r, e.e), 'KEEPTTL')
      else
        redis.call('SET', e.key, struct.pack('<dddd', e.t, e.k, e.r, x), 'PXAT', x)
      end
    end
  else
    local score, ttl = at, at + e.b - now
    if e.kind == 'c' then score = at + lease_ttl; ttl = score - now end
    local args = {}
    for j = 1, e.cost do
      args[#args + 1] = fmt(score)
      args[#args + 1] = j
      if #args >= 1000 or j == e.cost then
        for m = 2, #args, 2 do args[m] = id .. ':' .. fmt(args[m]) end
        redis.call('ZADD', e.key, unpack(args))
        args = {}
      end
    end
    local newest = redis.call('ZRANGE', e.key, -1, -1, 'WITHSCORES')
    local last = tonumber(newest[2]) or score
    if e.kind == 's' then ttl = last + e.b - now else ttl = last - now end
    redis.call('PEXPIRE', e.key, fmt(math.ceil(ttl / 1000) + 1))
  end
end

-- Evaluates the quotas of one mode: the time all fit, the quota that sets it, and
-- the first full concurrency limit.
local function evaluate(shadow)
  local at, binding, full = now, 0, 0
  for i = 1, n do
    local e = q[i]
    if e.shadow == shadow then
      local t = fit(e)
      if t == nil then
        if full == 0 then full = i end
      elseif t > at then
        at = t; binding = i
      end
    end
  end
  return at, binding, full
end

local at, binding, full = evaluate(false)
if binding > 0 and (max_wait < 0) then
  return {0, binding, 1, at - now}
end
if full > 0 then
  return {0, full, 2, 0}
end
if at - now > max_wait and max_wait >= 0 then
  return {0, binding, 3, at - now}
end
for i = 1, n do
  if not q[i].shadow then charge(q[i], at) end
end

-- Shadow quotas: charged (at the same time) only if all of them would admit.
local sat, sbinding, sfull = evaluate(true)
local shadow_ok, shadow_blame = 1, 0
if sfull > 0 then
  shadow_ok = 0; shadow_blame = sfull
elseif sat > at then
  shadow_ok = 0; shadow_blame = sbinding
end
if shadow_ok == 1 then
  for i = 1, n do
    if q[i].shadow then charge(q[i], at) end
  end
end
return {1, at, at - now, shadow_ok, shadow_blame}
