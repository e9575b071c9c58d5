"""A full disk under the output: the one write failure its user mends by freeing space.

Any other failed write is an `OutputError` (exit 1). A full file system (ENOSPC, a quota) gets
an error of its own, `OutputFull` (exit 5), so a scheduler can tell it apart, and its one line
says what the user needs to act: which directory is full, how much is free there, and about how
much the rest of the run needs. The estimate is the rows still to write at the size they take in
the journal (Arrow IPC, uncompressed: more than in a Parquet part), plus the journal's last
part's worth, which is on disk twice while it becomes a part. Whatever was journaled stays valid
(the journal cuts a torn record back), so once the space is freed the same command resumes.

The contexts `opening` and `writing` are where the output's failed reads and writes become
these one-line errors, for the sink and its committers alike.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from evalpipe.errors import ConfigError, OutputError, OutputFull, first_line
from evalpipe.stores import Folder, is_full

MIN_NEEDED = 1 << 20  # never ask for less than this: parts, the manifest and the lock need some


def free_bytes(path: Path) -> int | None:
    """Bytes free to us on the file system of `path` (or its nearest existing parent)."""
    for place in (path, *path.parents):
        try:
            stats = os.statvfs(place)
        except OSError:
            continue
        return stats.f_bavail * stats.f_frsize
    return None


def size(n: float) -> str:
    """`n` bytes for a person: 1.2 MB, 350 kB, 12 B (powers of 1000, as `df -H` shows)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


@dataclass
class RowSizes:
    """What the output still has to write, as the sink counts it: rows and their size."""

    row_bytes: float = 0.0  # the mean size of a row in the journal
    rows_seen: int = 0
    expected: int | None = None  # rows this run will hand over in all, when known
    handed: int = 0  # rows handed over so far

    def saw(self, rows: int, nbytes: int) -> None:
        """A batch of `rows` rows taking `nbytes` went to the journal (or tried to)."""
        total = self.row_bytes * self.rows_seen + nbytes
        self.rows_seen += rows
        self.row_bytes = total / self.rows_seen if self.rows_seen else 0.0

    def needed(self, unwritten: int, part_rows: int) -> int:
        """Bytes the rest of the run needs: `unwritten` rows handed over but not in a part,
        the rows still to come, and a part's worth on disk twice while it is made."""
        to_come = max(0, (self.expected or 0) - self.handed)
        rows = unwritten + to_come
        return max(MIN_NEEDED, int(self.row_bytes * (rows + min(rows, part_rows))))


def full_error(shown: str, where: Path, exc: OSError, needed: int) -> OutputFull:
    """The one line for a full disk under output `shown`, the write having failed in `where`."""
    free = free_bytes(where)
    has = "" if free is None else f", {size(free)} free"
    return OutputFull(
        f"output.path '{shown}': the disk is full at {where} ({first_line(exc)}{has}); the "
        f"rest of the run needs about {size(needed)} more there: free it and run the same "
        "command to resume (the rows finished so far are kept)"
    )


@contextmanager
def opening(out: Folder, journal: Path) -> Iterator[None]:
    """An output that cannot be read when a run opens it (no access, no such bucket): one
    ConfigError, before any request is sent; a full disk is an OutputFull."""
    try:
        yield
    except OSError as exc:
        if is_full(exc):
            raise _full(out, journal, exc, None) from None
        raise ConfigError(f"output.path '{out.shown}' cannot be read: {first_line(exc)}") from None


@contextmanager
def writing(out: Folder, journal: Path, needed: Callable[[], int] | None = None) -> Iterator[None]:
    """A failed write (permissions, a store that went away) is one OutputError, a full disk
    an OutputFull that says where and how much space the rest needs (`needed`); the rows
    already journaled or committed stay valid for a resume."""
    try:
        yield
    except OSError as exc:
        if is_full(exc):
            raise _full(out, journal, exc, needed) from None
        raise cannot_write(out, exc) from None


def cannot_write(out: Folder, exc: OSError) -> OutputError:
    return OutputError(
        f"output.path '{out.shown}': cannot write ({first_line(exc)}); rows committed so "
        "far are kept: fix it and run the same command to resume"
    )


def _full(out: Folder, journal: Path, exc: OSError, needed: Callable[[], int] | None) -> OutputFull:
    # The local file systems we write: the journal's (the output's own, when it is local).
    where = Path(exc.filename).parent if isinstance(exc.filename, str) else journal.parent
    return full_error(out.shown, where, exc, needed() if needed else 0)
