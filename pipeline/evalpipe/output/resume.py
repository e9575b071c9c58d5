"""What earlier runs left in an output, and what a resume keeps, cuts and recovers, whatever its
format.

A run that resumes must not send again a row that has a final answer, must send again a row whose
error deserves another try (a retryable `_error_type`) or whose state changed since it was scored
(stale), and must never leave two copies of a row. `scan` reads, without changing anything, the
keys of every committed row (id, `_state_hash`, `_error_type`: Arrow columns, about 50 MB for a
million rows) from the sink's committer (`evalpipe.output.committer`), and a killed run's journal
less the rows the committer holds already. `Found.cut` then says which committed rows to cut,
which journal rows to recover, and which ids have a final row; the sink has its committer carry
it out, each step safe to repeat if a kill interrupts it. The journal is always a local file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from evalpipe.output.committer import Committer
from evalpipe.output.journal import read_header, read_journal
from evalpipe.output.table import ERROR_TYPE, STATE_HASH, retryable


@dataclass(frozen=True)
class ResumeState:
    """What a resume did, and the ids that have a final row now (not to be sent again)."""

    ids: pa.Array
    retry_rows: int  # rows with a retryable error, cut out of parts or the journal
    stale_rows: int  # rows whose state changed since they were scored, cut out likewise
    temp_files_removed: int
    journal_rows: int = 0  # rows recovered from a killed run's journal
    journal_duplicates: int = 0  # journal rows committed already (a kill mid-rotation)
    journal_torn_bytes: int = 0  # a torn last record, dropped

    @property
    def rows(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class Cut:
    """What a resume does: the committed rows to cut (`drop`, a mask over `Found.keys`), the
    journal rows to recover (None: no journal to recover), the ids with a final row after it."""

    drop: pa.ChunkedArray | pa.Array
    recover: pa.Table | None
    ids: pa.Array
    retry_rows: int
    stale_rows: int


@dataclass(frozen=True)
class Found:
    """The rows an output holds before a resume."""

    keys: pa.Table  # id, _state_hash, _error_type of every committed row
    unsent: pa.Table | None  # a killed run's journal rows not committed (None: none to recover)
    journal: bool = False  # a journal was there
    duplicates: int = 0  # journal rows committed already
    torn: int = 0  # bytes of a torn last journal record

    def committed(self, schema: pa.Schema) -> pa.Table:
        """(id, `_state_hash`) of every final row: committed or in the journal, less the rows
        with a retryable error. `schema`: the output's."""
        names = key_columns(schema)
        plain = pa.schema([schema.field(n).remove_metadata() for n in names])
        found = [self.keys] if self.unsent is None else [self.keys, self.unsent]
        rows = pa.concat_tables(
            [plain.empty_table(), *[t.select(names).cast(plain) for t in found]]
        )
        return rows.filter(pc.invert(retryable(rows[ERROR_TYPE]))).select(names[:2])

    def cut(self, stale: pa.Array) -> Cut:
        """Cut the rows with a retryable error and those whose id is in `stale`, committed or
        in the journal; keep the rest. An id committed twice (two hosts wrote one output, one
        of them after its lease lapsed) counts as stale: every copy goes, and it is sent once
        more, so the resume leaves it once whatever the format cuts by."""
        stale = pa.concat_arrays([stale, twice(self.keys.column(0)).cast(stale.type)])
        drop, retry_rows, stale_rows = _judged(self.keys, stale)
        id_type = stale.type
        ids = [self.keys.column(0).filter(pc.invert(drop)).cast(id_type)]
        recover = None
        if self.unsent is not None:
            lost, more_retry, more_stale = _judged(self.unsent, stale)
            recover = self.unsent.filter(pc.invert(lost))
            ids.append(recover.column(0).cast(id_type))
            retry_rows, stale_rows = retry_rows + more_retry, stale_rows + more_stale
        chunks = [chunk for column in ids for chunk in column.chunks]
        kept = pa.chunked_array(chunks, id_type).combine_chunks()
        return Cut(drop, recover, kept, retry_rows, stale_rows)


def key_columns(schema: pa.Schema) -> list[str]:
    """The columns a resume reads of every committed row."""
    return [schema.names[0], STATE_HASH, ERROR_TYPE]


def scan(committer: Committer, journal: Path, schema: pa.Schema, fingerprint: str) -> Found:
    """The keys of the committed rows and the journal at `journal`, if any; ResumeConflict if
    one is not this job's."""
    if not journal.exists():
        return Found(committer.keys(key_columns(schema)), None)
    rows, torn = read_journal(journal, schema, fingerprint)
    unsent, duplicates = committer.unsent(read_header(journal, schema, fingerprint), rows)
    return Found(committer.keys(key_columns(schema)), unsent, True, duplicates, torn)


def twice(ids: pa.ChunkedArray | pa.Array) -> pa.Array:
    """The ids that occur more than once in `ids`."""
    counts = pc.value_counts(ids)
    found = counts.filter(pc.greater(counts.field("counts"), 1)).field("values")
    return found if isinstance(found, pa.Array) else found.combine_chunks()


def _judged(rows: pa.Table, stale: pa.Array) -> tuple[pa.ChunkedArray | pa.Array, int, int]:
    """Which of `rows` to cut, how many for a retryable error, how many for a stale state."""
    retry = retryable(rows[ERROR_TYPE])
    is_stale = pc.and_(pc.is_in(rows.column(0), stale), pc.invert(retry))
    return pc.or_(retry, is_stale), count(retry), count(is_stale)


def count(mask: pa.ChunkedArray | pa.Array) -> int:
    """How many of `mask` are true."""
    return int(pc.sum(mask).as_py() or 0)
