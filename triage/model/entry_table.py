"""A flight-recorder dump's entries held field by field: one compact column per field of
FlightRecorderEntry, read as a sequence of entries or by column.

1,024 ranks x 2,000 entries is two million records: as NamedTuples (20 slots, three
distinct timestamps each) they hold ~330 bytes apiece, which is what `--fr-entries 0` cost.
Here a field with few distinct values (op names, shapes, dtypes, stacks, states, process
groups) is a table of those values and one small code per entry, and any other integer or
float field is a typed `array`: 44 bytes an entry of bench/fr_scale.py's dumps. An entry is
built only when asked for.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Iterator, Sequence
from itertools import repeat
from typing import Any, overload

from triage.model.payloads import FlightRecorderEntry

__all__ = ["Column", "EntryTable"]

_FIELDS: tuple[str, ...] = FlightRecorderEntry._fields
_FIELD_INDEX = {name: i for i, name in enumerate(_FIELDS)}
# Signed array type codes from the narrowest; each keeps its lowest value for None.
_INT_CODES = tuple((code, -(1 << (8 * array(code).itemsize - 1))) for code in "bhiq")
# Codes address a value table of up to 65,535 values; a column with more distinct values
# than a quarter of its entries is cheaper as plain numbers (timestamps are all distinct).
_MAX_CODED = 65_535
# Value tables are shared by every column of equal values, across dumps: the 1,024 ranks of
# one job repeat the same ops, shapes and stacks. Bounded: cleared when it grows past this.
_SHARED_VALUES: dict[Any, tuple[Any, ...]] = {}
_SHARED_MAX = 4096


class Column:
    """One field of every entry. `values` and `codes`: the field's distinct values and each
    entry's index into them; or `numbers`, a typed array where `none` stands for None (NaN
    for floats); or `items`, the values themselves (mixed types, huge integers)."""

    __slots__ = ("codes", "items", "none", "numbers", "values")

    def __init__(
        self,
        *,
        values: tuple[Any, ...] | None = None,
        codes: array | None = None,
        numbers: array | None = None,
        none: int | float | None = None,
        items: tuple[Any, ...] | None = None,
    ) -> None:
        self.values, self.codes = values, codes
        self.numbers, self.none = numbers, none
        self.items = items

    def __reduce__(self) -> tuple[Any, ...]:
        return (_column, (self.values, self.codes, self.numbers, self.none, self.items))

    @classmethod
    def of(cls, data: Sequence[Any], kinds: set[type] | None = None) -> Column:
        """The most compact column that gives back exactly `data`; `kinds`: the types it
        holds, where the caller knows them (a reader that checked them)."""
        kinds = set(map(type, data)) if kinds is None else set(kinds)
        # 1 == 1.0 == True hash alike: a column mixing them is kept item by item
        if len(kinds & {bool, int, float}) > 1:
            return cls(items=tuple(data))
        # A first quarter of distinct values is too many to code (ids, timestamps): known
        # from hashing that quarter, not every value.
        head = len(data) // 4 + 1
        try:
            many = len(data) >= 4 and len(set(data[:head])) == head
            distinct = {} if many else dict.fromkeys(data)
        except TypeError:  # an unhashable value (a list someone built an entry with)
            return cls(items=tuple(data))
        few = not many and len(distinct) <= _MAX_CODED and len(distinct) * 4 <= max(len(data), 4)
        # -0.0 == 0.0 too: a value table would give one for the other
        if few and float in kinds and 0.0 in distinct:
            few = not any(x == 0 and math.copysign(1, x) < 0 for x in data if type(x) is float)
        if few:
            values = _shared_values(tuple(distinct))
            index = {v: i for i, v in enumerate(values)}
            codes = map(index.__getitem__, data)
            # an array fills fastest from bytes (one-byte codes) or a list, not an iterator
            if len(values) <= 256:
                return cls(values=values, codes=array("B", bytes(codes)))
            return cls(values=values, codes=array("H", list(codes)))
        has_none = type(None) in kinds
        kinds.discard(type(None))
        if kinds == {int}:
            return _int_column(data, has_none)
        if kinds == {float}:
            return _float_column(data)
        return cls(items=tuple(data))

    def __len__(self) -> int:
        got = self.codes if self.codes is not None else self.numbers
        return len(got if got is not None else self.items or ())

    def item(self, i: int) -> Any:
        if self.codes is not None:
            return self.values[self.codes[i]]  # type: ignore[index]
        if self.numbers is not None:
            x = self.numbers[i]
            return None if x == self.none or x != x else x  # NaN: the None of a float column
        return self.items[i]  # type: ignore[index]

    def take(self, rows: Sequence[int] | None = None) -> list[Any]:
        """The values at `rows` (every row when None), built at C speed."""
        if self.codes is not None:
            codes: Iterable[int] = self.codes if rows is None else _take(self.codes, rows)
            return list(map(self.values.__getitem__, codes))  # type: ignore[union-attr]
        if self.numbers is not None:
            got = self.numbers.tolist() if rows is None else _take(self.numbers, rows).tolist()
            if self.numbers.typecode == "d":
                return [None if x != x else x for x in got]
            none = self.none
            return [None if x == none else x for x in got] if none in got else got
        items = self.items or ()
        return list(items) if rows is None else list(map(items.__getitem__, rows))

    def sliced(self, start: int, stop: int) -> Column:
        if self.codes is not None:
            return Column(values=self.values, codes=self.codes[start:stop])
        if self.numbers is not None:
            return Column(numbers=self.numbers[start:stop], none=self.none)
        return Column(items=(self.items or ())[start:stop])


def _column(
    values: tuple[Any, ...] | None,
    codes: array | None,
    numbers: array | None,
    none: int | float | None,
    items: tuple[Any, ...] | None,
) -> Column:
    # Unpickled in the main process: share the value tables again (see _SHARED_VALUES)
    if values is not None:
        values = _shared_values(values)
    return Column(values=values, codes=codes, numbers=numbers, none=none, items=items)


def _shared_values(values: tuple[Any, ...]) -> tuple[Any, ...]:
    if len(_SHARED_VALUES) > _SHARED_MAX:
        _SHARED_VALUES.clear()
    # keyed by the types too: (1,) and (True,) are equal tuples and must not share a table
    return _SHARED_VALUES.setdefault((tuple(map(type, values)), values), values)


def _int_column(data: Sequence[Any], has_none: bool) -> Column:
    present = [x for x in data if x is not None] if has_none else data
    lo, hi = min(present, default=0), max(present, default=0)
    for code, none in _INT_CODES:
        if none < lo and hi <= -none - 1:
            filled = data if present is data else [none if x is None else x for x in data]
            return Column(numbers=array(code, filled), none=none)
    return Column(items=tuple(data))  # past 64 bits


def _float_column(data: Sequence[Any]) -> Column:
    if any(x != x for x in data if x is not None):  # a real NaN would read back as None
        return Column(items=tuple(data))
    nan = math.nan
    return Column(numbers=array("d", [nan if x is None else x for x in data]), none=None)


def _take(column: array, rows: Sequence[int]) -> array:
    if isinstance(rows, range) and rows.step == 1:
        return column[rows.start : rows.stop]
    return array(column.typecode, map(column.__getitem__, rows))


class EntryTable(Sequence[FlightRecorderEntry]):
    """A dump's entries, one Column per field of FlightRecorderEntry (in its order).

    Reads as a sequence of FlightRecorderEntry (each built when asked for, equal to the
    one a parser would have built) and by column (`field`), which the analysis uses: it
    reads a field of many entries, or a whole entry only for the few it reports."""

    __slots__ = ("_columns", "_n")

    def __init__(self, columns: Sequence[Column], n: int) -> None:
        if len(columns) != len(_FIELDS) or any(len(c) != n for c in columns):
            raise ValueError("one column of n values per entry field")
        self._columns = tuple(columns)
        self._n = n

    @classmethod
    def from_columns(cls, columns: Sequence[Sequence[Any]]) -> EntryTable:
        """From one sequence of values per field, in FlightRecorderEntry's order."""
        n = len(columns[0]) if columns else 0
        if len(columns) != len(_FIELDS):
            raise ValueError("one column per entry field")
        return cls([Column.of(c) for c in columns], n)

    @classmethod
    def of(cls, entries: Sequence[FlightRecorderEntry]) -> EntryTable:
        """`entries` as a table (itself when it is one)."""
        if isinstance(entries, EntryTable):
            return entries
        if not entries:
            return cls([Column(items=())] * len(_FIELDS), 0)
        return cls.from_columns(list(zip(*entries, strict=True)))

    def __reduce__(self) -> tuple[Any, ...]:
        return (EntryTable, (self._columns, self._n))

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> FlightRecorderEntry: ...

    @overload
    def __getitem__(self, i: slice) -> EntryTable: ...

    def __getitem__(self, i: int | slice) -> FlightRecorderEntry | EntryTable:
        if isinstance(i, slice):
            start, stop, step = i.indices(self._n)
            if step != 1:
                return EntryTable.of(tuple(self[j] for j in range(start, stop, step)))
            stop = max(start, stop)
            return EntryTable([c.sliced(start, stop) for c in self._columns], stop - start)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("entry index out of range")
        return tuple.__new__(FlightRecorderEntry, [c.item(i) for c in self._columns])

    def __iter__(self) -> Iterator[FlightRecorderEntry]:
        columns = [c.take() for c in self._columns]
        return map(tuple.__new__, repeat(FlightRecorderEntry), zip(*columns, strict=True))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (EntryTable, tuple, list)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    def __hash__(self) -> int:
        return hash(tuple(self))  # as the tuple of entries it stands for

    def __repr__(self) -> str:
        return f"EntryTable({self._n} entries)"

    def field(self, name: str, rows: Sequence[int] | None = None) -> list[Any]:
        """The values of one field at `rows` (every entry when None)."""
        return self._columns[_FIELD_INDEX[name]].take(rows)

    def distinct(self, *names: str) -> list[tuple[Any, ...]]:
        """The distinct combinations of these fields' values, in the order the entries first
        hold them; of fields that hold one value throughout (a job's one group), without a
        pass over the entries."""
        columns = [self._columns[_FIELD_INDEX[name]] for name in names]
        if self._n and all(c.values is not None and len(c.values) == 1 for c in columns):
            return [tuple(c.values[0] for c in columns)]  # type: ignore[index]
        return list(dict.fromkeys(zip(*(c.take() for c in columns), strict=True)))

    def value(self, row: int, name: str) -> Any:
        """One field of one entry, without building the entry."""
        return self._columns[_FIELD_INDEX[name]].item(row)

    def equal_field(
        self, name: str, rows: Sequence[int], other: EntryTable, other_rows: Sequence[int]
    ) -> bool:
        """Does field `name` hold equal values at `rows` here as at `other_rows` of `other`?
        Two coded columns compare their codes (at C speed), not the values."""
        mine, theirs = self._columns[_FIELD_INDEX[name]], other._columns[_FIELD_INDEX[name]]
        if len(rows) != len(other_rows):
            return False
        if mine.codes is None or theirs.codes is None:
            return mine.take(rows) == theirs.take(other_rows)
        codes, other_codes = _take(mine.codes, rows), _take(theirs.codes, other_rows)
        values, other_values = mine.values or (), theirs.values or ()
        if values is other_values or values == other_values:
            return codes == other_codes
        # different value tables: their codes in terms of mine (-1: a value I do not hold)
        index = {v: i for i, v in enumerate(values)}
        recode = [index.get(v, -1) for v in other_values]
        return codes.tolist() == list(map(recode.__getitem__, other_codes))
