"""Outputs for the browser's tests, written by the real sink (`evalpipe.output.Sink`): two runs
of one corpus (B revises some answers and scores other ids at the edges), and the corpus, whose
states include HTML and a script (untrusted input, as states are) and JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from evalpipe.output import RowResult, Sink, output_schema

OPTIONS = ["positive", "negative", "mixed"]
LEVELS = ["poor", "fair", "good", "great"]
QUESTIONS: dict[str, dict[str, Any]] = {
    "helpful": {"type": "noul", "instructions": "Does the review help a shopper decide?"},
    "sentiment": {"type": "choice", "instructions": "Overall sentiment?",
                  "criteria": dict.fromkeys(OPTIONS)},
    "quality": {"type": "score", "instructions": "How well written?", "criteria": LEVELS},
}  # fmt: skip
ROWS = 600
ERRORS = {3: "context_limit", 17: "server_error", 41: "context_limit"}
HOSTILE = 7  # this id's state is HTML with a script
HOSTILE_STATE = (
    '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
    "<b>bold?</b> & the review"
)
JSON_ID = 8  # this id's state is a JSON object on one line
JSON_STATE = '{"title": "Kettle", "stars": 4, "tags": ["kitchen", "steel"]}'


def state(i: int) -> str:
    if i == HOSTILE:
        return HOSTILE_STATE
    if i == JSON_ID:
        return JSON_STATE
    return f"Review {i}: the kettle {'broke after a week' if i % 3 else 'works well'}. " * 3


def _answers(rng: np.random.Generator) -> dict[str, Any]:
    s, q = rng.dirichlet([1, 1, 1]), rng.dirichlet([1, 1, 1, 1])
    return {
        "helpful": {"noul": float(rng.uniform())},
        "sentiment": {"choice": OPTIONS[int(np.argmax(s))], "confidence": float(s.max()),
                      "probabilities": dict(zip(OPTIONS, map(float, s), strict=True))},
        "quality": {"score": float(np.dot(range(4), q)), "confidence": float(q.max()),
                    "probabilities": {str(k): float(v) for k, v in enumerate(q)}},
    }  # fmt: skip


def write_run(
    path: Path, ids: range, seed: int, model: str, revise: float = 0.0, **sink: Any
) -> None:
    """An output of `ids`; with `revise`, that share of rows answered anew (seeded), the rest
    as seed 1 answered them; `sink`: the Sink's settings (`format="delta"`)."""
    base, fresh = np.random.default_rng(1), np.random.default_rng(seed)
    rows = []
    for i in range(max(ids) + 1):
        answers = _answers(base)
        changed = fresh.uniform() < revise
        if changed:
            answers = _answers(fresh)
        if i not in ids:
            continue
        if i in ERRORS:
            rows.append(RowResult(i, None, None, 0, ERRORS[i], "the service said no", position=i))
        else:
            rows.append(RowResult(i, answers, model, 120 + i, position=i, scored_at=1.8e9 + i))
    schema = output_schema("doc_id", pa.int64(), QUESTIONS)
    settings = {"write_seconds": 0, "part_rows": 200, **sink}
    opened = Sink.open(path, schema, "fp", run_id=f"run-{seed}", **settings)
    opened.resume(None)
    opened.append(rows)
    opened.close()
    opened.finish({}, "finished")


def write_all(tmp: Path) -> dict[str, Path]:
    """Run A (ids 0..599), run B (ids 2..601, a fifth of the rows answered anew), the corpus."""
    write_run(tmp / "a", range(ROWS), 1, "model-1.13.0")
    write_run(tmp / "b", range(2, ROWS + 2), 2, "model-1.14.0", revise=0.2)
    corpus = tmp / "corpus.parquet"
    ids = list(range(ROWS + 2))
    pq.write_table(pa.table({"doc_id": ids, "text": [state(i) for i in ids]}), corpus)
    return {"a": tmp / "a", "b": tmp / "b", "corpus": corpus}
