-- admit_bucket.lua: admit.lua for the most common call, specialised: one enforced
-- token bucket, now or never (no waiting, no shadow quota). It decides one call, or
-- several calls on the same bucket in the order given, each exactly as if it ran
-- alone one after the other at the same time (coalesced admissions: `link.rs`).
-- Same state as admit.lua (see there for the bucket's encoding and expiry); what
-- does not depend on the state (the cost and the burst in whole µs and remainder)
-- is computed by the client.
--
-- KEYS[1]   the bucket's state key
-- ARGV[1]   now in µs, or "" to read TIME (tests only)
-- ARGV[2]   little-endian doubles (struct '<d...'), all integers below 2^53: den (one
--           token is pq + pr/den µs), then five for each run of calls of the same cost:
--   cw, cr   the cost in µs: cw + cr/den (0 <= cr < den)
--   dw, dr   the cost less the burst: dw + dr/den (0 <= dr < den; dw may be < 0)
--   n        the number of calls in the run, decided one after the other
-- Binary numbers cost Redis less than decimal arguments (no parsing).
--
-- Returns, for one run of one call, an integer: now (>= 0) when admitted (at now),
-- or -retry (< 0) when denied, not before `retry` µs from now. Otherwise a table: now,
-- then two integers per run: how many of its calls were admitted (the first ones:
-- a denial changes nothing, so the run's later calls are denied too) and the retry
-- of the others (0 if none).
--
-- The state is written once, after the last call, with its expiry as admit.lua sets
-- it (kept as it is when unchanged: cheaper for Redis). The last-reserved mark `r`
-- is at or before now whenever a call is admitted here (else it would bind), so it
-- can never bind again: it is left as it is (admit.lua would set it to now).
-- Every step is written out rather than shared in a function: this script's cost
-- is what bounds a shared quota's throughput.

local now = tonumber(ARGV[1])
local test = now ~= nil
if not test then
  local c = redis.call('TIME')
  now = c[1] * 1000000 + c[2]
end
local key, p = KEYS[1], ARGV[2]
local den, cw, cr, dw, dr, n = struct.unpack('<dddddd', p)
local v = redis.call('GET', key)
local t, k, r, e = now, 0, 0, 0
if v then t, k, r, e = struct.unpack('<dddd', v) end
if k >= den then k = den - 1 end -- the rate changed: keep within one µs

local out, charged
if #p == 48 and n == 1 then
  -- One call: the loop below, once.
  local lw, lr = t + dw, k + dr
  if lr >= den then lr = lr - den; lw = lw + 1 end
  if lr > 0 then lw = lw + 1 end
  local at = now
  if lw > at then at = lw end
  if r > at then at = r end
  if at > now then return now - at end
  if t < at then t = at; k = 0 end
  t = t + cw
  k = k + cr
  if k >= den then k = k - den; t = t + 1 end
  out, charged = now, true
else
  out, charged = {now}, false
  local pos = 9
  while pos <= #p do
    cw, cr, dw, dr, n, pos = struct.unpack('<ddddd', p, pos)
    local admitted, retry = 0, 0
    while admitted < n do
      -- The earliest time the cost fits: TAT + cost - burst, at or after the last
      -- reservation.
      local lw, lr = t + dw, k + dr
      if lr >= den then lr = lr - den; lw = lw + 1 end
      if lr > 0 then lw = lw + 1 end
      local at = now
      if lw > at then at = lw end
      if r > at then at = r end
      if at > now then retry = at - now; break end
      if t < at then t = at; k = 0 end
      t = t + cw
      k = k + cr
      if k >= den then k = k - den; t = t + 1 end
      admitted = admitted + 1
    end
    if admitted > 0 then charged = true end
    out[#out + 1] = admitted
    out[#out + 1] = retry
  end
end

if charged then
  local full = t
  if k > 0 then full = t + 1 end
  if test then
    local ttl = full - now + 999
    redis.call('SET', key, struct.pack('<dddd', t, k, r, 0), 'PX', (ttl - ttl % 1000) / 1000 + 1)
  else
    local x = full + 999
    x = (x - x % 1000) / 1000 + 1 -- ceil(full / 1000) + 1: whole ms
    if x == e then
      redis.call('SET', key, struct.pack('<dddd', t, k, r, e), 'KEEPTTL')
    else
      redis.call('SET', key, struct.pack('<dddd', t, k, r, x), 'PXAT', x)
    end
  end
end
return out
