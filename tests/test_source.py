"""Source: real Parquet files written to tmp_path and read back through evalpipe.input.source."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalpipe.errors import InputError
from evalpipe.input.source import (
    BLANK_OBJECT,
    BLANK_STATE,
    NULL_STATE,
    Row,
    Source,
    SourceSpec,
)
from evalpipe.planning import state_key


def write(path: Path, columns: dict, **kwargs) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path, **kwargs)
    return path


def rows(source: Source, **kwargs) -> list[Row]:
    return [row for batch in source.batches(**kwargs) for row in batch]


@pytest.fixture
def reviews(tmp_path: Path) -> Path:
    ids = list(range(1, 11))
    return write(
        tmp_path / "reviews.parquet",
        {"review_id": ids, "text": [f"review {i}" for i in ids], "stars": ids},
        row_group_size=4,
    )


# --------------------------------------------------------------------------- string state


def test_string_state_rows_in_file_order(reviews: Path) -> None:
    source = Source(SourceSpec(reviews, "review_id", "text"))
    got = rows(source)
    assert [r.id for r in got] == list(range(1, 11))
    assert all(type(r.id) is int for r in got)
    assert got[0] == Row(1, "review 1", None)
    assert source.num_rows == 10
    assert source.id_type == pa.int64()
    assert source.schema.names == ["review_id", "text", "stars"]


def test_null_empty_and_whitespace_states_are_flagged(tmp_path: Path) -> None:
    path = write(
        tmp_path / "a.parquet",
        {"id": ["a", "b", "c", "d", "e"], "text": ["ok", None, "", " \t\n", "  x  "]},
    )
    got = rows(Source(SourceSpec(path, "id", "text")))
    assert got == [
        Row("a", "ok", None),
        Row("b", None, NULL_STATE),
        Row("c", None, BLANK_STATE),
        Row("d", None, BLANK_STATE),
        Row("e", "  x  ", None),
    ]


def test_dictionary_encoded_and_large_string_columns(tmp_path: Path) -> None:
    text = pa.array(["x", "y", "x"]).dictionary_encode()
    path = write(
        tmp_path / "a.parquet", {"id": pa.array(["1", "2", "3"], pa.large_string()), "t": text}
    )
    source = Source(SourceSpec(path, "id", "t"))
    assert [r.state for r in rows(source)] == ["x", "y", "x"]
    assert source.id_type == pa.large_string()


# --------------------------------------------------------------------------- object state


def test_object_state_keeps_json_types(tmp_path: Path) -> None:
    when = dt.datetime(2024, 5, 6, 7, 8, 9, 123000)
    columns = {
        "id": [7, 8],
        "n": [1, None],
        "f": [0.25, float("nan")],
        "f32": pa.array([0.1, None], pa.float32()),
        "ok": [True, False],
        "s": ["hi", None],
        "ts": pa.array([when, None], pa.timestamp("ms")),
        "tz": pa.array([when, None], pa.timestamp("us", tz="UTC")),
        "day": pa.array([dt.date(2024, 5, 6), None], pa.date32()),
        "price": pa.array([decimal.Decimal("19.90"), None], pa.decimal128(6, 2)),
        "tags": [["a", "b"], []],
        "meta": [{"k": 1, "v": "x"}, None],
    }
    path = write(tmp_path / "a.parquet", columns)
    state_columns = tuple(c for c in columns if c != "id")
    first, second = rows(Source(SourceSpec(path, "id", state_columns)))
    assert first == Row(
        7,
        {
            "n": 1,
            "f": 0.25,
            "f32": 0.1,
            "ok": True,
            "s": "hi",
            "ts": "2024-05-06T07:08:09.123",
            "tz": "2024-05-06T07:08:09.123000+00:00",
            "day": "2024-05-06",
            "price": "19.90",
            "tags": ["a", "b"],
            "meta": {"k": 1, "v": "x"},
        },
        None,
    )
    assert type(first.state["n"]) is int and type(first.state["ok"]) is bool
    # NaN has no JSON form: it becomes null; False is a value, so the row is valid
    assert second.state == {c: None for c in state_columns} | {"ok": False, "tags": []}
    assert second.invalid is None


def test_nested_map_and_wide_integer_values(tmp_path: Path) -> None:
    columns = {
        "id": [1],
        "m": pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int64())),
        "when": pa.array([[dt.datetime(2024, 1, 2)]], pa.list_(pa.timestamp("s"))),
        "big": pa.array([2**64 - 1], pa.uint64()),
    }
    path = write(tmp_path / "a.parquet", columns)
    (row,) = rows(Source(SourceSpec(path, "id", ("m", "when", "big"))))
    assert row.state == {
        "m": [{"key": "k", "value": 1}],
        "when": ["2024-01-02 00:00:00.000"],  # nested: Arrow cast text (Parquet keeps ms)
        "big": 2**64 - 1,
    }
    assert len(state_key(row.state)) == 16  # a uint64 beyond int64 still has a digest


def test_a_value_python_cannot_hold_names_the_file(tmp_path: Path) -> None:
    # A microsecond timestamp past year 9999: no Python datetime holds it (with pandas installed
    # or not; a nanosecond one would come back as a pandas Timestamp).
    late = pa.array([2**62], pa.timestamp("us"))
    path = write(tmp_path / "a.parquet", {"id": late, "t": ["x"]})
    with pytest.raises(InputError, match=r"input file '.*a\.parquet' has a value that cannot"):
        rows(Source(SourceSpec(path, "id", "t")))


def test_duration_has_no_json_form(tmp_path: Path) -> None:
    path = write(tmp_path / "a.parquet", {"id": [1], "d": pa.array([5], pa.duration("s"))})
    with pytest.raises(InputError, match=r"column 'd' has type duration\[s\], which has no JSON"):
        Source(SourceSpec(path, "id", ("d",)))


def test_object_state_all_null_or_blank_is_invalid(tmp_path: Path) -> None:
    path = write(
        tmp_path / "a.parquet",
        {"id": [1, 2, 3], "title": [None, " ", "t"], "body": ["", None, None], "n": [None] * 3},
    )
    got = rows(Source(SourceSpec(path, "id", ("title", "body", "n"))))
    assert got[0] == Row(1, None, BLANK_OBJECT)
    assert got[1] == Row(2, None, BLANK_OBJECT)
    assert got[2] == Row(3, {"title": "t", "body": None, "n": None}, None)


# --------------------------------------------------------------------------- files and batches


def test_directory_sorted_hidden_files_ignored(tmp_path: Path) -> None:
    write(tmp_path / "b.parquet", {"id": [3, 4], "t": ["c", "d"]})
    write(tmp_path / "a.parquet", {"id": [1, 2], "t": ["a", "b"]})
    write(tmp_path / "_metadata.parquet", {"x": [1]})  # would break the columns if read
    write(tmp_path / ".hidden.parquet", {"x": [1]})
    (tmp_path / "_SUCCESS").write_text("")
    (tmp_path / "README.md").write_text("not data")
    source = Source(SourceSpec(tmp_path, "id", "t"))
    assert [Path(p).name for p in source.files] == ["a.parquet", "b.parquet"]
    assert [r.id for r in rows(source)] == [1, 2, 3, 4]
    assert source.num_rows == 4


def test_batches_are_bounded_across_files_and_skip(tmp_path: Path) -> None:
    write(tmp_path / "a.parquet", {"id": list(range(7)), "t": ["x"] * 7}, row_group_size=2)
    write(tmp_path / "b.parquet", {"id": list(range(7, 12)), "t": ["y"] * 5})
    source = Source(SourceSpec(tmp_path, "id", "t", batch_rows=3))
    assert [len(b) for b in source.batches()] == [3, 3, 3, 3]
    kept = list(source.batches(skip=lambda i: i % 2 == 0))
    assert all(len(b) <= 3 for b in kept)
    assert [r.id for b in kept for r in b] == [1, 3, 5, 7, 9, 11]


def test_batches_are_lazy(tmp_path: Path) -> None:
    first = write(tmp_path / "a.parquet", {"id": [1, 2, 3, 4], "t": ["x"] * 4})
    second = write(tmp_path / "b.parquet", {"id": [5, 6], "t": ["y"] * 2})
    source = Source(SourceSpec(tmp_path, "id", "t", batch_rows=2))
    batches = source.batches()
    assert [r.id for r in next(batches)] == [1, 2]
    # Nothing past the first file has been opened yet: removing the second file is noticed
    # only when the iterator gets there.
    second.unlink()
    assert [r.id for r in next(batches)] == [3, 4]
    with pytest.raises(InputError, match=r"b\.parquet"):
        next(batches)
    assert first.exists()


# --------------------------------------------------------------------------- errors


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"input path '.*nope' does not exist"):
        Source(SourceSpec(tmp_path / "nope", "id", "t"))


def test_not_parquet_names_the_file(tmp_path: Path) -> None:
    write(tmp_path / "a.parquet", {"id": [1], "t": ["x"]})
    (tmp_path / "b.parquet").write_text("id,t\n1,x\n")
    with pytest.raises(InputError, match=r"input file '.*b\.parquet' is not a Parquet file"):
        Source(SourceSpec(tmp_path, "id", "t"))
    with pytest.raises(InputError, match="is not a Parquet file"):
        Source(SourceSpec(tmp_path / "b.parquet", "id", "t"))


def test_directory_without_parquet(tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_text("id\n1\n")
    with pytest.raises(InputError, match="holds no Parquet files"):
        Source(SourceSpec(tmp_path, "id", "t"))


def test_unknown_columns_list_columns_and_suggest(reviews: Path) -> None:
    with pytest.raises(InputError) as info:
        Source(SourceSpec(reviews, "reviewid", "text"))
    assert str(info.value) == (
        "id_column 'reviewid' not found; columns: review_id, text, stars; did you mean 'review_id'?"
    )
    with pytest.raises(InputError) as info:
        Source(SourceSpec(reviews, "review_id", ("text", "zzz")))
    assert str(info.value) == "state column 'zzz' not found; columns: review_id, text, stars"


def test_binary_and_non_text_state_columns(tmp_path: Path) -> None:
    path = write(tmp_path / "a.parquet", {"id": [1], "blob": [b"\x00"], "n": [3], "t": ["x"]})
    with pytest.raises(InputError, match=r"^column 'blob' is binary; the service takes text only$"):
        Source(SourceSpec(path, "id", ("t", "blob")))
    with pytest.raises(InputError, match="column 'blob' is binary"):
        Source(SourceSpec(path, "id", "blob"))
    with pytest.raises(InputError, match="state column 'n' has type int64; a single state"):
        Source(SourceSpec(path, "id", "n"))


def test_files_that_disagree_on_a_column_type(tmp_path: Path) -> None:
    write(tmp_path / "a.parquet", {"id": [1], "t": ["x"]})
    write(tmp_path / "b.parquet", {"id": ["2"], "t": pa.array(["y"], pa.large_string())})
    with pytest.raises(InputError, match=r"b\.parquet': column 'id' has type string, but"):
        Source(SourceSpec(tmp_path, "id", "t"))


def test_duplicate_ids_listed(tmp_path: Path) -> None:
    write(tmp_path / "a.parquet", {"id": [1, 2, 3, 2, 9, 8, 7, 6], "t": ["x"] * 8})
    write(tmp_path / "b.parquet", {"id": [3, 3, 6, 7, 8, 9, 10], "t": ["x"] * 7})
    source = Source(SourceSpec(tmp_path, "id", "t"))
    with pytest.raises(InputError) as info:
        source.check_unique_ids()
    assert str(info.value) == (
        "id_column 'id' is not unique: 6 ids occur more than once, "
        "e.g. 2 (2 times), 3 (3 times), 6 (2 times), 7 (2 times), 8 (2 times)"
    )


def test_null_ids_are_an_error(tmp_path: Path) -> None:
    path = write(tmp_path / "a.parquet", {"id": ["a", None, None], "t": ["x"] * 3})
    with pytest.raises(InputError, match="id_column 'id' is null in 2 rows"):
        Source(SourceSpec(path, "id", "t")).check_unique_ids()


def test_unique_ids_pass(reviews: Path) -> None:
    Source(SourceSpec(reviews, "review_id", "text")).check_unique_ids()


# --------------------------------------------------------------------------- input positions


def test_rows_carry_their_corpus_position_across_files_skips_and_samples(tmp_path: Path) -> None:
    """`_row`: a row's position in the corpus, whatever is skipped or sampled."""
    from evalpipe.input.source import Selection

    write(tmp_path / "c" / "a.parquet", {"id": [1, 2, 3], "t": ["x"] * 3})
    write(tmp_path / "c" / "b.parquet", {"id": [4, 5, 6, 7], "t": ["y"] * 4})
    spec = SourceSpec(tmp_path / "c", "id", "t", batch_rows=2)
    every = rows(Source(spec))
    assert [(r.id, r.position) for r in every] == [(i, i - 1) for i in range(1, 8)]
    skipped = rows(Source(spec), skip=lambda i: i % 2 == 0)
    assert [(r.id, r.position) for r in skipped] == [(1, 0), (3, 2), (5, 4), (7, 6)]
    first = rows(Source(SourceSpec(tmp_path / "c", "id", "t", rows=Selection(4))))
    assert [r.position for r in first] == [0, 1, 2, 3]
    sample = Selection(3, sample=True, seed=1)
    drawn = rows(Source(SourceSpec(tmp_path / "c", "id", "t", rows=sample)))
    assert [r.position for r in drawn] == sample.positions(7)
    assert [r.id - 1 for r in drawn] == sample.positions(7)
