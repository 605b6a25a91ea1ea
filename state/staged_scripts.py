"""The Lua scripts of staged counter adds (``state/staged.py`` runs them): processing tasks
stage a txid's additions beside the counter map, the commit applies them by reference.

Both scripts are flagged ``allow-cross-slot-keys`` and take their keys in ARGV (one
declared key routes them on a Redis Cluster, as ``state/redis_cluster_scripts.py``); every
command inside names keys of one slot. On one Redis every "slot" is the map's one set of
keys. The apply wraps ``LUA_FENCED_ADD``: a slot's staged parts become one add of that
script, with the slot's fence, applied marker and record, so what it leaves is exactly
what ``CounterMap`` would have written (readers, the cut and replays see no difference).
"""

from __future__ import annotations

from enum import IntEnum

from state.redis_scripts import LUA_FENCED_ADD

__all__ = ["LUA_STAGE", "LUA_APPLY_STAGED", "Staged"]

_FLAGS = "#!lua flags=allow-cross-slot-keys\n"


class Staged(IntEnum):
    """The first element of the staging scripts' replies."""

    DONE = 0         #: {DONE}: staged (LUA_STAGE) or applied (LUA_APPLY_STAGED)
    FENCED = 1       #: {FENCED, group, epoch, txid}: a slot's fence holds a newer epoch or txid; nothing done
    MISSING = 2      #: {MISSING, group, key}: a staged part is gone (expired, lost in a failover); nothing done
    REFUSED = 3      #: {REFUSED, group, <LUA_FENCED_ADD reply>}: a slot's add refused (a key not a number)


# KEYS[1]       the anchor (routing only)
# ARGV[1]       the staging task's epoch
# ARGV[2]       how long a staged part lives (PX, ms): an attempt that never commits leaves nothing for good
# ARGV[3..]     triples: a slot's fence key, the staged part's key, the part (LUA_FENCED_ADD's batch JSON)
# return {DONE}; {FENCED, i, epoch, txid} when triple i's fence holds a newer epoch (nothing staged)
LUA_STAGE = _FLAGS + """
local e = tonumber(ARGV[1])
for i = 3, #ARGV, 3 do
  local f = redis.call('GET', ARGV[i])
  if f then
    local a, b = string.match(f, '^(%d+):(%d+)$')
    if a and tonumber(a) > e then return {1, tostring((i - 1) / 3), a, b} end
  end
end
for i = 3, #ARGV, 3 do
  redis.call('SET', ARGV[i + 1], ARGV[i + 2], 'PX', ARGV[2])
end
return {0}
"""

# KEYS[1]       the anchor (routing only)
# ARGV[1], [2]  the committing driver's epoch and the txid
# ARGV[3]       'int' (INCRBY) or 'float' (INCRBYFLOAT)
# ARGV[4..]     groups, one per slot: the slot's fence key, applied marker, record hash, a
#               count n, then the n staged parts' keys
# Step 1 checks every group before anything is written: its fence (epoch and txid not newer
# than ours) and, unless the slot's marker says the txid was added already, that every
# staged part is there. Step 2 adds each group's parts (merged when several tasks staged the
# slot) with LUA_FENCED_ADD and deletes the parts.
# return {DONE, groups added}; {FENCED, ...} / {MISSING, ...} from step 1 (nothing written);
#        {REFUSED, i, reply} when group i's add refused (groups before it stay added: only a
#        key that is not a number does this, and its replay refuses the same way)
LUA_APPLY_STAGED = _FLAGS + """
local function add(KEYS, ARGV)
""" + LUA_FENCED_ADD + """
end
local e, t = tonumber(ARGV[1]), tonumber(ARGV[2])
local groups, i = {}, 4
while i <= #ARGV do
  local n = tonumber(ARGV[i + 3])
  local g = {ARGV[i], ARGV[i + 1], ARGV[i + 2], {}}
  for j = 1, n do g[4][j] = ARGV[i + 3 + j] end
  groups[#groups + 1] = g
  i = i + 4 + n
end
-- Step 1. check every group
local todo = {}
for gi, g in ipairs(groups) do
  local f = redis.call('GET', g[1])
  if f then
    local a, b = string.match(f, '^(%d+):(%d+)$')
    if a and (tonumber(a) > e or tonumber(b) > t) then return {1, tostring(gi), a, b} end
  end
  local applied = tonumber(redis.call('GET', g[2]) or '0') or 0
  if applied < t then
    for _, k in ipairs(g[4]) do
      if redis.call('EXISTS', k) == 0 then return {2, tostring(gi), k} end
    end
    todo[#todo + 1] = gi
  elseif #g[4] > 0 then
    redis.call('DEL', unpack(g[4]))
  end
end
-- Step 2. add each group's parts, merged
for _, gi in ipairs(todo) do
  local g = groups[gi]
  local batch
  if #g[4] == 1 then
    batch = redis.call('GET', g[4][1])
  else
    local ks, ds, at = {}, {}, {}
    for _, k in ipairs(g[4]) do
      local b = cjson.decode(redis.call('GET', k))
      for j = 1, #b[1] do
        local x = at[b[1][j]]
        if x then
          ds[x] = string.format('%.17g', tonumber(ds[x]) + tonumber(b[2][j]))
        else
          ks[#ks + 1] = b[1][j]
          ds[#ds + 1] = b[2][j]
          at[b[1][j]] = #ks
        end
      end
    end
    batch = cjson.encode({ks, ds})
  end
  local r = add({g[1], g[2], g[3]}, {ARGV[1], ARGV[2], batch, ARGV[3]})
  if r[1] ~= 0 and r[1] ~= 5 then return {3, tostring(gi), unpack(r)} end
  redis.call('DEL', unpack(g[4]))
end
return {0, tostring(#todo)}
"""
