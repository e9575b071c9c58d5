"""What the browser is open on, and the answers to the page's questions, as plain data.

`Browsed` holds the output (`evalpipe.reading`), its rows (`views`), the corpus if given (the
states), the comparison with another run (`compare`) and the labels file (`labels`). Each
method takes the query of one request (text, as the page's address holds it) and returns a JSON
document; a bad value is an `InputError` naming it, which the page shows.
"""

from __future__ import annotations

import getpass
import threading
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from evalpipe.analysis import draw_label_sample
from evalpipe.browser.compare import Comparison
from evalpipe.browser.labels import LabelsFile
from evalpipe.browser.views import OPS, STATE, Rows, Spec
from evalpipe.errors import InputError
from evalpipe.output import describe
from evalpipe.reading import Output, Question, open_output
from evalpipe.report import open_corpus

PAGE_MAX = 1000  # rows a page may ask for
LINEAGE = ("_error_type", "_model", "_run_id")  # shown by default beside the answers
QUEUE_MAX = 10_000


class Browsed:
    """An output opened for the browser, with what `evalpipe browse` was given."""

    def __init__(
        self, output: str, *, vs: str | None = None, labels: str | Path | None = None,
        corpus: str | None = None, reviewer: str | None = None,
    ) -> None:  # fmt: skip
        self.output: Output = open_output(output)
        scan = open_corpus(corpus, self.output) if corpus is not None else None
        self.rows = Rows(self.output, scan)
        self.vs = Comparison(self.output, open_output(vs)) if vs is not None else None
        questions = self.output.questions
        self.labels = LabelsFile(Path(labels), self.output.id_column, questions) if labels else None
        self.reviewer = reviewer or _user()
        self.shown = [self.output.id_column, *(q.head for q in questions)]
        self.shown += [c for c in LINEAGE if self.output.has(c)]

    def warm(self) -> threading.Thread:
        """Read the columns shown by default in the background (the first page does not wait
        for them)."""
        thread = threading.Thread(
            target=self.rows.warm, args=(self.shown,), name="evalpipe-browse-warm", daemon=True
        )
        thread.start()
        return thread

    # ------------------------------------------------------------------ the page's questions

    def meta(self) -> dict[str, Any]:
        described = {c["column"]: c for c in describe(self.output.schema)}
        columns = [
            {"name": name, "type": str(dtype), "description": described.get(name, {}).get(
                "description"), "label": described.get(name, {}).get("label")}
            for name, dtype in self.rows.schema.items()
        ]  # fmt: skip
        return {
            "output": self.output.shown,
            "id_column": self.output.id_column,
            "total": self.rows.total,
            "columns": columns,
            "shown": self.shown,
            "questions": [self._question(q) for q in self.output.questions],
            "ops": list(OPS),
            "state": STATE if self.rows.corpus is not None else None,
            "vs": self.vs.b.shown if self.vs is not None else None,
            "labels": str(self.labels.path) if self.labels is not None else None,
            "reviewer": self.reviewer,
            "notes": list(self.output.notes),
        }

    def _question(self, q: Question) -> dict[str, Any]:
        own = set(q.columns)
        extra = [c for c in self.rows.columns if c.startswith(f"{q.key}__") and c not in own]
        return {
            "key": q.key, "kind": q.kind, "head": q.head,
            "confidence": q.confidence if q.kind != "noul" else None,
            "probs": [{"column": q.prob(p), "label": q.label(p)} for p in q.probs],
            "extra": extra,
            "answers": self.labels.answers(q) if self.labels is not None else _answers(q),
        }  # fmt: skip

    def page(self, query: dict[str, str]) -> dict[str, Any]:
        spec = _spec(query)
        columns = _json_list(query, "columns") or self.shown
        offset, limit = _int(query, "offset", 0), min(_int(query, "limit", 100), PAGE_MAX)
        page = self.rows.page(spec, offset, limit, [str(c) for c in columns])
        return {
            "count": page.count, "offset": page.offset, "positions": page.positions,
            "columns": page.columns, "rows": page.rows,
        }  # fmt: skip

    def row(self, query: dict[str, str]) -> dict[str, Any]:
        position = self.rows.position(query["id"]) if "id" in query else _int(query, "pos", 0)
        values = self.rows.row(position)
        state = self.rows.state(values[self.output.id_column])
        return {
            "position": position,
            "values": [[k, v] for k, v in values.items()],
            "state": None if state is None else [[k, v] for k, v in state.items()],
        }

    def comparison(self, query: dict[str, str]) -> dict[str, Any]:
        if self.vs is None:
            raise InputError("no comparison: start the browser with --vs OTHER")
        offset, limit = _int(query, "offset", 0), min(_int(query, "limit", 100), PAGE_MAX)
        return {"counts": self.vs.counts(), "changed": self.vs.changed(offset, limit)}

    def queue(self, query: dict[str, str]) -> dict[str, Any]:
        """Rows to label for a question, drawn by a design, less those the reviewer did."""
        labels = self._labels()
        question = self._question_named(query.get("question", ""))
        design = query.get("design", "uniform")
        n = min(_int(query, "n", 100), QUEUE_MAX)
        seed = _int(query, "seed", 0) if query.get("seed") else None
        reviewer = query.get("reviewer") or self.reviewer
        idc = self.output.id_column
        drawn = draw_label_sample(
            self.rows.scan, id_column=idc, question=question, n=n, design=design, seed=seed
        )
        done = labels.labelled_by(reviewer, question.key)
        drawn = drawn.filter(~pl.col(idc).cast(pl.String).is_in(list(done)))
        return {
            "question": question.key, "design": design, "reviewer": reviewer,
            "drawn": n, "done": len(done),
            "rows": [
                {"id": r[idc], "design": r["_design"], "inclusion_prob": r["_inclusion_prob"]}
                for r in drawn.iter_rows(named=True)
            ],
        }  # fmt: skip

    def label(self, body: dict[str, Any]) -> dict[str, Any]:
        labels = self._labels()
        question = self._question_named(str(body.get("question", "")))
        row_id = body.get("id")
        self.rows.position(row_id)  # the id is one of the output's: InputError if not
        prob = body.get("inclusion_prob")
        written = labels.append(
            row_id, question.key, str(body.get("answer", "")),
            str(body.get("reviewer") or self.reviewer), str(body.get("design") or "browse"),
            None if prob is None else float(prob),
        )  # fmt: skip
        return {"written": written}

    def labels_summary(self) -> dict[str, Any]:
        return self._labels().summary()

    def _labels(self) -> LabelsFile:
        if self.labels is None:
            raise InputError("no labels file: start the browser with --labels FILE")
        return self.labels

    def _question_named(self, key: str) -> Question:
        question = self.output.question(key)
        if question is None:
            keys = ", ".join(q.key for q in self.output.questions)
            raise InputError(f"no question '{key}' in the output ({keys})")
        return question


