"""The input of the deliberately broken topologies in this directory: a small, fixed word list."""

from spouts import MemoryTransactionalSpout
from transactional import Fields

WORDS = ["cat", "dog", "cow", "moon", "apple", "the"]
DATA = {p: [WORDS[(p * 7 + i * 5) % len(WORDS)] for i in range(12)] for p in range(2)}


def spout() -> MemoryTransactionalSpout:
    """Two partitions of twelve words, three of each per batch: four txids."""
    return MemoryTransactionalSpout(DATA, Fields("word"), 3)
