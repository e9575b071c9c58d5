"""People's labels for `evalpipe agree`: read, matched to the output's questions, coerced.

A labels file is Parquet or CSV: the output's id column and one column per question, named by
the question key, holding what a person answered: for a noul question yes or no (true/false,
1/0, yes/no), for a choice question the option as the config writes it, for a score question
the level (its index 0, 1, ..., or its label). An empty cell is a row that person did not
label. Anything else is refused with one line naming the column and the value, before any
figure is computed.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from evalpipe.errors import InputError, first_line
from evalpipe.reading import Output, Question

YES = frozenset({"true", "yes", "1", "y", "t"})
NO = frozenset({"false", "no", "0", "n", "f"})


def read_labels(path: str) -> pl.DataFrame:
    """The labels file (Parquet, or CSV by its suffix), all of it."""
    try:
        if Path(path).suffix.lower() in (".csv", ".tsv"):
            sep = "\t" if path.lower().endswith(".tsv") else ","
            return pl.read_csv(path, separator=sep, infer_schema_length=None)
        return pl.read_parquet(path)
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise InputError(f"--labels '{path}' cannot be read: {first_line(exc)}") from None


def matched(table: Output, labels: pl.DataFrame, notes: list[str]) -> pl.DataFrame:
    """The labels joined to the output's answered rows: the output's columns, and each label
    column as `<key>\\x00label`. InputError when the id column or every question is missing."""
    idc = table.id_column
    if idc not in labels.columns:
        raise InputError(f"--labels has no column '{idc}' (the output's id column)")
    keys = [q.key for q in table.questions if q.key in labels.columns]
    ignored = [c for c in labels.columns if c != idc and table.question(c) is None]
    if ignored:
        notes.append(f"label columns that are no question: {', '.join(ignored)}: ignored")
    if not keys:
        names = ", ".join(q.key for q in table.questions)
        raise InputError(f"--labels has no column named by a question key ({names})")
    renamed = labels.select(pl.col(idc), *[pl.col(k).alias(f"{k}\x00label") for k in keys])
    renamed = _same_id_type(renamed, idc, table.rows.schema[idc])
    duplicated = renamed[idc].is_duplicated()
    if duplicated.any():
        raise InputError(f"--labels: id {renamed[idc].filter(duplicated)[0]!r} is labelled twice")
    joined = table.rows.join(renamed, on=idc, how="inner")
    missing = renamed.height - joined.height
    if missing:
        notes.append(f"{missing} labelled ids are not in the output: left out")
    return joined


def _same_id_type(labels: pl.DataFrame, idc: str, wanted: pl.DataType) -> pl.DataFrame:
    if labels.schema[idc] == wanted:
        return labels
    try:
        return labels.with_columns(pl.col(idc).cast(wanted, strict=True))
    except pl.exceptions.PolarsError:
        raise InputError(
            f"--labels: column '{idc}' is {labels.schema[idc]}, the output's id is {wanted}"
        ) from None


def coerced(q: Question, column: pl.Series) -> pl.Series:
    """A label column as numbers the statistics take: noul 1/0, choice the option (string),
    score the level index; InputError naming the first value that is none of these."""
    if q.kind == "noul":
        return _yes_no(q, column)
    text = column.cast(pl.String)
    if q.kind == "choice":
        return _known(q, text, list(q.labels), "option")
    index = {str(i): i for i in range(len(q.probs))} | {lab: i for i, lab in enumerate(q.labels)}
    _known(q, text.str.replace(r"\.0$", ""), list(index), "level")
    return text.str.replace(r"\.0$", "").replace_strict(index, return_dtype=pl.Int64)


def _yes_no(q: Question, column: pl.Series) -> pl.Series:
    if column.dtype == pl.Boolean:
        return column.cast(pl.Int64)
    text = column.cast(pl.String).str.to_lowercase().str.strip_chars().str.replace(r"\.0$", "")
    bad = text.filter(~text.is_in(list(YES | NO)))
    if bad.len():
        raise InputError(
            f"--labels column '{q.key}': {bad[0]!r} is not yes or no (true/false, 1/0, yes/no)"
        )
    return text.is_in(list(YES)).cast(pl.Int64)


def _known(q: Question, text: pl.Series, known: list[str], what: str) -> pl.Series:
    bad = text.filter(~text.is_in(known))
    if bad.len():
        shown = ", ".join(repr(k) for k in known[:12])
        raise InputError(f"--labels column '{q.key}': {bad[0]!r} is no {what} of it ({shown})")
    return text
