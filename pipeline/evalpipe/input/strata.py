"""The strata of a corpus and the fixed random order of each: what `evalpipe estimate` draws from.

A stratum is a distinct combination of values of the `--by` columns (one pass over those columns
and the id). Each stratum's rows are in a fixed random order: by a 64-bit hash (blake2b) of the
seed and the row's id, the same in every process and on every machine, so a sample of n_h rows of
stratum h is the first n_h of its order, and a bigger sample holds the smaller one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from hashlib import blake2b
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from evalpipe.input.source import Source

NULL_LABEL = "(null)"


@dataclass
class Strata:
    """The corpus's strata: each stratum's rows (positions) in their fixed random order, and
    every row's id and stratum."""

    labels: dict[str, dict[str, Any]]  # stratum -> its --by values
    orders: dict[str, np.ndarray]  # stratum -> positions, in the sample's order
    ids: pl.DataFrame  # per position: id, the stratum
    invalid: int = 0  # rows with no state to score (`invalid_state`): in no stratum

    @property
    def sizes(self) -> dict[str, int]:
        return {h: len(order) for h, order in self.orders.items()}

    def positions(self, drawn: Mapping[str, int]) -> np.ndarray:
        picked = [self.orders[h][: drawn.get(h, 0)] for h in self.orders]
        return np.sort(np.concatenate(picked)) if picked else np.array([], np.int64)


def _label(values: Sequence[Any]) -> str:
    return ", ".join(NULL_LABEL if v is None else str(v) for v in values) or "all"


def order_keys(ids: Sequence[Any], seed: int) -> np.ndarray:
    """Each row's place in the sample's order: a 64-bit hash of the seed and its id (blake2b,
    the same in every process and on every machine)."""
    return np.fromiter(
        (
            int.from_bytes(blake2b(f"{seed}\x00{i!r}".encode(), digest_size=8).digest(), "big")
            for i in ids
        ),
        dtype=np.uint64,
        count=len(ids),
    )


def _valid(source: Source) -> np.ndarray:
    """Per position: does the row have a state to score? (A row without one is never sent:
    the figures are of the rows that can be answered, so it is in no stratum.)"""
    valid = np.ones(source.num_rows, dtype=bool)
    for rows in source.batches():
        for row in rows:
            if row.invalid is not None and row.position is not None:
                valid[row.position] = False
    return valid


def strata_of(source: Source, by: Sequence[str], seed: int, column: str) -> Strata:
    """One pass over the id and `--by` columns of the corpus, one over its states: its strata
    and their orders (rows without a valid state left out); `column` names the stratum in
    `Strata.ids`."""
    table = source.columns(by, role="--by column")
    id_name = source.spec.id_column
    ids = table.column(id_name).to_pylist()
    values = [table.column(c).to_pylist() for c in by]
    rows = list(zip(*values, strict=True)) if by else [() for _ in ids]
    labels = [_label(r) for r in rows]
    frame = pl.DataFrame(
        {"position": np.arange(len(ids), dtype=np.int64), "stratum": labels,
         "key": order_keys(ids, seed)}
    )  # fmt: skip
    valid = _valid(source)
    frame = frame.filter(pl.Series(valid))
    grouped = frame.sort("key").group_by("stratum", maintain_order=True).agg(pl.col("position"))
    orders = {h: np.asarray(p, np.int64) for h, p in sorted(grouped.iter_rows())}
    first = {label: dict(zip(by, r, strict=True)) for label, r in zip(labels, rows, strict=True)}
    ids_frame = pl.DataFrame({id_name: pa.array(ids, source.id_type), column: labels})
    invalid = int((~valid).sum())
    return Strata({h: first[h] for h in orders}, orders, ids_frame, invalid)
