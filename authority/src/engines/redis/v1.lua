-- grantid Redis authority, script version 1: the allocation rule of
-- docs/DESIGN.md section 2, the same as grantid.acquire in authority/src/engines/postgres/v1.sql. A script
-- runs atomically: no other command runs between its reads and writes.
-- Works on Redis 7.0 (no per-field hash TTL is used).
--
-- KEYS[1] = "grantid:{<namespace>}": the prefix of every key of the
-- namespace (one hash slot, thanks to the braces):
--   <p>:layout      hash  timestamp_bits worker_bits sequence_bits epoch_ms tick_ms next_unused
--                         split_bits (absent: 0) max_lead_ms clock_skew_ms (the largest
--                         every caller used on the namespace, raised, never lowered)
--   <p>:w:<worker>  hash  holder lease_expiry high_water fencing   (one per worker ever used)
--   <p>:held        zset  worker -> lease_expiry, workers with a holder
--   <p>:free        zset  worker -> release tick, released workers
--   <p>:inc:<inc>   hash  the last answer to incarnation <inc> (request_id worker
--                         grant_id start end), expiring with its lease
--   <p>:log         stream every grant: worker incarnation request_id grant_id
--                         start end now_ms
-- Incarnations and request ids travel as decimal strings (they are 64-bit);
-- ticks as numbers, exact below 2^53 (the adapter refuses wider layouts).
--
-- ARGV[1] = "acquire":
--   2 incarnation, 3 request_id, 4 worker ("" = any), 5 not_before,
--   6 duration, 7 timestamp_bits, 8 worker_bits, 9 sequence_bits,
--   10 epoch_ms, 11 tick_ms, 12 lease_grace (ticks), 13 now_ms ("" = TIME),
--   14 log_max (0 = keep every entry)
--   returns {"granted", worker, grant_id, start, end}, {"lost", message}
--   (held by another, or none free), {"refused", message} (never possible as
--   asked: another layout, a worker out of range) or {"wait", message} (every
--   free worker's high-water is ahead of the clock: retry)
-- ARGV[1] = "release": 2 incarnation, 3 worker, 4 now_ms ("" = TIME)
--   returns 1 if the lease was held by the incarnation and is now ended
--
-- State loss (docs/AUTHORITIES.md, "State loss"). "grantid:store" (KEYS[2]
-- when given, else that name; KEYS[1] for "fence" and "new_deployment") is a
-- hash of the whole store: run_id (the server's INFO run_id when it last
-- granted, read here, never trusted from a client), epoch (+1 per
-- quarantine), quarantine_until (Unix ms: no grant before it), reason.
-- acquire takes 16 max_lead_ms (default 7000) and 17 clock_skew_ms (default
-- 1000), optional: a store without the hash (never used, or wiped: they look
-- the same) or with another run_id (a restart, possibly from a stale
-- snapshot, or a failover) is quarantined until now + max_lead + skew before
-- anything is granted, and no grant ends more than max_lead after the
-- server's clock, so every interval granted before a loss has ended when the
-- quarantine does; a renewal (a worker asked for) during a quarantine is
-- {"lost", message}. (ARGV[15] is unused.) A quarantine records when it
-- started (q_since); a namespace used with a longer lead or skew than the
-- caller that started it waits until q_since + its recorded ones. ARGV[18]
-- (optional, default 0) is the layout's datacenter split, registered with
-- the layout. A renewal whose not_before lies beyond the worker's
-- high-water proves that the store forgot a grant (grantid::forgotten_grant):
-- {"lost", message}, and a quarantine until that grant has ended, unless it
-- lies beyond any grant the store could have made (grantid::evidence_bound:
-- now + ceil((lead + skew) / tick)): {"lost", message}, and no quarantine.
-- ARGV[1] = "fence": 3 max_lead_ms, 4 clock_skew_ms, 5 now_ms: a new
--   quarantine from now (the operator's command after a restore)
-- ARGV[1] = "new_deployment": 3 now_ms: creates the store hash without a
--   quarantine if it is missing (the operator knows no ID was
--   ever issued from this store); returns 1 if created

local p = KEYS[1]
local function fmt(x) return string.format('%.0f', x) end

local function now_ms(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function ticks(ms, epoch, tick)
  local d = ms - epoch
  if d < 0 then d = 0 end
  return math.floor(d / tick)
end

-- A worker number as the decimal string every key uses ("7", never "07" or
-- "7.0"), or nil when the argument is not a whole number.
local function worker_key(arg)
  local n = tonumber(arg)
  if not n or n < 0 or n ~= math.floor(n) then return nil end
  return fmt(n), n
end

-- The server's run_id, from INFO (it changes on every restart).
local function server_run_id()
  return string.match(redis.call('INFO', 'server'), 'run_id:(%x+)') or 'unknown'
end

-- Starts (or extends) a quarantine until ms + lead + skew.
local function quarantine(sk, run_id, ms, lead, skew, reason)
  local q = ms + lead + skew
  local old = tonumber(redis.call('HGET', sk, 'quarantine_until') or '0')
  if old > q then q = old end
  redis.call('HINCRBY', sk, 'epoch', 1)
  local since = tonumber(redis.call('HGET', sk, 'q_since') or '0')
  if since < ms then since = ms end
  redis.call('HSET', sk, 'run_id', run_id, 'quarantine_until', fmt(q), 'reason', reason,
             'since_ms', fmt(ms), 'q_since', fmt(since))
  return q
end

if ARGV[1] == 'fence' then
  local ms = now_ms(ARGV[5])
  return fmt(quarantine(KEYS[1], server_run_id(), ms, tonumber(ARGV[3]), tonumber(ARGV[4]),
                        'fenced by the operator'))
end

if ARGV[1] == 'new_deployment' then
  if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
  redis.call('HSET', KEYS[1], 'run_id', server_run_id(), 'epoch', '1', 'quarantine_until', '0',
             'reason', 'new deployment (operator)', 'since_ms', fmt(now_ms(ARGV[3])))
  return 1
end

if ARGV[1] == 'release' then
  local inc, w = ARGV[2], worker_key(ARGV[3])
  if not w then return 0 end
  local lay = redis.call('HMGET', p .. ':layout', 'epoch_ms', 'tick_ms')
  if not lay[1] then return 0 end
  local wk = p .. ':w:' .. w
  if redis.call('HGET', wk, 'holder') ~= inc then return 0 end
  local now = ticks(now_ms(ARGV[4]), tonumber(lay[1]), tonumber(lay[2]))
  local exp = tonumber(redis.call('HGET', wk, 'lease_expiry'))
  if now < exp then exp = now end
  redis.call('HDEL', wk, 'holder')
  redis.call('HSET', wk, 'lease_expiry', fmt(exp))
  redis.call('ZREM', p .. ':held', w)
  redis.call('ZADD', p .. ':free', exp, w)
  return 1
end

if ARGV[1] ~= 'acquire' then
  return redis.error_reply('grantid: unknown operation ' .. tostring(ARGV[1]))
end

local inc, req, want = ARGV[2], ARGV[3], ARGV[4]
local not_before, duration = tonumber(ARGV[5]), tonumber(ARGV[6])
local tb, wb, sb = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local epoch, tick = tonumber(ARGV[10]), tonumber(ARGV[11])
local grace, log_max = tonumber(ARGV[12]), tonumber(ARGV[14])
local limit, count = 2 ^ tb, 2 ^ wb
local split = ARGV[18] or ''
if split == '' then split = '0' end
local max_lead = tonumber(ARGV[16] or '') or 7000
local skew = tonumber(ARGV[17] or '') or 1000

-- A retry gets the recorded grant.
local ans = p .. ':inc:' .. inc
local last = redis.call('HMGET', ans, 'request_id', 'worker', 'grant_id', 'start', 'end')
if last[1] == req then
  return {'granted', last[2], last[3], last[4], last[5]}
end

-- The namespace, registered with its layout on first use.
local lk = p .. ':layout'
local lay = redis.call('HMGET', lk, 'timestamp_bits', 'worker_bits', 'sequence_bits',
                       'epoch_ms', 'tick_ms', 'next_unused', 'split_bits', 'max_lead_ms',
                       'clock_skew_ms')
if not lay[1] then
  redis.call('HSET', lk, 'timestamp_bits', ARGV[7], 'worker_bits', ARGV[8],
             'sequence_bits', ARGV[9], 'epoch_ms', ARGV[10], 'tick_ms', ARGV[11],
             'next_unused', '0', 'split_bits', split)
  lay = {ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], '0', split}
end
lay[7] = lay[7] or '0'
if lay[1] ~= ARGV[7] or lay[2] ~= ARGV[8] or lay[3] ~= ARGV[9]
    or lay[4] ~= ARGV[10] or lay[5] ~= ARGV[11] or lay[7] ~= split then
  return {'refused', string.format(
    'namespace is registered with another layout (%s/%s/%s bits, epoch %s ms, tick %s ms, ' ..
    'datacenter split %s bits)', lay[1], lay[2], lay[3], lay[4], lay[5], lay[7])}
end
-- The longest lead and skew any caller used on the namespace, raised before
-- this caller's grant can exist.
local ns_lead, ns_skew = tonumber(lay[8] or '0'), tonumber(lay[9] or '0')
if ns_lead < max_lead then
  ns_lead = max_lead
  redis.call('HSET', lk, 'max_lead_ms', fmt(ns_lead))
end
if ns_skew < skew then
  ns_skew = skew
  redis.call('HSET', lk, 'clock_skew_ms', fmt(ns_skew))
end

-- Authority time: the server's clock, in ticks of the layout.
local ms = now_ms(ARGV[13])
local now = ticks(ms, epoch, tick)

-- State loss: nothing is granted from a store that may have lost grants
-- until every interval granted before the loss has ended.
local sk, run_id = KEYS[2] or 'grantid:store', server_run_id()
local st = redis.call('HMGET', sk, 'run_id', 'quarantine_until', 'reason')
local q = tonumber(st[2] or '0')
if not st[1] then
  q = quarantine(sk, run_id, ms, max_lead, skew,
                 'the store had no grantid state (never used, or lost)')
elseif st[1] ~= run_id then
  q = quarantine(sk, run_id, ms, max_lead, skew, string.format(
    'the server\'s run_id changed from %s to %s (a restart or a failover)', st[1], run_id))
end
local since = tonumber(redis.call('HGET', sk, 'q_since') or '0')
if since > 0 and since + ns_lead + ns_skew > q then q = since + ns_lead + ns_skew end
if ms < q then
  local why = redis.call('HGET', sk, 'reason')
  local gate = string.format('quarantine: %s; no grant before Unix ms %s (%s ms from now), ' ..
    'when every interval granted before it has ended', why, fmt(q), fmt(q - ms))
  if want ~= '' then
    -- A renewal: the worker's earlier grants were made before what started
    -- the quarantine (a loss, a restore, a fence), by a history that may no
    -- longer exist. Its generator stops issuing from them now and asks for
    -- a new worker, which waits out the quarantine.
    return {'lost', string.format('worker %s: %s; the grants it holds came from before it: ' ..
      'stop issuing from them and acquire again', want, gate)}
  end
  return {'wait', gate}
end

local w
if want ~= '' then
  local ws_
  ws_, w = worker_key(want)
  if not w or w >= count then
    return {'refused', string.format('worker %s is outside the namespace\'s %s workers', want, fmt(count))}
  end
  local rec = redis.call('HMGET', p .. ':w:' .. ws_, 'holder', 'lease_expiry', 'high_water')
  -- The forgotten-grant check, before the holder's: the holder's grants end
  -- beyond the worker's high-water, so the store lost a grant it made (a
  -- stale snapshot, a restore its run_id does not show), whoever the store
  -- says holds the worker now. The quarantine lasts until they have ended
  -- too.
  local whw = tonumber(rec[3] or '0')
  -- Evidence only within the latest end any grant of the store can have
  -- (grantid::evidence_bound): beyond it, no holder could send it, and
  -- nothing starts.
  local bound = now + math.floor((ns_lead + ns_skew + tick - 1) / tick)
  if not_before > whw and not_before > bound then
    return {'lost', string.format('worker %s: a renewal from tick %s is not evidence of a ' ..
      'lost grant: it is beyond any grant the store could have made (tick %s: the ' ..
      'authority\'s clock plus max_lead_ms and clock_skew_ms); no quarantine starts, and ' ..
      'no grant is made', ws_, fmt(not_before), fmt(bound))}
  end
  if not_before > whw then
    local why = string.format('worker %s: its holder holds grants until tick %s, beyond the ' ..
      'store\'s high-water (tick %s): the store forgot a grant it made (restored from a ' ..
      'backup or a snapshot?); stop issuing from them and acquire again', ws_,
      fmt(not_before), fmt(whw))
    local lead = epoch + not_before * tick - ms
    if lead < ns_lead then lead = ns_lead end
    quarantine(sk, run_id, ms, lead, ns_skew, why)
    return {'lost', why}
  end
  if rec[1] and rec[1] ~= inc and tonumber(rec[2]) > now then
    return {'lost', string.format('worker %s is held by incarnation %s until tick %s',
                                  ws_, rec[1], rec[2])}
  end
else
  -- Never-used workers first.
  local nu = tonumber(lay[6])
  while not w and nu < count do
    local cand = nu
    nu = nu + 1
    if redis.call('EXISTS', p .. ':w:' .. fmt(cand)) == 0 then w = cand end
  end
  redis.call('HSET', lk, 'next_unused', fmt(nu))
  if not w then
    -- Then the one rule of docs/AUTHORITIES.md ("Which worker"): usable now
    -- (high-water not after the clock) first, else the nearest high-water;
    -- released before expired; the longest released or expired; the lowest
    -- number. Every released and every expired worker is compared.
    local best, best_key
    local function consider(member, expiry, held)
      local c = tonumber(member)
      if not c or c >= count then return end
      local hw = tonumber(redis.call('HGET', p .. ':w:' .. member, 'high_water') or '0')
      local waits = hw > now
      local key = {waits and 1 or 0, waits and hw or 0, held, tonumber(expiry), c}
      if not best_key then
        best, best_key = c, key
        return
      end
      for i = 1, #key do
        if key[i] ~= best_key[i] then
          if key[i] < best_key[i] then best, best_key = c, key end
          return
        end
      end
    end
    local free = redis.call('ZRANGE', p .. ':free', 0, -1, 'WITHSCORES')
    for i = 1, #free, 2 do consider(free[i], free[i + 1], 0) end
    local expired = redis.call('ZRANGEBYSCORE', p .. ':held', '-inf', fmt(now), 'WITHSCORES')
    for i = 1, #expired, 2 do consider(expired[i], expired[i + 1], 1) end
    w = best
    if w then
      -- A first grant starts at most 100 ms ahead of the clock (the
      -- generator's default max_wait): further ahead, retry later.
      local hw = best_key[2]
      if hw > now + math.ceil(100 / tick) then
        return {'wait', string.format('every free worker\'s high-water is ahead of the clock: ' ..
          'the nearest, worker %s, by %s ticks; a first grant waits for it', fmt(w), fmt(hw - now))}
      end
    end
  end
  if not w then
    return {'lost', string.format('no free worker among the namespace\'s %s workers', fmt(count))}
  end
end

-- The grant: after every interval ever granted for the worker.
local ws = fmt(w)
local wk = p .. ':w:' .. ws
local rec = redis.call('HMGET', wk, 'high_water', 'fencing')
local hw, fencing = tonumber(rec[1] or '0'), tonumber(rec[2] or '0')
local start = math.max(hw, now, not_before)
local stop = math.min(start + duration, limit)
if start >= stop then
  return {'lost', string.format('worker %s has no timestamp space left (high-water %s)', ws, fmt(hw))}
end
-- The bounded lead: no grant ends more than max_lead after the clock.
local lead_end = now + math.floor(max_lead / tick)
if stop > lead_end then stop = lead_end end
if start >= stop then
  return {'wait', string.format('worker %s: a grant from tick %s would end more than max_lead ' ..
    '(%s ms) after the clock', ws, fmt(start), fmt(max_lead))}
end
fencing = fencing + 1
local expiry = stop + grace
redis.call('HSET', wk, 'holder', inc, 'lease_expiry', fmt(expiry),
           'high_water', fmt(stop), 'fencing', fmt(fencing))
redis.call('ZADD', p .. ':held', expiry, ws)
redis.call('ZREM', p .. ':free', ws)
redis.call('DEL', ans)
redis.call('HSET', ans, 'request_id', req, 'worker', ws, 'grant_id', fmt(fencing),
           'start', fmt(start), 'end', fmt(stop))
-- The answer outlives the lease by a minute: retries come before that.
redis.call('PEXPIRE', ans, math.floor((expiry - now) * tick) + 60000)
if log_max > 0 then
  redis.call('XADD', p .. ':log', 'MAXLEN', '~', fmt(log_max), '*', 'worker', ws,
             'incarnation', inc, 'request_id', req, 'grant_id', fmt(fencing),
             'start', fmt(start), 'end', fmt(stop), 'now_ms', fmt(ms))
else
  redis.call('XADD', p .. ':log', '*', 'worker', ws, 'incarnation', inc,
             'request_id', req, 'grant_id', fmt(fencing), 'start', fmt(start),
             'end', fmt(stop), 'now_ms', fmt(ms))
end
return {'granted', ws, fmt(fencing), fmt(start), fmt(stop)}
