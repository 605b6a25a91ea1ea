"""The Redis backing's Lua scripts, each headed by its interface (``state/redis.py`` runs them).

No ``redis`` import here: the scripts are text, executed by the server. Their reply codes
are ``Reply``: each script opens with the codes as Lua locals of the same names.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["LUA_FENCED_MSET", "LUA_FENCED_ADD", "LUA_FENCED_MULTI", "LUA_COUNTER_GET", "MSET_CHUNK", "Reply"]


class Reply(IntEnum):
    """The first element of a write script's reply, by name in the Lua (``return {WRITTEN}``)
    and in Python (``RedisMapBacking._raise_for``)."""

    WRITTEN = 0        #: {WRITTEN}: every key written, the fence raised
    TXID_AHEAD = 1     #: {TXID_AHEAD, epoch, txid}: the fence holds a newer txid; nothing written
    NOT_OURS = 2       #: {NOT_OURS, key, what}: a data key holds what the backing does not write
    EPOCH_AHEAD = 3    #: {EPOCH_AHEAD, epoch, txid}: the fence holds a newer epoch; nothing written
    CLAIMED = 4        #: {CLAIMED, key, writer}: another writer of the attempt claimed a key
    ADDED_BEFORE = 5   #: {ADDED_BEFORE, applied}: the counter txid was added before; nothing written


#: The codes as Lua locals, the first line of every write script.
_LUA_REPLY = "local " + ", ".join(r.name for r in Reply) + " = " + ", ".join(str(r.value) for r in Reply) + "\n"

#: Pairs written per ``MSET`` inside the write script (Lua's ``unpack`` has a stack limit).
MSET_CHUNK = 1000


# KEYS[1]        the fence key: "<epoch>:<txid>" (a bare "<txid>" reads as epoch 0)
# KEYS[2]        the claims hash of the writing attempt (key -> writer), or the fence key
#                again when the write claims nothing
# KEYS[3..n+2]   the data keys of the batch
# ARGV[1]        the writer's epoch, or '' not to check epochs
# ARGV[2]        the batch's txid, or '' not to check txids
# ARGV[3]        the writer claiming the keys, or '' (a single writer: no claims)
# ARGV[4]        when Redis deletes the keys (PEXPIREAT, ms; a map with a TTL), or '' (never)
# ARGV[5..n+4]   the serialized values, in KEYS order
# ARGV[n+5]      how many pairs to write per MSET (MSET_CHUNK)
# ARGV[n+6]      how many of the last data keys are trusted to hold strings (no TYPE check)
# return {WRITTEN} when every key was written (and the fence raised to the writer's epoch/txid);
#        {EPOCH_AHEAD, epoch, txid} when the fence holds a newer epoch (nothing written);
#        {TXID_AHEAD, epoch, txid} when the fence holds a newer txid (nothing written);
#        {CLAIMED, key, writer} when another writer of the attempt claimed a key (nothing written);
#        {NOT_OURS, key, type} when a data key holds a non-string Redis value (nothing written)
# the fence check both write scripts open with (KEYS[1], ARGV[1], ARGV[2] as above)
_LUA_FENCE_CHECK = """
local fe, ft = 0, 0
local f = redis.call('GET', KEYS[1])
if f then
  local a, b = string.match(f, '^(%d+):(%d+)$')
  if a then fe, ft = tonumber(a), tonumber(b) else ft = tonumber(f) or 0 end
end
local e, t = tonumber(ARGV[1]), tonumber(ARGV[2])
if e and fe > e then
  return {EPOCH_AHEAD, tostring(fe), tostring(ft)}
end
if t and ft > t then
  return {TXID_AHEAD, tostring(fe), tostring(ft)}
end
"""
_LUA_FENCE_RAISE = """
if (e and e > fe) or (t and t > ft) then
  redis.call('SET', KEYS[1], string.format('%d:%d', math.max(e or 0, fe), math.max(t or 0, ft)))
end
"""
LUA_FENCED_MSET = _LUA_REPLY + _LUA_FENCE_CHECK + """
local writer = ARGV[3]
if writer ~= '' then
  for i = 3, #KEYS do
    local c = redis.call('HGET', KEYS[2], KEYS[i])
    if c and c ~= writer then
      return {CLAIMED, KEYS[i], c}
    end
  end
end
for i = 3, #KEYS - tonumber(ARGV[#ARGV]) do
  local ty = redis.call('TYPE', KEYS[i])['ok']
  if ty ~= 'string' and ty ~= 'none' then
    return {NOT_OURS, KEYS[i], ty}
  end
