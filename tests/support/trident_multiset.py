"""The multiset of a Trident stream, for tests: ``record(stream, name)`` counts every tuple
the stream carries in a non-transactional map, ``multiset(result, name)`` reads it back."""

from __future__ import annotations

from typing import Any

from state.keys import decode_key, hashable_key
from trident import BaseStateUpdater, state


class Record(BaseStateUpdater):
    """Counts each tuple it is given in a non-transactional map: the multiset of a stream."""

    def update_state(self, st: Any, tuples: Any, collector: Any) -> None:
        st.multi_combine([tuple(t) for t in tuples], [1] * len(tuples), "sum")


def record(stream: Any, name: str) -> None:
    stream.partition_persist(state.non_transactional(name), stream.fields, Record())


def multiset(result: Any, name: str) -> dict[Any, int]:
    m = result.map_state(name)
    return {hashable_key(decode_key(k)): m._committed_value(k, v) for k, v in m.backing.data.items()
            if not k.startswith("~") or k[1:2] in ("s", "b", "j")}
