"""`ep.read`: an output as a polars LazyFrame, in input order, whatever its format.

The table `ep.score` returns and an analyst's own reads of an output come through here: a folder
of Parquet parts (local or an object store) or a Delta table (`output.format: delta`), opened
by the one reader of outputs (`evalpipe.reading`) and read with polars' own readers, so that a
filter or a projection reaches the files.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from evalpipe.reading import open_output


def read(output: str | Path) -> pl.LazyFrame:
    """An output table (local or an object-store URI) as a LazyFrame of its Parquet parts, in
    input order (by `_row`, when the table has it: schema version 2 on). A Delta table
    (`output.format: delta`) is read with polars' own Delta reader: the whole table, a night
    (`TABLE/dt=2026-11-27`) or a version (`TABLE@3`)."""
    frame = open_output(output).scan()
    if "_row" in frame.collect_schema():
        frame = frame.sort("_row", nulls_last=True, maintain_order=True)
    return frame
