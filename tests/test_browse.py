"""The browser's data, without a browser: views (filter, sort, pages) against polars over the same
rows, sorted pages against a whole sort, the labels file against `evalpipe agree`, and the
comparison against `evalpipe diff` (the page's own behaviour: tests/test_browse_page.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from browsedata import HOSTILE, HOSTILE_STATE, ROWS, write_all, write_run
from evalpipe.browser import Browsed, LabelsFile
from evalpipe.cli import main
from evalpipe.errors import InputError


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_all(tmp_path_factory.mktemp("browse"))


@pytest.fixture
def browsed(data: dict[str, Path], tmp_path: Path) -> Browsed:
    return Browsed(str(data["a"]), vs=str(data["b"]), labels=tmp_path / "labels.csv",
                   corpus=str(data["corpus"]), reviewer="ann")  # fmt: skip


def table(data: dict[str, Path]) -> pl.DataFrame:
    return pl.read_parquet(sorted(data["a"].glob("part-*.parquet")))


def ids(page: dict[str, Any]) -> list[int]:
    return [row[0] for row in page["rows"]]


# --------------------------------------------------------------------------- sorted pages


@pytest.mark.parametrize("kind", ["float", "ties", "text"])
@pytest.mark.parametrize("descending", [False, True])
def test_a_sorted_page_is_the_whole_sort_s_slice(kind: str, descending: bool) -> None:
    from evalpipe.browser.order import full_order, sort_key, sorted_slice

    rng = np.random.default_rng(3)
    values = {
        "float": pl.Series(rng.uniform(size=5000)),
        "ties": pl.Series(rng.integers(0, 4, size=5000)),
        "text": pl.Series(rng.choice(["b", "a", "c"], size=5000)).cast(pl.Categorical),
    }[kind]
    values = values.scatter([5, 77, 4999], None)
    key = sort_key(values, descending)
    assert key is not None
    whole = pl.DataFrame({"v": values}).with_row_index()
    if kind == "text":
        whole = whole.with_columns(pl.col("v").cast(pl.String))
    expected = whole.sort("v", descending=descending, nulls_last=True, maintain_order=True)
    assert full_order(key).tolist() == expected["index"].to_list()
    for offset in (0, 1, 2500, 4990, 4999):
        assert (
            sorted_slice(key, offset, 37).tolist()
            == expected["index"][offset : offset + 37].to_list()
        )


# --------------------------------------------------------------------------- views


def test_the_plain_view_pages_in_table_order(browsed: Browsed, data: dict[str, Path]) -> None:
    rows = table(data)
    page = browsed.page({"offset": "590", "limit": "50"})
    assert page["count"] == ROWS == rows.height
    assert page["columns"][:2] == ["doc_id", "helpful__p_true"]
    assert ids(page) == rows["doc_id"][590:].to_list()
    assert page["positions"] == list(range(590, 600))


@pytest.mark.parametrize(
    ("filters", "expr"),
    [
        ([["sentiment__choice", "eq", "mixed"]], pl.col("sentiment__choice") == "mixed"),
        ([["helpful__p_true", "ge", "0.8"]], pl.col("helpful__p_true") >= 0.8),
        ([["_error_type", "notnull"]], pl.col("_error_type").is_not_null()),
        ([["_error_type", "eq", "context_limit"]], pl.col("_error_type") == "context_limit"),
        (
            [["quality__score", "gt", 1.5], ["quality__score", "le", "2"]],
            (pl.col("quality__score") > 1.5) & (pl.col("quality__score") <= 2),
        ),
    ],
)
def test_filters_count_and_keep_the_rows_polars_keeps(
    browsed: Browsed, data: dict[str, Path], filters: list[Any], expr: pl.Expr
) -> None:
    expected = table(data).filter(expr)
    page = browsed.page({"filters": json.dumps(filters), "limit": "1000"})
    assert page["count"] == expected.height > 0
    assert ids(page) == expected["doc_id"].to_list()


def test_a_sort_orders_every_page_with_nulls_last(browsed: Browsed, data: dict[str, Path]) -> None:
    expected = table(data).sort("helpful__p_true", descending=True, nulls_last=True)
    first = browsed.page({"sort": "-helpful__p_true", "limit": "300"})
    second = browsed.page({"sort": "-helpful__p_true", "offset": "300", "limit": "300"})
    got = ids(first) + ids(second)
    values = [r[1] for r in first["rows"] + second["rows"]]
    assert values == expected["helpful__p_true"].to_list()
    assert set(got) == set(expected["doc_id"].to_list())
    assert values[-3:] == [None, None, None]  # the error rows


def test_text_in_the_state_is_searched_in_the_corpus(browsed: Browsed) -> None:
    page = browsed.page({"filters": json.dumps([["@state", "contains", "<script>"]])})
    assert ids(page) == [HOSTILE]
    page = browsed.page({"filters": json.dumps([["@state", "contains", "works well"]])})
    assert page["count"] == len([i for i in range(ROWS) if i % 3 == 0])


def test_a_row_holds_its_columns_and_its_state(browsed: Browsed) -> None:
    row = browsed.row({"id": str(HOSTILE)})
    assert row["position"] == HOSTILE
    assert dict(row["state"])["text"] == HOSTILE_STATE
    assert dict(row["values"])["doc_id"] == HOSTILE


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"filters": json.dumps([["nope", "eq", 1]])}, "no column 'nope'"),
        ({"filters": json.dumps([["helpful__p_true", "eq", "much"]])}, "'much' is not a"),
        ({"filters": json.dumps([["helpful__p_true", "like", 1]])}, "no operator 'like'"),
        ({"filters": "[1,"}, "'filters' is not JSON"),
        ({"offset": "ten"}, "'offset' must be a whole number"),
    ],
)
def test_a_bad_view_is_one_line_naming_it(
    browsed: Browsed, query: dict[str, str], message: str
) -> None:
    with pytest.raises(InputError, match=message):
        browsed.page(query)


def test_a_delta_table_is_browsed_as_a_folder_is(tmp_path: Path, data: dict[str, Path]) -> None:
    write_run(tmp_path / "table", range(ROWS), 1, "model-1.13.0", format="delta")
    browsed = Browsed(str(tmp_path / "table"))
    expected = table(data).sort("quality__score", nulls_last=True)
    page = browsed.page({"sort": "quality__score", "limit": "1000"})
    assert page["count"] == ROWS
    assert [r[3] for r in page["rows"]] == expected["quality__score"].to_list()
    assert browsed.row({"id": "42"})["position"] == browsed.rows.position(42)


# --------------------------------------------------------------------------- labels


def test_labels_are_lines_agree_reads(
    browsed: Browsed, data: dict[str, Path], tmp_path: Path
) -> None:
    for i in range(30):
        answer = "yes" if i % 2 else "no"
        browsed.label({"id": i + 100, "question": "helpful", "answer": answer, "design": "uniform",
                       "inclusion_prob": 0.05})  # fmt: skip
    browsed.label({"id": 200, "question": "sentiment", "answer": "mixed"})
    written = pl.read_csv(tmp_path / "labels.csv", infer_schema=False)
    assert written.columns == ["doc_id", "helpful", "sentiment", "quality", "_reviewer",
                               "_labelled_at", "_design", "_inclusion_prob"]  # fmt: skip
    assert written.height == 31
    assert set(written["_reviewer"]) == {"ann"}
    assert written["_design"].to_list() == ["uniform"] * 30 + ["browse"]
    assert written["_inclusion_prob"][0] == "0.05" and written["_inclusion_prob"][30] is None
    result = CliRunner().invoke(main, ["agree", str(data["a"]), "--labels",
                                       str(tmp_path / "labels.csv"), "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    agreement = json.loads(result.output)
    helpful = next(q for q in agreement["questions"] if q["key"] == "helpful")
    assert helpful["n"] == 30


def test_the_last_label_wins_and_reviewers_are_compared(browsed: Browsed, tmp_path: Path) -> None:
    labels = LabelsFile(tmp_path / "labels.csv", "doc_id", browsed.output.questions)
    for i, answer in enumerate(["yes", "no", "yes"]):
        labels.append(i, "helpful", answer, "ann")
    labels.append(0, "helpful", "no", "ann")  # a correction
    for i, answer in enumerate(["no", "no", "yes"]):
        labels.append(i, "helpful", answer, "bob")
    latest = labels.latest().filter(pl.col("_reviewer") == "ann").sort("id")
    assert latest["answer"].to_list() == ["no", "no", "yes"]
    assert labels.labelled_by("ann", "helpful") == {"0", "1", "2"}
    helpful = labels.summary()["questions"][0]
    assert helpful["labels"] == {"ann": 3, "bob": 3}
    assert helpful["pairs"] == [{"a": "ann", "b": "bob", "both": 3, "agree": 3}]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"id": 1, "question": "helpful", "answer": "maybe"}, "'maybe' is no answer to 'helpful'"),
        ({"id": 1, "question": "nope", "answer": "yes"}, "no question 'nope'"),
        ({"id": 99999, "question": "helpful", "answer": "yes"}, "no row with doc_id 99999"),
        ({"id": 1, "question": "helpful", "answer": "yes", "design": "x"}, "design 'x'"),
    ],
)
def test_a_bad_label_writes_nothing(browsed: Browsed, tmp_path: Path, body: dict[str, Any],
                                    message: str) -> None:  # fmt: skip
    with pytest.raises(InputError, match=message):
        browsed.label(body)
    assert not (tmp_path / "labels.csv").exists()


def test_a_queue_skips_what_the_reviewer_labelled(browsed: Browsed) -> None:
    query = {"question": "helpful", "design": "uniform", "n": "20", "seed": "4"}
    first = browsed.queue(query)
    assert len(first["rows"]) == 20 and {r["design"] for r in first["rows"]} == {"uniform"}
    for row in first["rows"][:5]:
        label = {"id": row["id"], "question": "helpful", "answer": "yes"}
        browsed.label({**label, "design": row["design"], "inclusion_prob": row["inclusion_prob"]})
    again = browsed.queue(query)
    assert [r["id"] for r in again["rows"]] == [r["id"] for r in first["rows"][5:]]
    assert browsed.queue({**query, "reviewer": "bob"})["rows"] == first["rows"]


# --------------------------------------------------------------------------- two runs


def test_the_comparison_counts_are_diff_s(browsed: Browsed, data: dict[str, Path]) -> None:
    result = CliRunner().invoke(main, ["diff", str(data["a"]), str(data["b"]), "--json"])
    assert result.exit_code == 0, result.output
    diff = json.loads(result.output)
    shown = browsed.comparison({"limit": "1000"})
    counts = shown["counts"]
    assert counts["shared_ids"] == diff["shared_ids"]
    assert counts["only_in_a"] == diff["only_in_a"]["count"] == 2
    assert counts["only_in_b"] == diff["only_in_b"]["count"] == 2
    for mine, theirs in zip(counts["questions"], diff["questions"], strict=True):
        assert mine["key"] == theirs["key"] and mine["n"] == theirs["n"]
        assert mine["flips"]["count"] == theirs["flips"]["count"] > 0
        assert mine["changes"] == theirs["changes"]
    flipped = {r["id"] for q in diff["questions"] for r in q["flips"]["rows"]}
    assert {r[0] for r in shown["changed"]["rows"]} == flipped
    assert shown["changed"]["count"] == len(flipped)


# --------------------------------------------------------------------------- the command


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nowhere"], "InputError: output 'nowhere' does not exist"),
        (["{a}", "--vs", "nowhere"], "InputError: output 'nowhere' does not exist"),
        (["{a}", "--input", "nowhere.parquet"], "nowhere.parquet' does not exist"),
        (["{a}", "--labels", "{bad}"], "has no column '_reviewer'"),
    ],
)
def test_what_cannot_be_browsed_is_one_line_and_exit_2(
    data: dict[str, Path], tmp_path: Path, args: list[str], message: str
) -> None:
    bad = tmp_path / "hand.csv"
    bad.write_text("doc_id,helpful\n1,yes\n")
    filled = [a.format(a=data["a"], bad=bad) for a in args]
    result = CliRunner().invoke(main, ["browse", *filled])
    assert result.exit_code == 2
    assert message in result.output and len(result.output.strip().splitlines()) == 1
