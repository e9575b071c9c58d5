"""The one reader of an output (`evalpipe.reading`): a Parquet output of schema version 2, one of
version 1 (as older evalpipes wrote it), and a Delta table (the whole table, a night, a version)
give the same questions and rows, and every door that reads an output (`ep.read`, the analysts'
commands, the report) reads through it. Real Parquet and a real Delta table (deltalake)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

import evalpipe as ep
from evalpipe import report
from evalpipe.reading import Output, open_output
from sinkdata import answered, failed, run

NIGHT = "2026-11-27"
ROWS = [answered(i, p=0.1 * i) for i in range(6)] + [failed(6)]
# How a version 1 writer named the columns that version 2 names otherwise.
V1_NAMES = {"helpful__p_true": "helpful__noul", "quality__p__poor": "quality__p__0",
            "quality__p__ok": "quality__p__1"}  # fmt: skip


def v1_output(v2: Path, path: Path) -> None:
    """`v2`'s rows as a version 1 part: its column names, no layout, no version, no labels."""
    table = pq.read_table(next(v2.glob("part-*.parquet")))
    names = [V1_NAMES.get(n, n) for n in table.column_names]
    plain = pa.schema([pa.field(n, f.type) for n, f in zip(names, table.schema, strict=True)])
    path.mkdir()
    old = pa.Table.from_arrays(table.columns, schema=plain)
    pq.write_table(old, path / "part-00000-0123456789abcdef0123456789abcdef.parquet")


def test_parquet_v1_v2_and_delta_give_the_same_questions_and_rows(tmp_path: Path) -> None:
    parquet, older, table = tmp_path / "v2", tmp_path / "v1", tmp_path / "table"
    run(parquet, ROWS)
    run(table, ROWS, format="delta", partition={"dt": NIGHT})
    v1_output(parquet, older)

    v2 = open_output(parquet)
    assert [(q.key, q.kind, q.head, q.probs, q.labels) for q in v2.questions] == [
        ("helpful", "noul", "helpful__p_true", (), ()),
        ("sentiment", "choice", "sentiment__choice", ("positive", "negative", "mixed"),
         ("positive", "negative", "mixed")),
        ("quality", "score", "quality__score", ("0", "1"), ("poor", "ok")),
    ]  # fmt: skip
    assert v2.questions[2].prob_columns == ("quality__p__poor", "quality__p__ok")
    assert v2.version == 2 and v2.notes == ()
    answers = [c for q in v2.questions for c in q.columns]

    for named in (str(table), f"{table}/dt={NIGHT}", f"{table}@0"):
        delta = open_output(named)
        assert delta.questions == v2.questions, named
        assert delta.version == 2 and delta.shown == named
        rows = delta.rows.sort("review_id")
        assert rows.select("review_id", *answers).equals(v2.rows.select("review_id", *answers))
        assert delta.manifest is not None and delta.manifest["rows"] == len(ROWS)
        assert [r["run_id"] for r in delta.manifest["runs"]] == ["run-1"]
    assert v2.manifest is not None and [r["run_id"] for r in v2.manifest["runs"]] == ["run-1"]

    v1 = open_output(older)
    assert v1.version == 1 and "found by their column names" in v1.notes[0]
    same = [(q.key, q.kind, q.probs) for q in v1.questions]
    assert same == [(q.key, q.kind, q.probs) for q in v2.questions]
    assert [q.head for q in v1.questions] == [
        "helpful__noul",
        "sentiment__choice",
        "quality__score",
    ]
    assert v1.questions[2].labels == ("0", "1")  # a version 1 table knows its levels by index
    for old, new in zip(v1.questions, v2.questions, strict=True):
        columns = list(zip(old.columns, new.columns, strict=True))
        assert all(v1.rows[a].equals(v2.rows[b], check_names=False) for a, b in columns)


def test_every_reader_of_an_output_reads_through_the_one_reader(tmp_path: Path) -> None:
    """`ep.read` (in input order, a Delta night with its partition column), the analysts'
    reader and the report's `report_output` give the one reader's rows and `Output`."""
    parquet, table = tmp_path / "v2", tmp_path / "table"
    run(parquet, list(reversed(ROWS)))
    run(table, ROWS, format="delta", partition={"dt": NIGHT})
    night = f"{table}/dt={NIGHT}"

    read = ep.read(parquet).collect()
    assert read["review_id"].to_list() == list(range(len(ROWS)))[::-1]  # no `_row`: as stored
    assert read.equals(open_output(parquet).scan().collect())
    delta = ep.read(night).collect().sort("review_id")
    assert delta["dt"].unique().to_list() == [NIGHT]
    answers = ["review_id", "helpful__p_true", "sentiment__choice", "quality__score"]
    assert delta.select(answers).equals(read.sort("review_id").select(answers))

    for opened in (open_output(str(night)), report.report_output(night)):
        assert isinstance(opened, Output) and opened.id_column == "review_id"
        assert opened.rows.height == len(ROWS) and len(opened.parts) == 1
    assert report.report_output(parquet).scan().select(pl.len()).collect().item() == len(ROWS)
