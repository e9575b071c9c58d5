"""What earlier runs left in an output directory, and the rows to cut out of it before a resume.

A run that resumes must not send again a row that has a final answer, must send again a row whose
error deserves another try (a retryable `_error_type`) or whose state changed since it was scored
(stale), and must never leave two copies of a row. `scan` reads, without changing anything, the keys
of every row on disk (id, `_state_hash`, retryable or not: Arrow columns, about 50 MB for a million
rows) and a killed run's journal; `reconcile` then replaces each part that holds rows to cut, once:
the rows it keeps go to a new part of the same sequence number, then the old part is deleted (a kill
in between leaves both; the next `scan` takes the smaller, see `evalpipe.output.outdir`). It also
says which of the journal's rows the sink must commit before it deletes the journal. The parts may
be local files or objects on a store (`evalpipe.stores.location`); the journal is always a local
file.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from evalpipe.errors import ResumeConflict, first_line
from evalpipe.output.journal import read_journal
from evalpipe.output.outdir import part_name, part_names, sequence, superseded
from evalpipe.output.table import ERROR_TYPE, STATE_HASH, retryable
from evalpipe.stores import Folder

_RETRY = "_retry"


@dataclass(frozen=True)
class ResumeState:
    """What a resume did, and the ids that have a final row now (not to be sent again)."""

    ids: pa.Array
    retry_rows: int  # rows with a retryable error, cut out of parts or the journal
    stale_rows: int  # rows whose state changed since they were scored, cut out likewise
    temp_files_removed: int
    journal_rows: int = 0  # rows recovered from a killed run's journal into a part
    journal_duplicates: int = 0  # journal rows already in a part (a kill mid-rotation)
    journal_torn_bytes: int = 0  # a torn last record, dropped

    @property
    def rows(self) -> int:
        return len(self.ids)


@dataclass
class Scan:
    """The keys of the rows on disk before a resume."""

    parts: list[tuple[str, int]]  # (name, rows), their keys at consecutive offsets of `keys`
    keys: pa.Table  # id, _state_hash, _retry: one row per row in a part
    journal: pa.Table | None  # a killed run's journal rows that are in no part (None: no journal)
    duplicates: int = 0  # journal rows that are in a part too
    torn: int = 0  # bytes of a torn last journal record
    superseded: list[str] = field(default_factory=list)  # parts a killed cut left: to delete

    def committed(self) -> pa.Table:
        """(id, `_state_hash`) of every final row: those in parts and in the journal, less the
        rows with a retryable error."""
        columns = self.keys.schema.names[:2]
        final = self.keys.filter(pc.invert(self.keys[_RETRY])).select(columns)
        if self.journal is None:
            return final
        journal = self.journal.filter(pc.invert(retryable(self.journal[ERROR_TYPE])))
        return pa.concat_tables([final, journal.select(columns).replace_schema_metadata()])


def scan(out: Folder, journal_path: Path, schema: pa.Schema, fingerprint: str) -> Scan:
    """Read the keys of `out`'s parts and of the journal at `journal_path`; ResumeConflict if
    one is not this job's. Parts superseded by a cut are left out (and listed)."""
    names = part_names(out)
    old = superseded(out, names)
    names = [name for name in names if name not in old]
    tables = [_part_keys(out, name, schema) for name in names]
    keys_schema = pa.schema(
        [schema.field(0), schema.field(STATE_HASH), pa.field(_RETRY, pa.bool_())]
    )
    keys = pa.concat_tables([keys_schema.empty_table(), *tables])
    found = Scan([(n, t.num_rows) for n, t in zip(names, tables, strict=True)], keys, None)
    found.superseded = old
    if journal_path.exists():
        journal, found.torn = read_journal(journal_path, schema, fingerprint)
        # A kill between a part's rename and the journal's reset leaves copies in both; a part
        # row cut to be retried counts too (the copy must not come back from the journal).
        in_parts = pc.is_in(journal.column(0), keys.column(0))
        found.duplicates = _count(in_parts)
        found.journal = journal.filter(pc.invert(in_parts))
    return found


