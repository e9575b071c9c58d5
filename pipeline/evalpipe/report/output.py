"""Open a job's output and its corpus for the report, checking what the report needs of them.

The output is read by the one reader of outputs (`evalpipe.reading.open_output`): a local
directory or an object-store prefix (`s3://bucket/out`), or a Delta table, of any evalpipe
version; the lineage columns (`_run_id`, `_scored_at`, ...) may be absent, and each section that
needs one says so instead of failing. The report also needs the token and error columns every
output has had, and a row to show. Everything here only looks at file names, one footer and the
manifest: the rows are read later, by the lazy queries in `data`.
"""

from __future__ import annotations

import polars as pl
import pyarrow as pa

from evalpipe.errors import InputError, first_line
from evalpipe.input import corpus_paths
from evalpipe.reading import Output, open_output as open_any, scan_files
from evalpipe.stores import Location

# Every evalpipe output has had these columns; the lineage columns came later.
REQUIRED = ("_model", "_input_tokens", "_error_type", "_error")


def report_output(location: Location) -> Output:
    """Open `location` (a local directory, an object-store URI, a Delta table) as a job's
    output for the report; InputError (one line, naming it) if it is not one or holds no
    rows."""
    out = open_any(location, REQUIRED)
    if not out.parts:
        raise InputError(f"output '{out.shown}' holds no rows")
    return out


def open_corpus(path: Location, out: Output) -> pl.LazyFrame:
    """The corpus `out` scored (local or an object-store URI), lazily; InputError unless it is
    Parquet with `out`'s id column of the same type (checked here, before any figure is
    computed)."""
    fs, files = corpus_paths(str(path), "--input")  # as the job read it
    try:
        rows = scan_files(fs, files)
        schema = rows.collect_schema()
    except (OSError, pa.ArrowException, pl.exceptions.PolarsError) as exc:
        raise InputError(f"--input '{path}' cannot be read: {first_line(exc)}") from None
    theirs = schema.get(out.id_column)
    frame = pl.from_arrow(pa.schema([out.schema.field(0)]).empty_table())
    assert isinstance(frame, pl.DataFrame)
    mine = frame.schema[out.id_column]
    if theirs is None:
        raise InputError(
            f"--input '{path}' has no column '{out.id_column}' (the output's id column)"
        )
    if theirs != mine:
        raise InputError(
            f"--input's id column '{out.id_column}' is {theirs}, the output's is {mine}"
        )
    return rows
