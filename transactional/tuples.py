"""Values on the wire: TransactionAttempt, Fields, Values and the Tuple a bolt receives."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple


class TransactionAttempt(NamedTuple):
    """``(txid, attempt_id)``: the id of one emission of one batch.

    ``txid`` is 1, 2, 3 ... and forever the same for a batch; ``attempt_id`` is new on every
    re-emit (1 for the first attempt, then 2, 3 ...), so tuples of an old attempt are never
    mistaken for a replay's.

    >>> tx = TransactionAttempt(7, 1)
    >>> tx.transaction_id, tx.attempt_id
    (7, 1)
    """

    txid: int
    attempt_id: int

    @property
    def transaction_id(self) -> int:
        """Storm's ``getTransactionId()``."""
        return self.txid

    def __repr__(self) -> str:
        return f"TransactionAttempt(txid={self.txid}, attempt_id={self.attempt_id})"


class Fields(tuple[Any, ...]):
    """Ordered field names of a stream, as Storm's ``Fields``.

    >>> f = Fields("id", "word")
    >>> f.index("word"), len(f), list(f)
    (1, 2, ['id', 'word'])
    """

    def __new__(cls, *names: str | Iterable[str]) -> Fields:
        """Fields from names given one by one or as one iterable; ``TypeError`` for a name that
        is not a non-empty str, ``ValueError`` for a duplicate."""
        if len(names) == 1 and not isinstance(names[0], str):
            names = tuple(names[0])  # Fields(["a", "b"])
        for n in names:
            if not isinstance(n, str) or not n:
                msg = f"field names must be non-empty strings; got {n!r}"
                raise TypeError(msg)
        if len(set(names)) != len(names):
            msg = f"duplicate field names in {names!r}"
            raise ValueError(msg)
        return super().__new__(cls, names)

    def __repr__(self) -> str:
        return f"Fields({', '.join(map(repr, self))})"


def Values(*values: Any) -> tuple[Any, ...]:
    """The values of one tuple, as Storm's ``new Values(...)``: a plain Python tuple.

    >>> Values("tx", "word", 3)
    ('tx', 'word', 3)
    """
    return values


class Tuple:
    """A tuple as a bolt's ``execute`` receives it: values plus where they came from.

    Access by index or by field name; ``values[0]`` of a transactional tuple is its
    ``TransactionAttempt``.

    >>> t = Tuple(("tx", "cow", 2), Fields("id", "word", "n"), "split", "default", 0)
    >>> t[1], t["n"], t.get_string(1), t.source_component
    ('cow', 2, 'cow', 'split')
    """

    __slots__ = ("values", "fields", "source_component", "source_stream", "source_task")

    def __init__(self, values: tuple[Any, ...], fields: Fields, source_component: str,
                 source_stream: str = "default", source_task: int = 0) -> None:
        self.values = values
        self.fields = fields
        self.source_component = source_component
        self.source_stream = source_stream
        self.source_task = source_task

    def __getitem__(self, key: int | str) -> Any:
        if isinstance(key, str):
            return self.values[self.fields.index(key)]
        return self.values[key]

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.values)

    def __repr__(self) -> str:
        return (f"Tuple({self.values!r}, source={self.source_component!r}, "
                f"stream={self.source_stream!r}, task={self.source_task})")

    # Storm-style accessors, for code ported from Java.
    def get_value(self, i: int) -> Any:
        """The value at index ``i`` (Storm's ``getValue``)."""
        return self.values[i]

    def get_value_by_field(self, name: str) -> Any:
        """The value of field ``name`` (Storm's ``getValueByField``)."""
        return self.values[self.fields.index(name)]

    get_string = get_integer = get_long = get_value

    def contains(self, name: str) -> bool:
        """True when the tuple has a field ``name`` (Storm's ``contains``)."""
        return name in self.fields

    def select(self, fields: Sequence[str]) -> tuple[Any, ...]:
        """The values of ``fields``, in that order."""
        return tuple(self.values[self.fields.index(f)] for f in fields)
