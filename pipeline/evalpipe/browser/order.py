"""A sorted view's page without sorting the view: what a click on a column's header waits for.

Sorting 10M rows takes one to two seconds here (two cores, shared), longer than a person should
wait for the first sorted page. The rows at sorted places `offset`..`offset + limit` are found in
linear time instead: `numpy.partition` finds the keys at both ends of the page, and only the rows
between them are sorted. Ties are broken by table position, as the stable sort of the whole view
(`full_order`, computed meanwhile in the background) breaks them, so the page is the same row
for row whichever answered it. Nulls sort last, ascending or descending.
"""

from __future__ import annotations

import numpy as np
import polars as pl


def sort_key(column: pl.Series, descending: bool) -> np.ndarray | None:
    """`column` as numbers whose ascending order is the view's order, nulls last; None for a
    column that has no such numbers (free text: the caller sorts it whole)."""
    if column.dtype == pl.Categorical:
        distinct = column.unique().drop_nulls()  # a few values: each one's rank, by its text
        codes = distinct.to_physical().to_numpy().astype(np.int64)
        ranks = np.full(int(codes.max(initial=0)) + 1, np.nan)
        ranks[codes[np.argsort(distinct.cast(pl.String).to_numpy(), kind="stable")]] = np.arange(
            len(codes), dtype=np.float64
        )
        physical = column.to_physical()
        values = ranks[physical.fill_null(0).to_numpy().astype(np.int64)]
        values[physical.is_null().to_numpy()] = np.nan
    elif column.dtype.is_numeric() or column.dtype == pl.Boolean or column.dtype.is_temporal():
        values = column.to_physical().cast(pl.Float64).to_numpy()  # nulls as NaN
    else:
        return None
    values = np.asarray(values, dtype=np.float64)
    if not values.flags.writeable:  # polars lent its own buffer: changed in place below
        values = values.copy()
    if descending:
        np.negative(values, out=values)
    values[np.isnan(values)] = np.inf
    return values


def full_order(key: np.ndarray) -> np.ndarray:
    """Every position, in the order of `key` (ties by position)."""
    return np.argsort(key, kind="stable")


def sorted_slice(key: np.ndarray, offset: int, limit: int) -> np.ndarray:
    """The positions at sorted places `offset`..`offset + limit` of `key`, in order: exactly
    `full_order(key)[offset:offset + limit]`, in linear time."""
    n = len(key)
    end = min(offset + limit, n)
    if offset >= end:
        return np.empty(0, dtype=np.int64)
    low, high = np.partition(key, (offset, end - 1))[[offset, end - 1]]
    below = int(np.count_nonzero(key < low))
    between = np.flatnonzero((key >= low) & (key <= high))
    ordered = between[np.argsort(key[between], kind="stable")]
    return ordered[offset - below : end - below].astype(np.int64)
