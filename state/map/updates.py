"""The one write a map takes from Trident's persistence and every other writer
(``MapState.apply``): a batch of per-key updates, each with its updater (``Updated``), or
per-key values folded in with a combiner, as lists or as ``pyarrow`` columns (``Combined``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from state.map.rules import Combine, Updater


@dataclass(frozen=True)
class Updated:
    """``updaters[i](old_or_None) -> new`` applied to ``keys[i]`` (Storm's ``multiUpdate``);
    one updater may serve every key. A key repeated, or updated again later in the txid,
    is updated again on the value so far."""

    keys: Sequence[Any]
    updaters: Sequence[Updater] | Updater

    verb = "update"


@dataclass(frozen=True)
class Combined:
    """``values[i]`` folded into ``keys[i]`` with ``combiner``: ``"sum"``, ``"count"`` (sum
    of counts), ``"min"``, ``"max"``, ``"replace"`` or ``f(old_or_None, new)``. ``keys`` and
    ``values`` are sequences or ``pyarrow`` arrays of one length (an aggregation's groups:
    Storm's ``MapCombinerAggStateUpdater``). ``new_values`` False: nobody reads the new
    values, so a map may write without reading (a ``CounterMap`` adds the columns as they
    are)."""

    keys: Any
    values: Any
    combiner: str | Combine = "sum"
    new_values: bool = True

    verb = "combine"


#: what ``MapState.apply`` takes
MapUpdate = Updated | Combined
