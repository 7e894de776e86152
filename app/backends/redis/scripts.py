"""Lua scripts: every ownership change and every owner write is one atomic step in Redis.

The run record ``P:{T}:run`` (no TTL) says which fencing token owns the active run; the lease
``P:{T}:lease`` (TTL) says the owner is alive. A write is accepted only when ``run`` still holds
the writer's token, so an owner that lost the run (another instance took over after its lease
expired) cannot append anything after the fence, even if it is still alive.

Token format: ``"<fence number>|<instance id>|<run id>"``.
"""

from __future__ import annotations

from typing import Final

#: KEYS: run, lease, fence.  ARGV: instance, run_id, ttl_ms.
#: -> {"ok", token} | {"busy", holder} | {"lost", holder (its lease expired)}
CLAIM: Final = """
local holder = redis.call('GET', KEYS[1])
if holder then
  if redis.call('EXISTS', KEYS[2]) == 1 then return {'busy', holder} end
  return {'lost', holder}
end
local n = redis.call('INCR', KEYS[3])
local token = n .. '|' .. ARGV[1] .. '|' .. ARGV[2]
redis.call('SET', KEYS[1], token)
redis.call('SET', KEYS[2], token, 'PX', ARGV[3])
return {'ok', token}
"""

#: KEYS: run, lease.  ARGV: token, ttl_ms.  -> 1 renewed | 0 fenced
RENEW: Final = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return 1
"""

#: KEYS: run, lease, fence.  ARGV: instance, expected holder, ttl_ms, run_id.
#: Take a run over from an owner whose lease expired. -> new token | false
TAKEOVER: Final = """
if redis.call('EXISTS', KEYS[2]) == 1 then return false end
if redis.call('GET', KEYS[1]) ~= ARGV[2] then return false end
local n = redis.call('INCR', KEYS[3])
local token = n .. '|' .. ARGV[1] .. '|' .. ARGV[4]
redis.call('SET', KEYS[1], token)
redis.call('SET', KEYS[2], token, 'PX', ARGV[3])
return token
"""

#: KEYS: run, log, lease, snap, abort, cmd, inflight, meta.
#: ARGV: token ('' = only when no run is active), maxlen ("~N" approximate | "=N" exact),
#:       release (0/1),
#:       snapshot state ('' = no snapshot), snapshot extensions, snapshot cursor when n = 0,
#:       n, then n x (kind, data, event type, run id), then the batch nonce ('' = none), then
#:       the id the writer's last batch ended at ('' = none known), then fresh ('1' = the
#:       batch's first send: nothing of it can be in the log yet).
#: Appends the entries, then stores the snapshot (its cursor = the last new id), then releases
#: the run when asked; all or nothing. -> the new stream ids. Error "FENCED" when the token no
#: longer owns the run. A first new id not after the writer's last one means the log lost
#: entries the writer had logged (a failover's promoted replica lacked them) and the new ones
#: may carry their ids: the conversation's incarnation (in every cursor) takes a new epoch,
#: ``<incarnation>~<nonce>``, in the same step, so a cursor of a lost entry reads as unknown.
#: The nonce is stored on the batch's last entry: the same batch run again
#: (redis-py retries a command whose reply was lost) answers its ids and writes nothing. Only
#: a send that may repeat an earlier one looks for it: at one event per append (a slow
#: stream's), the look (XREVRANGE of the newest entry) was a large part of the script's time.
#: An event's entry has no ``k`` field (readers default to ``e``), and the log is trimmed once
#: per batch, not at each XADD. The nonce's entry is written apart from the loop, which then
#: builds no field list per event for it (``unpack``). Each of these made the script cheaper per
#: event (BENCHMARKS.md, "Costs behind the code's shortcuts").
APPEND: Final = """
local n = tonumber(ARGV[7])
local nonce = ARGV[8 + 4 * n] or ''
if nonce ~= '' and n > 0 and ARGV[10 + 4 * n] ~= '1' then
  -- The same batch sent again (a client retry after a lost reply): answer, write nothing.
  -- The newest entry tells (the nonce rides on a batch's last entry); the batch's n entries
  -- are read only then (reading n entries per append cost more than its n XADDs).
  local newest = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
  if #newest == 1 then
    local fields = newest[1][2]
    for j = 1, #fields, 2 do
      if fields[j] == 'b' and fields[j + 1] == nonce then
        local tail = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', n)
        if #tail == n then
          local landed = {}
          for i = n, 1, -1 do landed[#landed + 1] = tail[i][1] end
          return landed
        end
      end
    end
  end
end
local holder = redis.call('GET', KEYS[1])
if ARGV[1] ~= '' then
  if holder ~= ARGV[1] then return redis.error_reply('FENCED') end
elseif holder then
  return redis.error_reply('FENCED')
end
local ids = {}
local log = KEYS[2]
local plain = n
if nonce ~= '' and n > 0 then plain = n - 1 end  -- the last entry carries it: below
for i = 1, plain do
  local at = 4 + 4 * i
  if ARGV[at] == 'e' then  -- an event's kind is not stored: readers default to it
    ids[i] = redis.call('XADD', log, '*', 'd', ARGV[at + 1], 't', ARGV[at + 2], 'r', ARGV[at + 3])
  else
    ids[i] = redis.call('XADD', log, '*', 'k', ARGV[at], 'd', ARGV[at + 1], 't', ARGV[at + 2],
                        'r', ARGV[at + 3])
  end
end
if plain < n then
  local at = 4 + 4 * n
  if ARGV[at] == 'e' then
    ids[n] = redis.call('XADD', log, '*', 'd', ARGV[at + 1], 't', ARGV[at + 2], 'r', ARGV[at + 3],
                        'b', nonce)
  else
    ids[n] = redis.call('XADD', log, '*', 'k', ARGV[at], 'd', ARGV[at + 1], 't', ARGV[at + 2],
                        'r', ARGV[at + 3], 'b', nonce)
  end
end
if n > 0 then
  redis.call('XTRIM', KEYS[2], 'MAXLEN', string.sub(ARGV[2], 1, 1), string.sub(ARGV[2], 2))
  local prev = ARGV[9 + 4 * n] or ''
  if prev ~= '' then
    local pms, pseq = string.match(prev, '^(%d+)-(%d+)$')
    local ms, seq = string.match(ids[1], '^(%d+)-(%d+)$')
    pms, pseq, ms, seq = tonumber(pms), tonumber(pseq), tonumber(ms), tonumber(seq)
    if ms < pms or (ms == pms and seq <= pseq) then  -- not after: the log lost entries
      local inc = redis.call('HGET', KEYS[8], 'inc')
      if inc then
        local epoch = nonce ~= '' and nonce or ids[1]
        redis.call('HSET', KEYS[8], 'inc', string.match(inc, '^[^~]*') .. '~' .. epoch)
      end
    end
  end
end
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[4], 'state', ARGV[4], 'ext', ARGV[5], 'cursor', ids[n] or ARGV[6])
end
if ARGV[3] == '1' then
  redis.call('DEL', KEYS[1], KEYS[3], KEYS[5], KEYS[6], KEYS[7])
end
return ids
"""

#: KEYS: run, lease, inflight, then any keys to delete with them.  ARGV: token.  Give the run
#: up without writing. -> 1 | 0
RELEASE: Final = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', unpack(KEYS))
return 1
"""

#: The abort key's reason once the owner has decided its run's end (``END``).
ENDED: Final = "~ended"

#: KEYS: run, abort, lease.  ARGV: run_id ('' = the active run), reason, flag ttl_ms, channel,
#: the publish command (``SPUBLISH`` on a cluster: the channel shares the keys' slot).
#: Set the abort flag the owner polls AND publish a wake-up (pub/sub may drop).
#: -> the aborted run id | false (nothing running, another run is active, or the owner has
#: already decided how its run ends: an abort answered true always ends it cancelled)
ABORT: Final = """
local holder = redis.call('GET', KEYS[1])
if not holder then return false end
local run_id = string.match(holder, '^[^|]*|[^|]*|(.*)$')
if ARGV[1] ~= '' and ARGV[1] ~= run_id then return false end
if redis.call('GET', KEYS[2]) == run_id .. '|~ended' then return false end
redis.call('SET', KEYS[2], run_id .. '|' .. ARGV[2], 'PX', ARGV[3])
redis.call(ARGV[5] or 'PUBLISH', ARGV[4], 'abort')
return run_id
"""

#: KEYS: abort.  ARGV: run_id, flag ttl_ms.  The owner decides its run's end, atomically with
#: ABORT: -> the reason of an abort already flagged for the run | false (then the flag says
#: "ended" and every later ABORT of the run answers false)
END: Final = """
local flag = redis.call('GET', KEYS[1])
local prefix = ARGV[1] .. '|'
if flag and string.sub(flag, 1, #prefix) == prefix then
  local reason = string.sub(flag, #prefix + 1)
  if reason ~= '~ended' then return reason end
end
redis.call('SET', KEYS[1], prefix .. '~ended', 'PX', ARGV[2])
return false
"""

#: KEYS: run, cmd, inflight.  ARGV: run_id, command JSON ('' = do not queue: the owner is
#: local and delivered it), channel, target id ('' = none), the publish command (``SPUBLISH``
#: on a cluster).
#: Queue a command for the owner of ``run_id`` and wake it; a target with a command already in
#: flight (for this run, cluster-wide) is refused. -> 1 queued | 0 run not active | 2 in flight
COMMAND: Final = """
local holder = redis.call('GET', KEYS[1])
if not holder then return 0 end
local run_id = string.match(holder, '^[^|]*|[^|]*|(.*)$')
if run_id ~= ARGV[1] then return 0 end
if ARGV[4] ~= '' and redis.call('SADD', KEYS[3], ARGV[4]) == 0 then return 2 end
if ARGV[2] ~= '' then
  redis.call('RPUSH', KEYS[2], ARGV[2])
  redis.call(ARGV[5] or 'PUBLISH', ARGV[3], 'cmd')
end
return 1
"""

#: KEYS: meta.  ARGV: incarnation, meta JSON, ref JSON [principal, key] (who the conversation
#: is, for a run ended by another instance's reaper).  Create it unless it exists. -> 1 | 0
CREATE: Final = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'inc', ARGV[1], 'meta', ARGV[2], 'ref', ARGV[3])
return 1
"""

#: KEYS: meta, log, snap, run.  ARGV: incarnation, meta JSON, state JSON, extensions JSON, ref
#: JSON.
#: Create the conversation with its state and an empty log unless it exists (or a run of a
#: forgotten incarnation still holds the slot); what an expired incarnation left is dropped.
#: -> 1 | 0
RESTORE: Final = """
if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('EXISTS', KEYS[4]) == 1 then return 0 end
redis.call('DEL', KEYS[2], KEYS[3])
redis.call('HSET', KEYS[3], 'state', ARGV[3], 'ext', ARGV[4], 'cursor', '0-0')
redis.call('HSET', KEYS[1], 'inc', ARGV[1], 'meta', ARGV[2], 'ref', ARGV[5])
return 1
"""

#: KEYS: meta.  ARGV: meta JSON, its session id, and (optional) its title as JSON: then the
#: meta is saved only while the stored title is that one.  Update the meta of an existing
#: conversation of the same incarnation (a run of a deleted conversation never writes into a
#: new one, whose session id differs). -> 1 | 0 | the stored title as JSON (not saved: it
#: differs from the one given)
SAVE_META: Final = """
local stored = redis.call('HGET', KEYS[1], 'meta')
if not stored then return 0 end
local current = cjson.decode(stored)
if current['sessionId'] ~= ARGV[2] then return 0 end
local title = current['title']
if title == nil then title = cjson.null end  -- a meta without the field: no title
if ARGV[3] and title ~= cjson.decode(ARGV[3]) then
  return cjson.encode(title)
end
redis.call('HSET', KEYS[1], 'meta', ARGV[1])
return 1
"""

#: KEYS: abort flag, command list of each polled run, in pairs.  -> {flag or '', {commands}}
#: per pair; the command lists it returns are emptied (each command is handed over once).
POLL: Final = """
local out = {}
for i = 1, #KEYS, 2 do
  local flag = redis.call('GET', KEYS[i])
  local cmds = redis.call('LRANGE', KEYS[i + 1], 0, -1)
  if #cmds > 0 then redis.call('DEL', KEYS[i + 1]) end
  out[#out + 1] = flag or ''
  out[#out + 1] = cmds
end
return out
"""
