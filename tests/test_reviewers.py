"""Labels as the results browser writes them (one line per label, `_` metadata columns,
several reviewers) read by the one reader `agree`, `calibrate` and `infer` share, and the
reviewers' agreement among themselves."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from evalpipe.analysis import agreement, read_labels
from evalpipe.analysis.labels import matched
from evalpipe.analysis.reviewers import fleiss, reviewer_agreement
from evalpipe.errors import InputError
from evalpipe.reading import Output, open_output
from ppidata import corpus

# Fleiss (1971)'s worked example as commonly reproduced: 10 subjects, 14 raters, 5 categories.
FLEISS_TABLE = np.array([
    [0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
    [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7],
])  # fmt: skip


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Output:
    return open_output(str(corpus(tmp_path_factory.mktemp("reviewers"), 50).out))


def test_fleiss_kappa_of_the_worked_example() -> None:
    assert fleiss(FLEISS_TABLE.astype(float)) == pytest.approx(0.20993, abs=1e-4)


def test_fleiss_from_reviewers_labels_is_the_same(table: Output) -> None:
    """The example's ratings as 14 reviewers' labels of a 5-level score (levels named 0-4
    here as the question has 3: a choice of categories is all Fleiss asks)."""
    rows = []
    for subject, counts in enumerate(FLEISS_TABLE):
        ratings = np.repeat(np.arange(5), counts)
        for rater, level in enumerate(ratings):
            rows.append({"id": subject, "_reviewer": f"r{rater}", "k": str(level)})
    found = reviewer_agreement(pl.DataFrame(rows), "id", ["k"])
    assert found == [{"question": "k", "reviewers": 14, "rows": 10, "kappa": pytest.approx(
        0.20993, abs=1e-4), "method": "fleiss"}]  # fmt: skip


def test_without_reviewers_it_reads_as_it_always_did(table: Output) -> None:
    labels = pl.DataFrame({"id": [1, 2, 2], "helpful": ["yes", "no", "yes"]})
    with pytest.raises(InputError, match="id 2 is labelled twice"):
        matched(table, labels, [])
    notes: list[str] = []
    meta = pl.DataFrame({"id": [1, 2], "helpful": ["yes", "no"], "_design": ["uniform"] * 2,
                         "_inclusion_prob": [0.1, 0.1], "extra": [1, 2]})  # fmt: skip
    rows = matched(table, meta, notes)
    assert rows.height == 2 and "helpful\x00label" in rows.columns
    assert notes == ["label columns that are no question: extra: ignored"]  # `_` ones: metadata


def test_appended_lines_collapse_last_wins_then_majority_ties_to_the_first(
    table: Output, tmp_path: Path
) -> None:
    lines = [
        ("1", "ann", "yes", ""), ("1", "ann", "", "good"), ("1", "ann", "no", ""),  # ann: no
        ("1", "bob", "yes", ""), ("1", "cy", "no", ""),  # majority no (2 to 1)
        ("2", "bob", "yes", ""), ("2", "ann", "no", ""),  # a tie: bob's, written first
        ("3", "cy", "", "poor"),  # no helpful label: not a helpful row
    ]  # fmt: skip
    path = tmp_path / "labels.csv"
    path.write_text(
        "id,_reviewer,helpful,quality,_labelled_at,_design,_inclusion_prob\n"
        + "".join(
            f"{i},{r},{h},{q},2026-11-29T06:0{n}:00Z,browse,\n"
            for n, (i, r, h, q) in enumerate(lines)
        )
    )
    notes: list[str] = []
    rows = matched(table, read_labels(str(path)), notes).sort("id")
    assert rows["id"].to_list() == [1, 2, 3]
    assert rows["helpful\x00label"].to_list() == [0, 1, None]
    assert rows["quality\x00label"].to_list() == [2, None, 0]
    assert any("several reviewers" in n for n in notes)
    doc = agreement(table, read_labels(str(path)))
    assert doc["labelled_rows"] == 3 and doc["matched_rows"] == 3
    helpful = next(r for r in doc["reviewers"] if r["question"] == "helpful")
    assert helpful["reviewers"] == 3 and helpful["rows"] == 2 and helpful["method"] == "fleiss"
