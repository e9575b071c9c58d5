"""`ep.read`: an output as a polars LazyFrame, in input order, whatever its format.

The table `ep.score` returns and an analyst's own reads of an output come through here: a folder
of Parquet parts (local or an object store) or a Delta table (`output.format: delta`), read with
polars' own readers so that a filter or a projection reaches the files.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from evalpipe.errors import InputError
from evalpipe.output import delta_target
from evalpipe.stores import is_uri


def read(output: str | Path) -> pl.LazyFrame:
    """An output table (local or an object-store URI) as a LazyFrame of its Parquet parts, in
    input order (by `_row`, when the table has it: schema version 2 on). A Delta table
    (`output.format: delta`) is read with polars' own Delta reader: the whole table, a night
    (`TABLE/dt=2026-11-27`) or a version (`TABLE@3`)."""
    target = delta_target(output)
    if target is not None:
        frame = pl.scan_delta(
            str(target.location), version=target.version,
            storage_options=target.storage_options() or None,
        )  # fmt: skip
        for key, value in target.partition.items():
            frame = frame.filter(pl.col(key) == value)
    elif is_uri(output):
        import pyarrow.dataset as ds

        frame = pl.scan_pyarrow_dataset(ds.dataset(str(output), format="parquet"))
    else:
        parts = sorted(Path(output).glob("part-*.parquet"))
        if not parts:
            raise InputError(f"{output}: no output parts (not an evalpipe output, or nothing yet)")
        frame = pl.scan_parquet(parts)
    if "_row" in frame.collect_schema():
        frame = frame.sort("_row", nulls_last=True, maintain_order=True)
    return frame