def _answers(q: Question) -> list[str]:
    return ["yes", "no"] if q.kind == "noul" else [q.label(p) for p in q.probs]


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "reviewer"


def _int(query: dict[str, str], name: str, default: int) -> int:
    try:
        return int(query.get(name, default))
    except ValueError:
        raise InputError(f"'{name}' must be a whole number, not {query[name]!r}") from None


def _json_list(query: dict[str, str], name: str) -> list[Any]:
    if not query.get(name):
        return []
    try:
        value = orjson.loads(query[name])
    except orjson.JSONDecodeError:
        raise InputError(f"'{name}' is not JSON: {query[name][:80]!r}") from None
    if not isinstance(value, list):
        raise InputError(f"'{name}' must be a JSON list")
    return value


def _spec(query: dict[str, str]) -> Spec:
    """A view from the address: `sort` (a column, `-column` descending) and `filters`
    (a JSON list of [column, op, value])."""
    filters = []
    for item in _json_list(query, "filters"):
        if not isinstance(item, list) or len(item) not in (2, 3):
            raise InputError(f"a filter is [column, op, value], not {item!r}")
        column, op, value = ([*item, None])[:3]
        filters.append((str(column), str(op), value))
    sort = query.get("sort") or None
    descending = bool(sort and sort.startswith("-"))
    return Spec(tuple(filters), sort.lstrip("-") if sort else None, descending)
