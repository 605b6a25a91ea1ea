"""Tick tuples (Storm's system tick stream): a bolt task gets one in the first
micro-batch after each interval of the driver's clock (core topologies).

Set the interval for every bolt with ``TopologyConfig(tick_tuple_freq_secs=n)``, or per
bolt with ``builder.set_bolt(...).add_configuration("topology.tick.tuple.freq.secs", n)``
(the bolt's setting wins). A tick comes after the micro-batch's other tuples; it carries
one value, the interval, is tracked by no tree, and acking it does nothing::

    def execute(self, tuple):
        if is_tick(tuple):
            self.flush()
            return
"""

from __future__ import annotations

from typing import Any

__all__ = ["is_tick", "TICK_COMPONENT", "TICK_STREAM", "TICK_FREQ_KEY"]

#: The source component and stream of a tick tuple (Storm's ``__system`` / ``__tick``).
TICK_COMPONENT = "__system"
TICK_STREAM = "__tick"
#: The component setting (and Storm's config key) of the tick interval, in seconds.
TICK_FREQ_KEY = "topology.tick.tuple.freq.secs"


def is_tick(tuple: Any) -> bool:
    """True when ``tuple`` is a tick tuple (Storm's ``TupleUtils.isTick``).

    >>> from transactional.tuples import Fields, Tuple
    >>> is_tick(Tuple((5,), Fields("rate_secs"), "__system", "__tick", -1))
    True
    """
    return getattr(tuple, "source_component", None) == TICK_COMPONENT and \
        getattr(tuple, "source_stream", None) == TICK_STREAM
