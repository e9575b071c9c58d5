"""A table that explains itself: labelled names, descriptions, a schema version, `describe`."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner

from evalpipe.cli import main
from evalpipe.output import SCHEMA_VERSION, output_schema, safe_names
from evalpipe.output.table import RowResult
from sinkdata import SCHEMA, answered, failed, manifest_of, part_files, run


def test_safe_names_rule() -> None:
    assert safe_names(["positive", "Négatif !", "", "日本", "very  good?"]) == [
        "positive",
        "negatif",
        "2",
        "3",
        "very_good",
    ]
    assert safe_names(["Good", "good", "bad"]) == ["good_0", "good_1", "bad"]
    assert safe_names(["x" * 60]) == ["x" * 40]
    assert safe_names(["café au lait", "2 stars"]) == ["cafe_au_lait", "2_stars"]


def test_every_column_has_a_description_and_labels_are_kept() -> None:
    for field in SCHEMA:
        assert field.metadata and field.metadata[b"description"], field.name
    assert SCHEMA.metadata[b"evalpipe.schema_version"] == str(SCHEMA_VERSION).encode()
    ok = SCHEMA.field("quality__p__ok")
    assert ok.metadata[b"evalpipe.label"] == b"ok"
    assert ok.metadata[b"evalpipe.question"] == b"quality"
    confidence = SCHEMA.field("sentiment__confidence").metadata[b"description"].decode()
    assert "not a probability of being right" in confidence


def test_parts_and_manifest_carry_version_and_descriptions(tmp_path: Path) -> None:
    run(tmp_path, [answered(1), failed(2)])
    schema = pq.read_schema(tmp_path / part_files(tmp_path)[0])
    assert schema.metadata[b"evalpipe.schema_version"] == b"2"
    assert all(f.metadata[b"description"] for f in schema)
    assert manifest_of(tmp_path)["schema_version"] == SCHEMA_VERSION


def _odd_output(tmp_path: Path) -> Path:
    questions = {
        "sentiment": {
            "type": "choice",
            "instructions": "x",
            "criteria": {"très bien": None, "Very bad!": None},
        },
        "quality": {"type": "score", "instructions": "x", "criteria": ["poor", "fair", "good"]},
    }
    schema = output_schema("id", pa.int64(), questions)
    from evalpipe.output import Sink

    answers = {
        "sentiment": {
            "choice": "très bien",
            "confidence": 0.2,
            "probabilities": {"très bien": 0.6, "Very bad!": 0.4},
        },
        "quality": {
            "score": 1.5,
            "confidence": 0.1,
            "probabilities": {"0": 0.1, "1": 0.3, "2": 0.6},
        },
    }
    sink = Sink.open(tmp_path, schema, "fp", run_id="r", write_seconds=0)
    sink.resume(None)
    sink.append([RowResult(i, answers, "m", 1, position=i) for i in range(3)])
    sink.close()
    sink.finish({}, "finished")
    return tmp_path


def test_duckdb_polars_and_pandas_read_the_labelled_columns(tmp_path: Path) -> None:
    out = _odd_output(tmp_path)
    glob = str(out / "part-*.parquet")
    got = duckdb.sql(
        f"SELECT sentiment__p__tres_bien, quality__p__good FROM '{glob}' ORDER BY _row"
    ).fetchall()
    assert got == [(0.6, 0.6)] * 3
    frame = pl.read_parquet(glob).sort("_row")
    assert frame["sentiment__p__very_bad"].to_list() == [0.4] * 3
    assert frame["_cached"].dtype == pl.Boolean
    import pandas as pd  # here: pandas costs every worker 0.2 s at collection

    pandas = pd.read_parquet(out / part_files(out)[0])
    assert list(pandas["quality__p__fair"]) == [0.3] * 3


def test_describe_lists_every_column_with_a_description(tmp_path: Path) -> None:
    out = _odd_output(tmp_path)
    result = CliRunner().invoke(main, ["describe", str(out), "--json"])
    assert result.exit_code == 0, result.output
    dictionary = json.loads(result.output)
    names = [c["column"] for c in dictionary["columns"]]
    assert names == pq.read_schema(out / part_files(out)[0]).names
    assert all(c["description"] for c in dictionary["columns"])
    labels = {c["column"]: c["label"] for c in dictionary["columns"]}
    assert labels["sentiment__p__tres_bien"] == "très bien"
    assert dictionary["schema_version"] == 2 and dictionary["rows"] == 3
    text = CliRunner().invoke(main, ["describe", str(out)])
    assert text.exit_code == 0
    assert "quality__p__good  (double)  [label: 'good']" in text.output


def test_describe_an_older_table_and_bad_input(tmp_path: Path) -> None:
    old = tmp_path / "old"
    old.mkdir()
    frame = pl.DataFrame({"id": [1], "q__noul": [0.5], "_model": ["m"], "_error_type": [None]})
    frame.write_parquet(old / "part-00000-0123456789abcdef0123456789abcdef.parquet")
    result = CliRunner().invoke(main, ["describe", str(old), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["schema_version"] == 1
    missing = CliRunner().invoke(main, ["describe", str(tmp_path / "nothing")])
    assert missing.exit_code == 2
    assert missing.output.startswith("InputError:") and "part-*.parquet" in missing.output