def _part_keys(out: Folder, name: str, schema: pa.Schema) -> pa.Table:
    """One part's id, `_state_hash` and whether its row is to be retried."""
    shown = out.shown_name(name)
    try:
        with out.open_parquet(name) as part:
            if not part.schema_arrow.equals(schema, check_metadata=False):
                raise ResumeConflict(
                    f"output part '{shown}' has another schema than this job's; use --restart "
                    "to start over or choose another output.path"
                )
            table = part.read(columns=[schema.names[0], STATE_HASH, ERROR_TYPE])
    except (pa.ArrowException, OSError) as exc:
        raise ResumeConflict(
            f"output part '{shown}' cannot be read ({first_line(exc)}); use --restart to start over"
        ) from None
    return table.drop_columns([ERROR_TYPE]).append_column(_RETRY, retryable(table[ERROR_TYPE]))


@dataclass
class Reconciled:
    """The dir after `reconcile`, and what the sink still has to do with the journal."""

    parts: dict[str, int]  # the parts left -> their rows
    next_sequence: int  # the next part's sequence number
    journal: pa.Table | None  # rows to commit as parts, then delete the journal (None: none)
    state: ResumeState


def reconcile(
    found: Scan, stale: pa.Array, out: Folder, schema: pa.Schema, removed: int
) -> Reconciled:
    """Delete superseded parts; cut the retryable rows and those with an id in `stale` out of
    the parts (each part replaced at most once) and out of the journal's rows."""
    for name in found.superseded:
        out.delete(name)
    retry = found.keys[_RETRY]
    is_stale = pc.and_(pc.is_in(found.keys.column(0), stale), pc.invert(retry))
    cut = pc.or_(retry, is_stale)
    parts: dict[str, int] = {}
    offset = next_sequence = 0
    for name, rows in found.parts:
        kept, now = _cut_part(out, name, schema, pc.invert(cut.slice(offset, rows)))
        if kept:
            parts[now] = kept
        next_sequence = max(next_sequence, sequence(name) + 1)
        offset += rows
    ids = [found.keys.column(0).filter(pc.invert(cut))]
    retry_rows, stale_rows = _count(retry), _count(is_stale)
    journal = found.journal
    if journal is not None:
        retry = retryable(journal[ERROR_TYPE])
        is_stale = pc.and_(pc.is_in(journal.column(0), stale), pc.invert(retry))
        journal = journal.filter(pc.invert(pc.or_(retry, is_stale)))
        ids.append(journal.column(0))
        retry_rows, stale_rows = retry_rows + _count(retry), stale_rows + _count(is_stale)
    chunks = [chunk for column in ids for chunk in column.chunks]
    state = ResumeState(
        pa.chunked_array(chunks, schema.field(0).type).combine_chunks(), retry_rows, stale_rows,
        removed, 0 if journal is None else journal.num_rows, found.duplicates, found.torn,
    )  # fmt: skip
    return Reconciled(parts, next_sequence, journal, state)


def _cut_part(out: Folder, name: str, schema: pa.Schema, keep: pa.ChunkedArray) -> tuple[int, str]:
    """Replace part `name` by its kept rows: a new part of the same sequence number, then the
    old one deleted (see the module docstring). Returns the rows kept and the part's name."""
    kept = _count(keep)
    if kept == 0:
        out.delete(name)
    elif kept < len(keep):
        table = out.read_table(name, schema=schema).filter(keep)
        cut = part_name(sequence(name), uuid.uuid4().hex)
        out.write_parquet(cut, table.replace_schema_metadata(schema.metadata))
        out.delete(name)
        return kept, cut
    return kept, name


def _count(mask: pa.ChunkedArray | pa.Array) -> int:
    return int(pc.sum(mask).as_py() or 0)
