-- peek.lua: what each quota of one tool has left now, read without charging,
-- trimming or touching anything (it writes nothing, so a state endpoint that polls
-- it can never change a decision). The figures are those of admit.lua's own state,
-- on Redis' clock: what the in-memory engine's `available` reports for the same
-- state.
--
-- KEYS[i]   state key of quota i (i = 1..n), all in one hash slot
-- ARGV[1]   now in µs, or "" to read TIME
-- ARGV[2 + 5*(i-1) ...] for quota i, five values, as admit.lua's:
--   kind     "b" token bucket (GCRA), "s" sliding log, "c" concurrency leases
--   b: pq, pr, den, burst — one token is pq + pr/den µs (0 <= pr < den)
--   s: limit, period_us, 0, 0
--   c: limit, 0, 0, 0
--
-- Returns {available_1, ..., available_n}: whole units (requests, tokens, slots).

local n = #KEYS
assert(#ARGV == 1 + 5 * n, 'peek.lua: expected 1 + 5n args')

local function fmt(x) return string.format('%.0f', x) end

local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- (whole µs, remainder in 1/den µs) of `cost` tokens, exact as in admit.lua.
local function units(pq, pr, den, cost)
  local rem = cost * pr
  return cost * pq + math.floor(rem / den), rem % den
end

-- Whether (aw, ar) <= (bw, br), both normalised (0 <= r < den).
local function le(aw, ar, bw, br)
  return aw < bw or (aw == bw and ar <= br)
end

-- Whole tokens a bucket has at `now`: the largest a <= burst whose cost fits in
-- what is free, burst's worth less the debt TAT - now.
local function bucket(key, pq, pr, den, burst)
  local v = redis.call('GET', key)
  if not v then return burst end
  local t, k = struct.unpack('<dddd', v)
  if k >= den then k = den - 1 end -- the rate changed: as admit.lua does
  if t < now then return burst end
  -- free = units(burst) - (t - now, k), normalised.
  local fw, fr = units(pq, pr, den, burst)
  fw, fr = fw - (t - now), fr - k
  if fr < 0 then fr = fr + den; fw = fw - 1 end
  if fw < 0 then return 0 end
  -- An estimate in doubles, corrected with exact comparisons.
  local a = math.floor((fw + fr / den) / (pq + pr / den))
  if a > burst then a = burst end
  if a < 0 then a = 0 end
  while a > 0 do
    local w, r = units(pq, pr, den, a)
    if le(w, r, fw, fr) then break end
    a = a - 1
  end
  while a < burst do
    local w, r = units(pq, pr, den, a + 1)
    if not le(w, r, fw, fr) then break end
    a = a + 1
  end
  return a
end

local out = {}
for i = 1, n do
  local b = 1 + 5 * (i - 1)
  local kind, x, y = ARGV[b + 1], tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
  local key = KEYS[i]
  local left
  if kind == 'b' then
    left = bucket(key, x, y, tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5]))
  elseif kind == 's' then
    -- In the window: entries younger than the period (admit.lua trims the rest).
    left = x - redis.call('ZCOUNT', key, '(' .. fmt(now - y), '+inf')
  elseif kind == 'c' then
    -- In flight: leases that have not expired.
    left = x - redis.call('ZCOUNT', key, '(' .. fmt(now), '+inf')
  else
    return redis.error_reply('peek.lua: unknown quota kind ' .. tostring(kind))
  end
  if left < 0 then left = 0 end
  out[i] = left
end
return out
