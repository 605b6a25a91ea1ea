"""The Redis Cluster backing's Lua scripts (``state/redis_cluster.py`` runs them), built from
the single-server scripts of ``state/redis_scripts.py``: the same parts, run per node.

A cluster routes a script by its declared KEYS, which must all hash to one slot. A
txid's write on a node spans many slots, so the scripts declare one key (an anchor in a
slot of the node, for routing and ``MOVED``) and take the parts' keys in ARGV; the
``allow-cross-slot-keys`` flag lets a script touch keys of several slots of its node.
Every command inside still names keys of one slot only: a part is one map's keys of one
slot, with that slot's fence key (``<scope>:~fence{<tag>}``).
"""

from __future__ import annotations

from state.redis_scripts import LUA_COUNTER_GET, LUA_FENCED_MULTI

__all__ = ["LUA_CLUSTER_MULTI", "LUA_CLUSTER_COUNTER_GET"]

_FLAGS = "#!lua flags=allow-cross-slot-keys\n"

# ARGV[1]       n: how many of the following ARGV are the parts' keys
# ARGV[2..n+1]  the parts' keys, one part after another (what LUA_FENCED_MULTI takes as KEYS)
# ARGV[n+2..]   LUA_FENCED_MULTI's ARGV (the parts' header first)
# KEYS[1]       the anchor: a key of one slot of this node (routing only)
# Step 1 reads every key of every part (EXISTS, one part = one slot at a time): a key whose
# slot this node does not serve (moved, migrating) fails the script there, before anything
# is written, so a node takes its parts whole or not at all. Step 2 is LUA_FENCED_MULTI.
# return as LUA_FENCED_MULTI
LUA_CLUSTER_MULTI = _FLAGS + """
local n = tonumber(ARGV[1])
local K, A = {}, {}
for i = 1, n do K[i] = ARGV[i + 1] end
for i = n + 2, #ARGV do A[#A + 1] = ARGV[i] end
local parts = cjson.decode(A[1])
local ki, ai = 0, 1
for _, p in ipairs(parts) do
  for c = ki + 1, ki + p[2], 1000 do
    redis.call('EXISTS', unpack(K, c, math.min(c + 999, ki + p[2])))
  end
  if p[1] == 'add' then
    local ks = cjson.decode(A[ai + 3])[1]
    for c = 1, #ks, 1000 do
      redis.call('EXISTS', unpack(ks, c, math.min(c + 999, #ks)))
    end
  end
  ki, ai = ki + p[2], ai + p[3]
end
local function multi(KEYS, ARGV)
""" + LUA_FENCED_MULTI + """
end
return multi(K, A)
"""

# ARGV[1]       the txid whose reads need the records (LUA_COUNTER_GET's ARGV[1])
# ARGV[2..]     the slots' groups: a count c, then c keys (LUA_COUNTER_GET's KEYS: the slot's
#               applied marker, its record, its data keys), group after group
# KEYS[1]       the anchor (as above)
# return one LUA_COUNTER_GET reply per group, in order
LUA_CLUSTER_COUNTER_GET = _FLAGS + """
local function get(KEYS, ARGV)
""" + LUA_COUNTER_GET + """
end
local out, i = {}, 2
while i <= #ARGV do
  local c = tonumber(ARGV[i])
  local ks = {}
  for j = 1, c do ks[j] = ARGV[i + j] end
  out[#out + 1] = get(ks, {ARGV[1]})
  i = i + c + 1
end
return out
"""
