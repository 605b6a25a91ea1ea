"""Values on the wire: TransactionAttempt, Fields, Values and the Tuple a bolt receives."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
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
    """Ordered field names of a stream, as Storm's ``Fields``; optionally with declared
    Arrow column ``types``.

    ``types`` maps some of the names to an Arrow type: a name pyarrow knows
    (``pyarrow.type_for_alias``: ``"string"``, ``"int64"``, ``"float64"``, ``"bool"``,
    ``"binary"``, ``"timestamp[ms]"``, ``"date32"`` ...) or a ``pyarrow.DataType`` (any
    other type: ``pa.timestamp("ms", tz="UTC")``, ``pa.list_(pa.int64())`` ...). A row
    spout that hands columnar consumers one Arrow batch per emit builds those columns with
    their declared type instead of inferring one (``transactional.columns.rows_batch``;
    docs/trident.md, "Declared column types"). ``fields.types`` holds the parsed
    ``pyarrow.DataType`` of each declared name (empty without); equality, hashing and
    iteration are the names' alone, as a tuple's.

    >>> f = Fields("id", "word")
    >>> f.index("word"), len(f), list(f), f == ("id", "word")
    (1, 2, ['id', 'word'], True)
    >>> Fields("word", "count", types={"count": "int64"})
    Fields('word', 'count', types={'count': 'int64'})
    """

    #: the declared Arrow type of each declared name (a ``pyarrow.DataType``)
    types: Mapping[str, Any]

    def __new__(cls, *names: str | Iterable[str], types: Mapping[str, Any] | None = None) -> Fields:
        """Fields from names given one by one or as one iterable (a ``Fields`` given so
        keeps its types unless ``types`` is given); ``TypeError`` for a name that is not a
        non-empty str, ``ValueError`` for a duplicate, ``TopologyError`` for a type of a
        name not among the fields or a type pyarrow does not know."""
        inherited: Mapping[str, Any] | None = None
        if len(names) == 1 and not isinstance(names[0], str):
            if isinstance(names[0], Fields):
                inherited = names[0].types
            names = tuple(names[0])  # Fields(["a", "b"])
        for n in names:
            if not isinstance(n, str) or not n:
                msg = f"field names must be non-empty strings; got {n!r}"
                raise TypeError(msg)
        if len(set(names)) != len(names):
            msg = f"duplicate field names in {names!r}"
            raise ValueError(msg)
        self = super().__new__(cls, names)
        if types is None:
            self.types = inherited if inherited is not None else _NO_TYPES
        else:
            self.types = _parse_types(self, types) if types else _NO_TYPES
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        # the names, and the types when declared: a worker unpickles the same Fields
        if self.types:
            return (_fields_with_types, (tuple(self), dict(self.types)))
        return (Fields, tuple(self))

    def __repr__(self) -> str:
        names = ", ".join(map(repr, self))
        if not self.types:
            return f"Fields({names})"
        return f"Fields({names}, types={ {k: str(v) for k, v in self.types.items()} !r})"


#: the ``types`` of a Fields without declared types (read-only, shared)
_NO_TYPES: Mapping[str, Any] = MappingProxyType({})


def _fields_with_types(names: tuple[str, ...], types: dict[str, Any]) -> Fields:
    """Unpickle a Fields with declared types."""
    return Fields(names, types=types)


#: Python-ish type names pyarrow does not take, and the Arrow name meant
_HINTS = {"int": "int64", "integer": "int64", "long": "int64", "bytes": "binary", "text": "string",
          "datetime": "timestamp[us]", "timestamp": "timestamp[us]", "real": "float64"}


def _parse_types(fields: Fields, types: Mapping[str, Any]) -> Mapping[str, Any]:
    """``types`` as ``{name: pyarrow.DataType}`` in field order, or ``TopologyError``
    naming the field and the fix."""
    from transactional.exceptions import TopologyError

    where = f"Fields({', '.join(map(repr, fields))})"
    if not isinstance(types, Mapping):
        msg = (f"{where}: types must be a dict of field name -> Arrow type, "
               f"e.g. types={{{fields[0] if fields else 'count'!r}: 'int64'}}; got {types!r}")
        raise TopologyError(msg)
    unknown = [k for k in types if k not in fields]
    if unknown:
        msg = (f"{where}: types declares {unknown[0]!r}, which is not one of the fields "
               f"{list(fields)}; declare types only of the fields (or add {unknown[0]!r} to them)")
        raise TopologyError(msg)
    import pyarrow as pa

    parsed: dict[str, Any] = {}
    for name in fields:
        if name not in types:
            continue
        t = types[name]
        if isinstance(t, pa.DataType):
            parsed[name] = t
            continue
        if isinstance(t, str):
            try:
                parsed[name] = pa.type_for_alias(t.strip())
                continue
            except ValueError:
                pass
        hint = _HINTS.get(t.strip().lower()) if isinstance(t, str) else None
        meant = f" (did you mean {hint!r}?)" if hint else ""
        msg = (f"{where}: field {name!r} is declared with type {t!r}, which is not an Arrow type name "
               f"pyarrow knows{meant}; use one such as 'string', 'int64', 'float64', 'bool', 'binary', "
               f"'timestamp[ms]', 'date32' (pyarrow.type_for_alias), or a pyarrow.DataType such as "
               f"pa.timestamp('ms', tz='UTC') or pa.list_(pa.int64())")
        raise TopologyError(msg)
    return MappingProxyType(parsed)


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
