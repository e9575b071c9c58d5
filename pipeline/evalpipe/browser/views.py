"""The rows of an output as the browser asks for them: a page of a view (a filter and a sort)
at any offset, counted, over millions of rows, without loading the table.

An output of 10M rows is a few GB in memory, so the table is never read whole. The first page
of the plain view is read straight from the Parquet parts (polars pushes the slice down to the
files: tens of milliseconds). The columns a view filters, sorts or shows are read once each,
alone, into a column cache (strings as categoricals: 4 bytes a row; a float column of 10M rows
is 80 MB), dropped least recently used past a budget. A view is then the positions of its rows
in table order, filtered (`arg_where`) and sorted (`arg_sort`) in memory and kept for the views
asked last, so paging, counting and jumping to row 5,000,000 are a slice of it. Text in the
state (the corpus, `--input`) is searched with a lazy scan of the corpus, joined on the id.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from evalpipe.browser.order import full_order, sort_key, sorted_slice
from evalpipe.errors import InputError
from evalpipe.reading import Output

STATE = "@state"  # the pseudo-column a text filter searches: the row's state, in the corpus
OPS = ("eq", "ne", "lt", "le", "gt", "ge", "null", "notnull", "contains")
BUDGET = 700_000_000  # bytes of cached columns before the least recently used are dropped
VIEWS = 4  # views (their positions) kept
CATEGORICAL_BELOW = 0.2  # a text column with fewer distinct values a row is cached as categories
SAMPLE = 50_000  # rows that judge it


@dataclass(frozen=True)
class Spec:
    """A view: filters (column, op, value), all of which a row must pass, and a sort."""

    filters: tuple[tuple[str, str, Any], ...] = ()
    sort: str | None = None
    descending: bool = False

    @property
    def plain(self) -> bool:
        return not self.filters and self.sort is None


@dataclass
class Page:
    """Rows `offset`.. of a view that holds `count` rows: their table positions and values."""

    count: int
    offset: int
    positions: list[int]
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)


class Rows:
    """The rows of `output` (module docstring), beside its `corpus` (a lazy scan) if given."""

    def __init__(self, output: Output, corpus: pl.LazyFrame | None = None) -> None:
        self.output, self.corpus = output, corpus
        self.scan = output.scan()
        self.schema = self.scan.collect_schema()
        self.total = int(self.scan.select(pl.len()).collect().item())
        self._cache: OrderedDict[str, pl.Series] = OrderedDict()
        self._views: OrderedDict[Spec, np.ndarray] = OrderedDict()  # positions, in order
        self._pending: dict[Spec, np.ndarray] = {}  # sorts under way in the background: keys
        self._sorter = ThreadPoolExecutor(1, thread_name_prefix="evalpipe-browse-sort")
        self._lock = threading.RLock()

    @property
    def columns(self) -> list[str]:
        return list(self.schema.names())

    # ------------------------------------------------------------------ the column cache

    def column(self, name: str) -> pl.Series:
        """Column `name`, whole, from the cache (read once, alone, when first asked)."""
        with self._lock:
            if name in self._cache:
                self._cache.move_to_end(name)
                return self._cache[name]
            if name not in self.schema:
                raise InputError(f"no column '{name}' in the output")
            column = pl.col(name)
            if self.schema[name] == pl.String and self._repeats(name):
                column = column.cast(pl.Categorical)  # cast as read: never whole as text
            series = self.scan.select(column).collect(engine="streaming").to_series()
            self._cache[name] = series
            self._shrink(keep=name)
            return series

    def _repeats(self, name: str) -> bool:
        """Whether text column `name` holds few distinct values (judged on its first rows)."""
        head = self.scan.select(name).head(SAMPLE).collect().to_series()
        return head.n_unique() < CATEGORICAL_BELOW * max(len(head), 1)

    def warm(self, names: list[str]) -> None:
        """Read `names` into the cache ahead of the first view that needs them."""
        for name in names:
            if name in self.schema:
                self.column(name)

    def _shrink(self, keep: str) -> None:
        size = sum(s.estimated_size() for s in self._cache.values())
        for name in list(self._cache):
            if size <= BUDGET or name == keep:
                continue
            size -= self._cache.pop(name).estimated_size()

    # ------------------------------------------------------------------ views

    def _kept(self, spec: Spec) -> np.ndarray | None:
        with self._lock:
            if spec in self._views:
                self._views.move_to_end(spec)
                return self._views[spec]
        return None

    def _keep(self, spec: Spec, positions: np.ndarray) -> None:
        if self.total < 2**31:
            positions = positions.astype(np.int32, copy=False)  # half the memory of int64
        with self._lock:
            self._views[spec] = positions
            while len(self._views) > VIEWS:
                self._views.popitem(last=False)

    def filtered(self, filters: tuple[tuple[str, str, Any], ...]) -> np.ndarray | None:
        """The table positions of the rows that pass `filters` (None: every row)."""
        if not filters:
            return None
        spec = Spec(filters)
        kept = self._kept(spec)
        if kept is None:
            kept = self._filtered(filters)
            self._keep(spec, kept)
        return kept

    def chosen(self, spec: Spec, offset: int, limit: int) -> tuple[int, np.ndarray | None]:
        """The number of rows of view `spec`, and the table positions of its rows
        `offset`..`offset + limit` in its order (None: the plain view, positions themselves).
        A sort not yet kept answers by `sorted_slice` and is sorted whole in the background."""
        positions = self.filtered(spec.filters)
        if spec.sort is None:
            if positions is None:
                return self.total, None
            return len(positions), positions[offset : offset + limit]
        kept = self._kept(spec)
        if kept is not None:
            return len(kept), kept[offset : offset + limit]
        with self._lock:
            key = self._pending.get(spec)  # its whole sort is under way: the same key serves
        if key is None:
            column = self.column(spec.sort)
            if positions is not None:
                column = column.gather(positions)
            key = sort_key(column, spec.descending)
            if key is None:  # free text: sorted whole, now
                order = column.arg_sort(descending=spec.descending, nulls_last=True).to_numpy()
                whole = order if positions is None else positions[order]
                self._keep(spec, whole)
                return len(whole), whole[offset : offset + limit]
            self._sort_later(spec, key, positions)
        page = sorted_slice(key, offset, limit)
        return len(key), page if positions is None else positions[page]

    def _sort_later(self, spec: Spec, key: np.ndarray, positions: np.ndarray | None) -> None:
        with self._lock:
            if spec in self._pending:
                return
            self._pending[spec] = key

        def sort() -> None:
            try:
                order = full_order(key)
                self._keep(spec, order if positions is None else positions[order])
            finally:
                with self._lock:
                    self._pending.pop(spec, None)

        self._sorter.submit(sort)  # one at a time: two whole sorts at once would double the memory

    def _filtered(self, filters: tuple[tuple[str, str, Any], ...]) -> np.ndarray:
        mask: pl.Series | None = None
        for name, op, value in filters:
            passed = self._passes(name, op, value)
            mask = passed if mask is None else mask & passed
        assert mask is not None
        return np.flatnonzero(mask.fill_null(False).to_numpy())

    def _passes(self, name: str, op: str, value: Any) -> pl.Series:
        if op not in OPS:
            raise InputError(f"filter on '{name}': no operator '{op}' (one of {', '.join(OPS)})")
        if name == STATE:
            return self._in_state(str(value))
        column = self.column(name)
        if op == "null":
            return column.is_null()
        if op == "notnull":
            return column.is_not_null()
        if op == "contains":
            return column.cast(pl.String).str.contains(str(value), literal=True)
        wanted = _typed(name, column.dtype, value)
        if column.dtype == pl.Categorical and op not in ("eq", "ne"):
            column = column.cast(pl.String)
        compare = {
            "eq": column.__eq__, "ne": column.__ne__, "lt": column.__lt__,
            "le": column.__le__, "gt": column.__gt__, "ge": column.__ge__,
        }[op]  # fmt: skip
        return compare(wanted)

    def _in_state(self, text: str) -> pl.Series:
        """Rows whose state (any text column of the corpus) holds `text`."""
        if self.corpus is None:
            raise InputError("a filter on the state needs the corpus: give --input CORPUS")
        idc = self.output.id_column
        schema = self.corpus.collect_schema()
        texts = [c for c, t in schema.items() if c != idc and t == pl.String]
        if not texts:
            raise InputError("the corpus has no text column to search")
        found = pl.any_horizontal(pl.col(c).str.contains(text, literal=True) for c in texts)
        hits = self.corpus.filter(found).select(idc).collect(engine="streaming").to_series()
        return self.column(idc).is_in(hits.implode())

    # ------------------------------------------------------------------ pages and rows

    def page(self, spec: Spec, offset: int, limit: int, columns: list[str]) -> Page:
        """Rows `offset`..`offset + limit` of view `spec`, their `columns` (and positions)."""
        columns = [c for c in columns if c in self.schema] or self.columns[:1]
        offset = max(0, offset)
        count, chosen = self.chosen(spec, offset, limit)
        if chosen is None:
            where = list(range(offset, min(offset + limit, count)))
            if all(c in self._cache for c in columns):
                frame = pl.DataFrame([self.column(c).slice(offset, limit) for c in columns])
            else:  # the plain view's pages come from the files until the cache has them
                frame = self.scan.select(columns).slice(offset, limit).collect()
        else:
            where = chosen.tolist()
            frame = pl.DataFrame([self.column(c).gather(chosen) for c in columns])
        rows = [list(r) for r in frame.iter_rows()]
        return Page(count, offset, where, columns, rows)

    def row(self, position: int) -> dict[str, Any]:
        """Every column of the row at table `position`."""
        if not 0 <= position < self.total:
            raise InputError(f"no row {position}: the output holds {self.total:,} rows")
        return self.scan.slice(position, 1).collect().row(0, named=True)

    def position(self, row_id: Any) -> int:
        """The table position of the row whose id is `row_id`."""
        ids = self.column(self.output.id_column)
        wanted = _typed(self.output.id_column, ids.dtype, row_id)
        if ids.dtype == pl.Categorical:
            ids = ids.cast(pl.String)
        found = pl.select(pl.arg_where(ids == wanted)).to_series()
        if found.is_empty():
            raise InputError(f"no row with {self.output.id_column} {row_id!r}")
        return int(found[0])

    def state(self, row_id: Any) -> dict[str, Any] | None:
        """The corpus row of `row_id` (its state), if a corpus was given and holds it."""
        if self.corpus is None:
            return None
        idc = self.output.id_column
        found = self.corpus.filter(pl.col(idc) == row_id).head(1).collect()
        return found.row(0, named=True) if found.height else None


def _typed(name: str, dtype: pl.DataType, value: Any) -> Any:
    """A filter's value (text from the address) as the column's type."""
    if value is None:
        return None
    try:
        if dtype.is_integer():
            return int(value)
        if dtype.is_float():
            return float(value)
        if dtype == pl.Boolean:
            return str(value).strip().lower() in ("true", "1", "yes")
    except (TypeError, ValueError):
        raise InputError(f"filter on '{name}': {value!r} is not a {dtype}") from None
    if dtype.is_temporal():
        return pl.Series([str(value)]).str.to_datetime(time_zone="UTC").item()
    return str(value)
