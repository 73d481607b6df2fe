-- release.lua: gives back what an admitted (or cancelled) call holds, and reconciles
-- token estimates. Idempotent for members; never lifts a bucket above full, and never
-- leaves one more than one burst in debt.
--
-- KEYS[i]   state key of operation i (i = 1..n), all in one hash slot
-- ARGV[1]   now in µs, or "" to read TIME
-- ARGV[2]   n, the number of operations (= #KEYS)
-- ARGV[3 + 9*(i-1) ...] for operation i, nine values:
--   "m", id, from, to, 0, 0, 0, 0, 0
--                                   remove members id:from .. id:to of a sorted set
--                                   (concurrency leases, or a cancelled sliding entry)
--   "b", pq, pr, den, burst, delta, at, since, charged
--                                   a bucket (one token is pq + pr/den µs, burst tokens
--                                   at most): charge delta > 0 tokens used beyond an
--                                   estimate, behind the last reservation, but never
--                                   more than one burst in debt (TAT at most
--                                   max(now, r) + 2·burst tokens, or where it was), or
--                                   refund -delta tokens (never above full); at >= 0
--                                   also clears the last-reserved mark if it is `at` (a
--                                   cancelled reservation); since >= 0: the refunded
--                                   tokens were part of a charge of `charged` tokens
--                                   at `since`, never used, so their share of the
--                                   refill since then is kept back (the bucket never
--                                   ends up fuller than without the charge)
-- Any delta is safe: a charge is capped at two bursts (beyond, the debt bound binds
-- anyway), so every product below stays an exact integer.
-- Returns the number of operations applied.

local n = tonumber(ARGV[2])
assert(n and n >= 1 and #KEYS == n and #ARGV == 2 + 9 * n,
  'release.lua: expected n >= 1 keys and 2 + 9n args')

local function fmt(x) return string.format('%.0f', x) end

local now = tonumber(ARGV[1])
local test = now ~= nil
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

for i = 1, n do
  local key, b = KEYS[i], 2 + 9 * (i - 1)
  local op = ARGV[b + 1]
  if op == 'm' then
    local id, from, to = ARGV[b + 2], tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
    local members = {}
    for j = from, to do
      members[#members + 1] = id .. ':' .. fmt(j)
      if #members >= 1000 or j == to then
        redis.call('ZREM', key, unpack(members))
        members = {}
      end
    end
    if redis.call('ZCARD', key) == 0 then redis.call('DEL', key) end
  elseif op == 'b' then
    local pq, pr, den = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
    local burst, delta = tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6])
    local at, since, charged = tonumber(ARGV[b + 7]), tonumber(ARGV[b + 8]), tonumber(ARGV[b + 9])
    -- the state as admit.lua keeps it
    local v = redis.call('GET', key)
    local t, k, r, e = now, 0, 0, 0
    if v then t, k, r, e = struct.unpack('<dddd', v) end
    if k >= den then k = den - 1 end
    -- (whole µs, remainder) of c <= burst tokens: exact (burst × den < 2^53)
    local function units(c)
      local rem = c * pr
      return c * pq + math.floor(rem / den), rem % den
    end
    -- (w, q) + (dw, dq), remainders below den
    local function add(w, q, dw, dq)
      w = w + dw; q = q + dq
      if q >= den then q = q - den; w = w + 1 end
      return w, q
    end
    if delta > 0 then
      -- Behind the last reservation, and at most one burst in debt beyond it: the
      -- state ends at or below from + 2·burst tokens, or where it was.
      local from = math.max(now, r)
      if t < from then t = from; k = 0 end
      local ow, ok = t, k
      local c1 = math.min(delta, burst)
      local c2 = math.min(delta - c1, burst)
      t, k = add(t, k, units(c1))
      t, k = add(t, k, units(c2))
      local bw, bq = units(burst)
      local lw, lq = add(from, 0, bw, bq)
      lw, lq = add(lw, lq, bw, bq)
      if ow > lw or (ow == lw and ok >= lq) then
        t, k = ow, ok
      elseif t > lw or (t == lw and k > lq) then
        t, k = lw, lq
      end
    else
      local cost = math.abs(delta)
      local rem = cost * pr
      local cw, cr = cost * pq + math.floor(rem / den), rem % den
      if since >= 0 and now > since then
        -- this part's share of the refill since the charge, rounded up (whole µs)
        cw = cw - math.ceil((now - since) * cost / math.max(charged, cost, 1))
        if cw < 0 then cw = 0; cr = 0 end
      end
      t = t - cw; k = k - cr
      if k < 0 then k = k + den; t = t - 1 end
      if t < now then t = now; k = 0 end
    end
    if at >= 0 and r == at then r = 0 end
    local full = t + ((k > 0) and 1 or 0)
    if full <= now and r <= now then
      redis.call('DEL', key)
    else
      full = math.max(full, r)
      if test then
        redis.call('SET', key, struct.pack('<dddd', t, k, r, 0),
          'PX', math.ceil((full - now) / 1000) + 1)
      else
        local x = math.ceil(full / 1000) + 1
        if x == e then
          redis.call('SET', key, struct.pack('<dddd', t, k, r, e), 'KEEPTTL')
        else
          redis.call('SET', key, struct.pack('<dddd', t, k, r, x), 'PXAT', x)
        end
      end
    end
  else
    return redis.error_reply('release.lua: unknown operation ' .. tostring(op))
  end
end
return n
