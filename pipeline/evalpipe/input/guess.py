"""A first guess at a corpus's id and state columns, for `evalpipe init`.

The id column is one whose values are all present and unique (a name that says id first, then
integers before strings); the state is the text column with the longest values on average (or,
without text, every other column, which makes an object state). It reads the id candidates'
values and a sample of the text columns, once, and is a guess: the written config says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds

from evalpipe.errors import InputError
from evalpipe.input.corpus import footer, parquet_files
from evalpipe.stores import parse_location, resolve

SAMPLE_ROWS = 10_000  # rows read to measure how long the text columns' values are


@dataclass(frozen=True)
class Guess:
    """What `init` writes: the id column (None if no column is unique), the state columns,
    and the corpus's size."""

    id_column: str | None
    state: tuple[str, ...]
    rows: int
    files: int
    columns: tuple[str, ...]


def _id_rank(field: pa.Field) -> tuple[int, int]:
    name = field.name.lower()
    says_id = name == "id" or name.endswith(("_id", "id", "_key", "uuid"))
    return (0 if says_id else 1, 0 if pa.types.is_integer(field.type) else 1)


def _can_be_id(field: pa.Field) -> bool:
    kind = field.type
    return pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind)


def guess_columns(path: str) -> Guess:
    """Guess the id and state columns of the corpus at `path` (local or on an object store)."""
    location = parse_location(path)
    fs, root = resolve(location, InputError, "PARQUET")
    files = parquet_files(fs, root, location)
    footers = [footer(fs, file) for file in files]
    schema, rows = footers[0][0], sum(n for _, n in footers)
    paths = [file.path for file in files]
    frame = pl.scan_pyarrow_dataset(ds.dataset(paths, format="parquet", filesystem=fs))
    candidates = sorted((f for f in schema if _can_be_id(f)), key=_id_rank)
    id_column = next((f.name for f in candidates if _unique(frame, f.name, rows)), None)
    texts = [f.name for f in schema if f.name != id_column and pa.types.is_string(f.type)]
    texts += [f.name for f in schema if f.name != id_column and pa.types.is_large_string(f.type)]
    if texts:
        lengths = frame.head(SAMPLE_ROWS).select(pl.col(texts).str.len_chars().mean()).collect()
        state: tuple[str, ...] = (max(texts, key=lambda name: lengths[name][0] or 0),)
    else:
        state = tuple(f.name for f in schema if f.name != id_column)
    return Guess(id_column, state, rows, len(files), tuple(schema.names))


def _unique(frame: pl.LazyFrame, name: str, rows: int) -> bool:
    found = frame.select(
        pl.col(name).n_unique().alias("distinct"), pl.col(name).null_count().alias("nulls")
    ).collect()
    return int(found["nulls"][0]) == 0 and int(found["distinct"][0]) == rows
