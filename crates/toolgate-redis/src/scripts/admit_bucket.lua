-- admit_bucket.lua: admit.lua for the most common call, specialised: one enforced
-- token bucket, now or never (no waiting, no shadow quota). Same arguments, same
-- replies, same state as admit.lua (see there); about a quarter less work for Redis
-- per decision, which is what bounds a shared quota's throughput.
--
-- KEYS[1]   the bucket's state key
-- ARGV      as admit.lua with n = 1: now|"", -1, id, lease TTL, 1,
--           "b", "0", cost, pq, pr, den, burst

local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local cost, pq, pr, den, burst =
  tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])

local s = redis.call('HMGET', KEYS[1], 't', 'k', 'r')
local t, k, r = tonumber(s[1]) or now, tonumber(s[2]) or 0, tonumber(s[3]) or 0
if k >= den then k = den - 1 end -- the rate changed: keep within one µs

-- cost and burst tokens as (whole µs, remainder in 1/den µs)
local rem = cost * pr
local cw, cr = cost * pq + math.floor(rem / den), rem % den
rem = burst * pr
local bw, br = burst * pq + math.floor(rem / den), rem % den

-- The earliest time the cost fits: TAT + cost - burst, at or after the last
-- reservation.
local lw, lr = t + cw - bw, k + cr - br
while lr < 0 do lr = lr + den; lw = lw - 1 end
while lr >= den do lr = lr - den; lw = lw + 1 end
if lr > 0 then lw = lw + 1 end
local at = math.max(now, lw, r)
if at > now then
  return {0, 1, 1, at - now}
end

if t < at then t = at; k = 0 end
t = t + cw
k = k + cr
if k >= den then k = k - den; t = t + 1 end
-- The last-reserved mark `r` is at or before now here (else `at` would be later),
-- so it can never bind again: it is left as it is (admit.lua would set it to now).
redis.call('HSET', KEYS[1], 't', string.format('%.0f', t), 'k', string.format('%.0f', k))
local full = t + ((k > 0) and 1 or 0)
redis.call('PEXPIRE', KEYS[1], string.format('%.0f', math.ceil((full - now) / 1000) + 1))
return {1, at, 0, 1, 0}
