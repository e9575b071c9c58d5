"""The journal: an append-only file of finished rows that survives kill -9, and its reader.

A Parquet part per few rows would litter a night's run with tiny files, while a part per
5,000 rows would lose (and pay again for) up to 5,000 rows on a kill. So the sink first writes
finished rows here, a framed record per batch with one `write(2)`: a record written is in the
page cache and survives kill -9 of the process; `JournalWriter.sync` (one fdatasync for every
record since the last: group commit) makes them survive a crash of the machine too. The sink
turns the journal's rows into a part now and then and starts the journal over.

Framing: `JOURNAL_MAGIC` (8 bytes), then frames. A frame is `<u32 length><u32 crc32>`
(little-endian) and `length` bytes of payload. The first frame is the header, JSON (format,
fingerprint, schema); each later one is one Arrow IPC record-batch message of the output schema
(`RecordBatch.serialize`). Payload lengths are multiples of 8, so payloads stay aligned. The
header is written atomically, so a journal on disk always has a whole one; only the last record
can be torn (by a kill) or zero-filled (by a crash), and its length or CRC tells:
`read_journal` returns the valid prefix.
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from evalpipe.errors import ResumeConflict
from evalpipe.output.table import schema_json
from evalpipe.stores import open_private, write_bytes

JOURNAL_MAGIC = b"EVPJRNL1"  # format 1: the framing this module's docstring describes
_FRAME = struct.Struct("<II")  # payload length, CRC-32 of the payload


def _frame(payload: Any) -> list[Any]:
    return [_FRAME.pack(len(payload), zlib.crc32(payload)), payload]


def _header(schema: pa.Schema, fingerprint: str, extra: dict[str, Any] | None = None) -> bytes:
    meta = {"format": 1, "fingerprint": fingerprint, "schema": schema_json(schema), **(extra or {})}
    data = orjson.dumps(meta)
    data += b" " * (-len(data) % 8)  # keeps every record's payload 8-byte aligned
    return b"".join([JOURNAL_MAGIC, *_frame(data)])


class JournalWriter:
    """The journal, open for appending: rows finished but not yet in a part."""

    def __init__(self, path: Path, fd: int, header_bytes: int) -> None:
        self.path = path
        self._fd: int | None = fd
        self._header_bytes = self._size = header_bytes
        self._unsynced = False

    @classmethod
    def create(
        cls, path: Path, schema: pa.Schema, fingerprint: str, extra: dict[str, Any] | None = None
    ) -> JournalWriter:
        """A new journal at `path` (replacing any, atomically), holding only its header;
        `extra`: more header keys (the committer's: a Delta batch's `sequence`, `lake.commit`)."""
        header = _header(schema, fingerprint, extra)
        write_bytes(path, header)
        fd = open_private(path, os.O_WRONLY | os.O_APPEND)  # the name is in a shared folder
        return cls(path, fd, len(header))

    def append(self, table: pa.Table) -> None:
        """One record per batch, all in one write; on kill -9 they are in the page cache."""
        assert self._fd is not None, "the journal is closed"
        chunks = [part for batch in table.to_batches() for part in _frame(batch.serialize())]
        data = b"".join(chunks)
        written = 0
        try:
            while written < len(data):
                written += os.write(self._fd, memoryview(data)[written:])
        except BaseException:
            # A short write (disk full) would leave a torn record that hides every later one.
            os.ftruncate(self._fd, self._size)
            raise
        self._size += len(data)
        self._unsynced = True

    def sync(self) -> None:
        """Group commit: one fdatasync makes every record since the last one crash-proof."""
        if self._fd is not None and self._unsynced:
            os.fdatasync(self._fd)
            self._unsynced = False

    def reset(self) -> None:
        """Back to the header only: its rows are in a part now."""
        assert self._fd is not None, "the journal is closed"
        os.ftruncate(self._fd, self._header_bytes)
        os.fdatasync(self._fd)
        self._size, self._unsynced = self._header_bytes, False

    def close(self) -> None:
        """Sync and close (idempotent)."""
        if self._fd is not None:
            self.sync()
            os.close(self._fd)
            self._fd = None


def _next_frame(data: bytes, offset: int) -> tuple[memoryview, int] | None:
    """The frame at `offset` and the offset after it; None at the end or at a torn frame."""
    if offset + _FRAME.size > len(data):
        return None
    length, crc = _FRAME.unpack_from(data, offset)
    start = offset + _FRAME.size
    end = start + length
    if length == 0 or end > len(data):  # zeros (a crash's hole) or cut short (a kill)
        return None
    payload = memoryview(data)[start:end]
    if zlib.crc32(payload) != crc:
        return None
    return payload, end


def _check_header(data: bytes, path: Path, schema: pa.Schema, fingerprint: str) -> int:
    """The offset of the first record; ResumeConflict if `data` is not this job's journal."""
    header = _next_frame(data, len(JOURNAL_MAGIC)) if data.startswith(JOURNAL_MAGIC) else None
    if header is None:
        raise ResumeConflict(
            f"output dir '{path.parent}' has an unreadable {path.name}; use --restart to start "
            f"over, or delete {path.name} to give up the rows it holds"
        )
    meta = orjson.loads(bytes(header[0]))
    if meta.get("fingerprint") != fingerprint or meta.get("schema") != schema_json(schema):
        raise ResumeConflict(
            f"output dir '{path.parent}' has a {path.name} written by a job with a different "
            "config; use --restart to start over or choose another output.path"
        )
    return header[1]


def read_header(path: Path, schema: pa.Schema, fingerprint: str) -> dict[str, Any]:
    """The journal's header (with the keys `create` was given as `extra`); ResumeConflict if
    it belongs to another job or is not one."""
    data = path.read_bytes()
    _check_header(data, path, schema, fingerprint)
    header = _next_frame(data, len(JOURNAL_MAGIC))
    assert header is not None
    meta: dict[str, Any] = orjson.loads(bytes(header[0]))
    return meta


def read_journal(path: Path, schema: pa.Schema, fingerprint: str) -> tuple[pa.Table, int]:
    """The journal's valid prefix as a table of `schema`, and how many bytes after it were
    dropped (a torn last record). ResumeConflict if it belongs to another job or is not one."""
    data = path.read_bytes()
    offset = _check_header(data, path, schema, fingerprint)
    batches = []
    while (frame := _next_frame(data, offset)) is not None:
        payload, offset = frame
        try:
            batches.append(pa.ipc.read_record_batch(pa.py_buffer(payload), schema))
        except (pa.ArrowException, EOFError) as exc:  # its CRC matched: not a torn write
            raise ResumeConflict(
                f"output dir '{path.parent}' has a damaged {path.name} ({exc}); use --restart "
                f"to start over, or delete {path.name} to give up the rows it holds"
            ) from None
    return pa.Table.from_batches(batches, schema), len(data) - offset
