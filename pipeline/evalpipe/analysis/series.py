"""A nightly series: dated outputs side by side (`out/dt=2026-11-23/`, `out/dt=2026-11-24/`, ...).

A scheduler that writes each night's table under a Hive-style `dt=<date>` folder builds a
series; this module reads it as one trend: per night, the rows, the answered rows, the models
that answered (the most common one named, so a change of model version shows on the night it
happened), and per question the night's mean (p(yes), expected level, or the share of each
option). The nights are found by `evalpipe.reading.nights`: folders on a local disk or an object
store alike, or a Delta table's `dt` partitions.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from evalpipe.errors import InputError
from evalpipe.reading import Output, Question, nights, open_output
from evalpipe.stores import shown


def _night_means(table: Output) -> dict[str, Any]:
    """A night's figures, over its answered rows."""
    rows = table.rows.filter(pl.col("_error_type").is_null())
    models = rows["_model"].drop_nulls().value_counts(sort=True)
    out: dict[str, Any] = {
        "rows": table.rows.height,
        "answered": rows.height,
        "model": models["_model"][0] if models.height else None,
        "models": models["_model"].to_list(),
        "questions": {},
    }
    for q in table.questions:
        out["questions"][q.key] = _means(q, rows)
    return out


def _means(q: Question, rows: pl.DataFrame) -> dict[str, float | None]:
    if rows.height == 0:
        return {}
    if q.kind == "choice":
        shares = rows.select((pl.col(q.head) == label).mean().alias(label) for label in q.labels)
        return {label: float(value) for label, value in shares.row(0, named=True).items()}
    name = "mean p(yes)" if q.kind == "noul" else "mean expected level"
    mean = rows.select(pl.col(q.head).mean()).item()
    return {name: None if mean is None else float(mean)}


def nightly_series(location: str) -> dict[str, Any]:
    """The trend of the nightly outputs under `location`; InputError if it holds none."""
    found = nights(location)
    if not found:
        raise InputError(f"'{shown(location)}' holds no dt=* folders of nightly outputs")
    out = []
    for date, path in found:
        try:
            table = open_output(path)
        except InputError as exc:
            out.append({"date": date, "output": path, "skipped": str(exc)})
            continue
        out.append({"date": date, "output": path, **_night_means(table)})
    return {"location": location, "nights": out}


def model_changes(document: dict[str, Any]) -> list[tuple[str, str]]:
    """(date, model) of every night whose main model differs from the night before's."""
    changes, last = [], None
    for night in document["nights"]:
        model = night.get("model")
        if model is not None and last is not None and model != last:
            changes.append((night["date"], model))
        last = model if model is not None else last
    return changes
