"""The output beside the corpus it scored (`--input`): coverage and a sample of rows.

Both join on the id column (the output's first column, under its input name; `open_corpus`
checked that the corpus has it, of the same type). Coverage counts
ids on either side with semi and anti joins on that one column, streamed, so a 1M-row corpus
costs a scan of its ids; the sample picks rows by a hash of their id (spread over the whole
corpus, the same rows every time) and reads only those.
"""

from __future__ import annotations

import polars as pl

from evalpipe.reading import Output
from evalpipe.report.data import collect

SAMPLE_ROWS = 12
TEXT_CHARS = 160  # a corpus value is cut to this many characters in the sample
CORPUS_COLUMNS = 2  # corpus columns shown beside the answers


def _ids(frame: pl.LazyFrame, id_column: str) -> pl.LazyFrame:
    return frame.select(id_column)


def coverage(out: Output, corpus: pl.LazyFrame) -> pl.DataFrame:
    """Ids in the corpus, in the output, in both, only in the corpus (not scored yet) and
    only in the output (no longer in this corpus)."""
    idc = out.id_column
    mine, theirs = _ids(out.scan(), idc), _ids(corpus, idc)
    counts = [
        theirs.select(pl.len().alias("corpus rows")),
        mine.select(pl.len().alias("output rows")),
        theirs.join(mine, on=idc, how="semi").select(pl.len().alias("in both")),
        theirs.join(mine, on=idc, how="anti").select(pl.len().alias("not in the output")),
        mine.join(theirs, on=idc, how="anti").select(pl.len().alias("not in the corpus")),
    ]
    return pl.concat(pl.collect_all(counts, engine="streaming"), how="horizontal")


def _cut(column: str) -> pl.Expr:
    text = pl.col(column)
    long = text.str.len_chars() > TEXT_CHARS
    return pl.when(long).then(text.str.slice(0, TEXT_CHARS - 1) + "…").otherwise(text)


def _candidates(corpus: pl.LazyFrame, id_column: str) -> list[str]:
    """The corpus columns that may be shown: the first few beside the id."""
    return [c for c in corpus.collect_schema() if c != id_column][: 4 * CORPUS_COLUMNS]


def _shown(table: pl.DataFrame, columns: list[str]) -> list[str]:
    """The longest texts first (the state is usually the longest), then other columns."""
    text = [c for c in columns if table.schema[c] == pl.String]
    length = {c: table[c].str.len_chars().mean() or 0 for c in text}
    text.sort(key=lambda c: -float(length[c]))  # type: ignore[arg-type]
    return (text + [c for c in columns if c not in text])[:CORPUS_COLUMNS]


def sample(out: Output, corpus: pl.LazyFrame, rows: int = SAMPLE_ROWS) -> pl.DataFrame:
    """A few corpus rows (chosen by a hash of their id) beside their answers: each question's
    head column and the error type. A row the output lacks has null answers."""
    idc = out.id_column
    picked = collect(corpus.select(idc).bottom_k(rows, by=pl.col(idc).hash(seed=15)))
    keys = picked.lazy()
    candidates = _candidates(corpus, idc)
    answers = [q.head for q in out.questions] + ["_error_type"]
    left = corpus.select(idc, *candidates).join(keys, on=idc, how="semi")
    right = out.scan().select(idc, *answers).join(keys, on=idc, how="semi")
    table = collect(left.join(right, on=idc, how="left", suffix=" (output)").sort(idc))
    shown = _shown(table, candidates)
    table = table.select(
        idc, *shown, *[c for c in table.columns if c not in candidates and c != idc]
    )
    return table.with_columns(_cut(c) for c in shown if table.schema[c] == pl.String)
