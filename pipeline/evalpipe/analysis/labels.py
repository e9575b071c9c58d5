"""People's labels for `evalpipe agree`: read, matched to the output's questions, coerced.

A labels file is Parquet or CSV: the output's id column and one column per question, named by
the question key, holding what a person answered: for a noul question yes or no (true/false,
1/0, yes/no), for a choice question the option as the config writes it, for a score question
the level (its index 0, 1, ..., or its label). An empty cell is a row that person did not
label. Anything else is refused with one line naming the column and the value, before any
figure is computed.

Columns whose names start with `_` are a label's metadata, never a question: `_reviewer`,
`_labelled_at`, `_design` and `_inclusion_prob` (the sampler's, `evalpipe.analysis.tolabel`),
as the results browser writes them, one line per label. A file with `_reviewer` may hold an id
on several lines: per (id, reviewer, question) the last non-empty value wins (`per_reviewer`),
and where several reviewers labelled a row, `agree` and `calibrate` take their majority, a tie
going to the label written first (`matched`, with a note); the prediction-powered estimate uses
every reviewer's label (`evalpipe.analysis.ppi`). A file without `_reviewer` is one label per
id, as it always was: an id labelled twice is refused.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from evalpipe.errors import InputError, first_line
from evalpipe.reading import Output, Question

META = "_"  # a column named so is metadata, never a question
REVIEWER = "_reviewer"
LINE = "\x00line"  # a label's place in the file, for "the last wins" and "ties to the first"
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
    keys = question_keys(table, labels, notes)
    if REVIEWER in labels.columns:
        one = consensus(table, per_reviewer(table, labels, keys), keys, notes)
    else:
        one = labels.select(idc, *keys)
    renamed = one.select(pl.col(idc), *[pl.col(k).alias(f"{k}\x00label") for k in keys])
    renamed = _same_id_type(renamed, idc, table.rows.schema[idc])
    duplicated = renamed[idc].is_duplicated()
    if duplicated.any():
        raise InputError(f"--labels: id {renamed[idc].filter(duplicated)[0]!r} is labelled twice")
    joined = table.rows.join(renamed, on=idc, how="inner")
    missing = renamed.height - joined.height
    if missing:
        notes.append(f"{missing} labelled ids are not in the output: left out")
    return joined


def question_keys(table: Output, labels: pl.DataFrame, notes: list[str]) -> list[str]:
    """The question keys the labels have a column for; InputError when the id column or every
    question is missing. Other columns but `_` ones are noted as ignored."""
    idc = table.id_column
    if idc not in labels.columns:
        raise InputError(f"--labels has no column '{idc}' (the output's id column)")
    keys = [q.key for q in table.questions if q.key in labels.columns]
    ignored = [
        c for c in labels.columns
        if c != idc and not c.startswith(META) and table.question(c) is None
    ]  # fmt: skip
    if ignored:
        notes.append(f"label columns that are no question: {', '.join(ignored)}: ignored")
    if not keys:
        names = ", ".join(q.key for q in table.questions)
        raise InputError(f"--labels has no column named by a question key ({names})")
    return keys


def per_reviewer(table: Output, labels: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """One row per (id, `_reviewer`), in the order each first appears: each question's last
    non-empty label, coerced (`coerced`), and each `_` column's last non-empty value. A file
    without `_reviewer` is one reviewer's (null)."""
    idc = table.id_column
    frame = labels if REVIEWER in labels.columns else labels.with_columns(
        pl.lit(None, pl.String).alias(REVIEWER)
    ).with_columns(pl.col(REVIEWER).cast(pl.String))  # fmt: skip
    emptied = [
        pl.when(pl.col(c).cast(pl.String).str.strip_chars() == "").then(None).otherwise(pl.col(c))
        .alias(c)
        for c in frame.columns if c != idc and frame.schema[c] == pl.String
    ]  # fmt: skip
    frame = frame.with_columns(emptied).with_row_index(LINE)
    meta = [c for c in frame.columns if c.startswith(META) and c != REVIEWER]
    collapsed = frame.group_by(idc, REVIEWER, maintain_order=True).agg(
        pl.col(LINE).first(),
        *[pl.col(c).drop_nulls().last() for c in [*keys, *meta]],
    )
    questions = {q.key: q for q in table.questions}
    return collapsed.with_columns(
        _nullable(questions[k], collapsed[k]).alias(k) for k in keys
    ).drop(LINE)


def labelled_ids(table: Output, labels: pl.DataFrame) -> int:
    """How many ids the labels hold (a line per label: an id may be on several)."""
    return labels[table.id_column].n_unique()


def _nullable(q: Question, column: pl.Series) -> pl.Series:
    """`coerced`, nulls kept where they are."""
    present = column.is_not_null()
    values = coerced(q, column.filter(present))
    out = pl.Series(column.name, [None] * column.len(), dtype=values.dtype)
    return out.scatter(present.arg_true(), values) if values.len() else out


def consensus(
    table: Output, reviewed: pl.DataFrame, keys: list[str], notes: list[str]
) -> pl.DataFrame:
    """One label per id and question from `per_reviewer`'s rows: the reviewers' majority, a
    tie going to the label written first."""
    idc = table.id_column
    ids = reviewed.select(idc).unique(maintain_order=True)
    several = reviewed[idc].is_duplicated().any()
    for k in keys:
        votes = (
            reviewed.select(idc, k).with_row_index(LINE).drop_nulls(k)
            .group_by(idc, k).agg(pl.len().alias("votes"), pl.col(LINE).min())
            .sort("votes", LINE, descending=[True, False])
            .group_by(idc, maintain_order=True).first()
        )  # fmt: skip
        ids = ids.join(votes.select(idc, k), on=idc, how="left")
    if several:
        notes.append(
            "rows labelled by several reviewers: each question's label is their majority "
            "(a tie goes to the label written first)"
        )
    return ids


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