end
-- write key/value pairs (with their expiry, in the same atomic step), claiming the keys
-- for the writer when there is one
local expire_at = ARGV[4]
local function put(pairs)
  redis.call('MSET', unpack(pairs))
  if expire_at ~= '' then
    for j = 1, #pairs, 2 do
      redis.call('PEXPIREAT', pairs[j], expire_at)
    end
  end
  if writer ~= '' then
    local claims = {}
    for j = 1, #pairs, 2 do
      claims[#claims + 1] = pairs[j]
      claims[#claims + 1] = writer
    end
    redis.call('HSET', KEYS[2], unpack(claims))
  end
end
local chunk = {}
for i = 3, #KEYS do
  chunk[#chunk + 1] = KEYS[i]
  chunk[#chunk + 1] = ARGV[i + 2]
  if #chunk >= 2 * tonumber(ARGV[#ARGV - 1]) then
    put(chunk)
    chunk = {}
  end
end
if #chunk > 0 then
  put(chunk)
end
if writer ~= '' then
  redis.call('EXPIRE', KEYS[2], 86400)
end
""" + _LUA_FENCE_RAISE + """
return {WRITTEN}
"""

# The counter write (``multi_add``): add numbers to keys, once per txid, atomically.
# KEYS[1]        the fence key (as above)
# KEYS[2]        the map's applied marker: the last txid whose additions it holds
# KEYS[3]        the map's record of the txid of the marker (a hash): '~txid' that txid,
#                'batch' ARGV[3] (its keys), 'before' a JSON array of each key's value
#                before it (false: absent) -- what reads of that txid see
#                (state.map.CounterRecord.get; three strings: no field per key to write)
# ARGV[1], [2]   epoch and txid (as above)
# ARGV[3]        the batch as JSON: [[key, ...], [number, ...]] (the keys' full names),
#                numbers as strings (exact, and passed to INCRBY as they are: a Lua number
#                argument would be formatted by Redis, at twice the cost of the script)
# ARGV[4]        'int' (INCRBY) or 'float' (INCRBYFLOAT)
# the rule (state.map.CounterRecord.added): a txid at or below the applied marker was added
# return {WRITTEN} added; {ADDED_BEFORE, applied} the txid was added before (nothing written);
#        {TXID_AHEAD|EPOCH_AHEAD, ...} as above; {NOT_OURS, key, what} a data key holds something
#        that is not a number (nothing written)
#
# The data keys travel inside ARGV[3], not as KEYS: packing 34,000 KEYS arguments in
# redis-py cost the driver more than the script's own work. Standalone Redis allows it
# (Redis Cluster would not; RedisMapBacking writes a txid's keys in one script anyway).
# Every key's value before the add is read first (MGET, 1000 keys at a time): it goes to
# the record, and puts a key back exactly when a later key refuses. Integers are added with
# INCRBY at once, and at the first key that refuses (not an integer, another type, an
# overflow) what was added is taken back: the script is atomic, so nobody sees the partial
# state. Floats are checked before anything is added (x + d - d need not be x).
LUA_FENCED_ADD = _LUA_REPLY + _LUA_FENCE_CHECK + """
local applied = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if t and applied >= t then
  return {ADDED_BEFORE, tostring(applied)}
end
local batch = cjson.decode(ARGV[3])
local ks, ds = batch[1], batch[2]
local olds = {}
for c = 1, #ks, 1000 do
  local vals = redis.call('MGET', unpack(ks, c, math.min(c + 999, #ks)))
  for j = 1, #vals do
    olds[c + j - 1] = vals[j]
  end
end
if ARGV[4] == 'int' then
  for i = 1, #ks do
    local r = redis.pcall('INCRBY', ks[i], ds[i])
    if type(r) == 'table' and r.err then
      for j = i - 1, 1, -1 do
        if olds[j] then
          redis.call('SET', ks[j], olds[j])
        else
          redis.call('DEL', ks[j])
        end
      end
      local what = 'string that is not an integer'
      if string.find(r.err, 'WRONGTYPE') then
        what = 'non-string value'
      elseif string.find(r.err, 'overflow') then
        what = 'number that the addition would overflow'
      end
      return {NOT_OURS, ks[i], what}
    end
  end
else
  for i = 1, #ks do
    local v = olds[i]
    if v then
      if not tonumber(v) then
        return {NOT_OURS, ks[i], 'string that is not a number'}
      end
    elseif redis.call('TYPE', ks[i])['ok'] ~= 'none' then
      return {NOT_OURS, ks[i], 'non-string value'}
    end
  end
  for i = 1, #ks do
    redis.call('INCRBYFLOAT', ks[i], ds[i])
  end
end
if t then
  redis.call('SET', KEYS[2], tostring(t))
  redis.call('HSET', KEYS[3], '~txid', tostring(t), 'batch', ARGV[3], 'before', cjson.encode(olds))
end
""" + _LUA_FENCE_RAISE + """
return {WRITTEN}
"""

# Several maps' writes in one atomic step (``RedisMapBacking.write``): a txid's maps on one
# Redis are all written or none is.
# KEYS           the parts' KEYS, one part after another
# ARGV[1]        the parts as JSON: [["put" | "add", #KEYS, #ARGV], ...]; each part's KEYS
#                and ARGV are what LUA_FENCED_MSET ("put") or LUA_FENCED_ADD ("add") takes
# ARGV[2..]      the parts' ARGV, one part after another
# return {WRITTEN} when every part was written (an "add" part whose txid was added before writes
#        nothing, as its script's {ADDED_BEFORE}); {i, <reply of part i>} when part i refused (its
#        script's codes): part i wrote nothing, and what the parts before it wrote is put
#        back (every key a part but the last may write is saved before the part runs: a
#        string's value, an absent key, or another type's DUMP and TTL -- a part's KEYS,
#        so a counter part's applied marker and ~prior record hash too, and a counter
#        part's data keys), so nothing of the write stays. The caller puts the largest
#        part last: it is not saved.
LUA_FENCED_MULTI = (
    _LUA_REPLY + "local function put_part(KEYS, ARGV)\n" + LUA_FENCED_MSET + "\nend\n"
    + "local function add_part(KEYS, ARGV)\n" + LUA_FENCED_ADD + "\nend\n" + """
local saved, order = {}, {}    -- key -> its string, false (absent) or {dump, pttl}
local function save(names)
  local fresh = {}
  for _, k in ipairs(names) do
    if saved[k] == nil then
      saved[k] = false
      fresh[#fresh + 1] = k
    end
  end
  for c = 1, #fresh, 1000 do
    local chunk = {unpack(fresh, c, math.min(c + 999, #fresh))}
    local vals = redis.call('MGET', unpack(chunk))
    for j, k in ipairs(chunk) do
      if vals[j] then
        saved[k] = vals[j]
      elseif redis.call('TYPE', k)['ok'] ~= 'none' then
        saved[k] = {redis.call('DUMP', k), redis.call('PTTL', k)}
      end
      order[#order + 1] = k
    end
  end
end
local function restore()
  for _, k in ipairs(order) do
    local s = saved[k]
    if s == false then
      redis.call('DEL', k)
    elseif type(s) == 'string' then
      redis.call('SET', k, s)
    else
      redis.call('RESTORE', k, math.max(s[2], 0), s[1], 'REPLACE')
    end
  end
end
local parts = cjson.decode(ARGV[1])
local ki, ai = 0, 1
for i, p in ipairs(parts) do
  local ks, as = {}, {}
  for j = 1, p[2] do ks[j] = KEYS[ki + j] end
  for j = 1, p[3] do as[j] = ARGV[ai + j] end
  ki, ai = ki + p[2], ai + p[3]
  -- the last part needs no saving: a refused part writes nothing, and nothing follows it
  if i < #parts then
    save(ks)
    if p[1] == 'add' then
      save(cjson.decode(as[3])[1])
    end
  end
  local r
  if p[1] == 'put' then
    r = put_part(ks, as)
  else
    r = add_part(ks, as)
  end
  if r[1] ~= WRITTEN and r[1] ~= ADDED_BEFORE then
    restore()
    local out = {i}
    for _, x in ipairs(r) do out[#out + 1] = x end
    return out
  end
end
return {WRITTEN}
""")

# The counter read (``counter_get``): values, and the record of the applied txid when a
# read of that very txid needs it (a replay), in one round trip.
# KEYS[1]        the map's applied marker; KEYS[2] its record (as above)
# KEYS[3..n+2]   the data keys
# ARGV[1]        the txid whose reads need the record
# return {applied or nil, {~txid, batch, before} or nil, {value or nil, ...}}
LUA_COUNTER_GET = """
local applied = redis.call('GET', KEYS[1])
local vals = {}
for c = 3, #KEYS, 1000 do
  local part = redis.call('MGET', unpack(KEYS, c, math.min(c + 999, #KEYS)))
  for j = 1, #part do
    vals[#vals + 1] = part[j]
  end
end
local rec = false
if applied and applied == ARGV[1] then
  rec = redis.call('HMGET', KEYS[2], '~txid', 'batch', 'before')
end
return {applied, rec, vals}
"""
