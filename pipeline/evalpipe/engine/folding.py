"""A job's result as output rows: the row that was sent and each row that takes its answer.

The dispatcher (`evalpipe.engine.dispatch`) folds every result it gets back into `RowResult`s for
the sink with these two functions: one place that says which figures of a result go into a row.
"""

from __future__ import annotations

from evalpipe.input import Row
from evalpipe.output import RowResult
from evalpipe.send import JobResult


def position(result: RowResult) -> int:
    """A row's place in the corpus, for sorting rows finished together (-1: unknown)."""
    return -1 if result.position is None else result.position


def result_row(
    row: Row,
    result: JobResult,
    tokens: int,
    state_hash: bytes,
    scored_at: float,
    reused: bool = False,
    cached: int = 0,
) -> RowResult:
    """Input `row`'s output row from `result`: `tokens` billed for it (0 for a row that reuses
    an identical state's answer), `cached` answers the cache gave."""
    r = result
    return RowResult(
        row.id, r.answers, r.model, tokens, r.error_type, r.error, scored_at, state_hash,
        cached=cached, reused=reused, position=row.position, pack=r.pack,
    )  # fmt: skip
