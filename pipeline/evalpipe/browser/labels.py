"""The labels file a person writes from the browser: one CSV line per label, durable at once.

The format is the one `evalpipe agree`, `calibrate` and the canary read (`evalpipe.analysis`):
the output's id column and one column per question key holding the person's answer (yes/no,
the option, the level's label), plus metadata columns whose names start with `_`: `_reviewer`,
`_labelled_at` (UTC, ISO 8601), `_design` (how the row was chosen: `uniform`, `stratified`,
`uncertain`, or `browse` outside a queue) and `_inclusion_prob` (empty when the design gives
none). A line holds one question's label, the others empty; for one id, reviewer and question
the last non-empty value wins (a correction).

Each label is appended under an exclusive lock on the file (`fcntl.flock`: several reviewers,
browsers or processes share one file), flushed and fsynced before the answer says it is kept,
so a browser closed or a machine stopped a moment later loses nothing. The labels never touch
the output.
"""

from __future__ import annotations

import csv
import fcntl
import io
import os
from datetime import UTC, datetime
from itertools import combinations
from pathlib import Path
from typing import Any

import polars as pl

from evalpipe.errors import InputError
from evalpipe.reading import Question

META = ("_reviewer", "_labelled_at", "_design", "_inclusion_prob")
DESIGNS = ("uniform", "stratified", "uncertain", "browse")


class LabelsFile:
    """The labels file at `path` for an output with id column `id_column` and `questions`."""

    def __init__(self, path: Path, id_column: str, questions: tuple[Question, ...]) -> None:
        self.path, self.id_column, self.questions = path, id_column, questions
        self.header = [id_column, *(q.key for q in questions), *META]
        if path.exists() and path.stat().st_size:
            found = next(csv.reader(io.StringIO(_first_line(path))), [])
            missing = [c for c in (id_column, *META) if c not in found]
            if missing:
                raise InputError(
                    f"--labels '{path}' has no column '{missing[0]}': the browser appends to a "
                    "labels file it wrote (give a new file)"
                )
            self.header = found

    def answers(self, question: Question) -> list[str]:
        """What a person may answer to `question`, as the file holds it."""
        if question.kind == "noul":
            return ["yes", "no"]
        return [question.label(p) for p in question.probs]

    def append(
        self, row_id: Any, key: str, answer: str, reviewer: str, design: str = "browse",
        inclusion_prob: float | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """Write one label (a line), durably; the line as written."""
        question = next((q for q in self.questions if q.key == key), None)
        if question is None:
            raise InputError(f"no question '{key}' in the output")
        if answer not in self.answers(question):
            shown = ", ".join(self.answers(question))
            raise InputError(f"'{answer}' is no answer to '{key}' ({shown})")
        if design not in DESIGNS:
            raise InputError(f"design '{design}' is none of {', '.join(DESIGNS)}")
        if not reviewer.strip():
            raise InputError("a label needs the reviewer's name (--reviewer NAME)")
        if key not in self.header:
            raise InputError(f"--labels '{self.path}' has no column '{key}' for the question")
        line = {
            self.id_column: row_id, key: answer, "_reviewer": reviewer.strip(),
            "_labelled_at": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "_design": design, "_inclusion_prob": "" if inclusion_prob is None else inclusion_prob,
        }  # fmt: skip
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerow([line.get(c, "") for c in self.header])
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8", newline="") as out:
            fcntl.flock(out, fcntl.LOCK_EX)
            try:
                if out.seek(0, os.SEEK_END) == 0:  # another writer may have begun it meanwhile
                    out.write(",".join(self.header) + "\n")
                out.write(text.getvalue())
                out.flush()
                os.fsync(out.fileno())
            finally:
                fcntl.flock(out, fcntl.LOCK_UN)
        return line

    def read(self) -> pl.DataFrame:
        """Every line of the file, as text (empty when there is no file yet)."""
        if not self.path.exists() or not self.path.stat().st_size:
            return pl.DataFrame(schema=dict.fromkeys(self.header, pl.String))
        with self.path.open("rb") as handle:
            fcntl.flock(handle, fcntl.LOCK_SH)
            data = handle.read()
        return pl.read_csv(data, infer_schema=False)

    def latest(self) -> pl.DataFrame:
        """One row per (id, reviewer, question): its last non-empty answer."""
        lines = self.read().with_row_index("_line")
        keys = [q.key for q in self.questions if q.key in lines.columns]
        if not keys or lines.is_empty():
            return pl.DataFrame(schema={"id": pl.String, "_reviewer": pl.String,
                                        "question": pl.String, "answer": pl.String})  # fmt: skip
        long = lines.unpivot(keys, index=[self.id_column, "_reviewer", "_line"],
                             variable_name="question", value_name="answer")  # fmt: skip
        long = long.filter(pl.col("answer").is_not_null() & (pl.col("answer") != ""))
        return (
            long.sort("_line")
            .group_by(self.id_column, "_reviewer", "question", maintain_order=True)
            .agg(pl.col("answer").last())
            .rename({self.id_column: "id"})
        )

    def labelled_by(self, reviewer: str, key: str) -> set[str]:
        """The ids (as text) `reviewer` has labelled for question `key`."""
        done = self.latest().filter(
            (pl.col("_reviewer") == reviewer.strip()) & (pl.col("question") == key)
        )
        return set(done["id"].to_list())

    def summary(self) -> dict[str, Any]:
        """Per question: labels per reviewer and, for each pair of reviewers, how many ids both
        labelled and on how many they agree."""
        latest = self.latest()
        out = []
        for q in self.questions:
            mine = latest.filter(pl.col("question") == q.key)
            counts = mine.group_by("_reviewer").len().sort("_reviewer")
            pairs = []
            reviewers = counts["_reviewer"].to_list()
            for a, b in combinations(reviewers, 2):
                left = mine.filter(pl.col("_reviewer") == a).select("id", pl.col("answer"))
                right = mine.filter(pl.col("_reviewer") == b).select("id", pl.col("answer"))
                both = left.join(right, on="id", suffix="_b")
                same = int((both["answer"] == both["answer_b"]).sum())
                pairs.append({"a": a, "b": b, "both": both.height, "agree": same})
            out.append({
                "question": q.key,
                "labels": dict(zip(reviewers, counts["len"].to_list(), strict=True)),
                "pairs": pairs,
            })  # fmt: skip
        return {"file": str(self.path), "questions": out}


def _first_line(path: Path) -> str:
    with path.open(encoding="utf-8", newline="") as handle:
        return handle.readline()
