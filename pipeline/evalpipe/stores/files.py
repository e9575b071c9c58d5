"""Atomic file commits: a file on disk is either whole or absent, after kill -9 or a crash.

The output directory must never show a half-written part or manifest to a reader or to the
next run, so every file the sink commits goes through `atomic_write`: written to a hidden
temporary name, fsynced, renamed into place with `os.replace` (the rename is the commit), then
the directory is fsynced so the rename itself survives a crash of the machine. The temporary
names follow one pattern (`temp_pattern`) so a resume can recognise and delete the leftovers of
a kill without touching anybody else's files.
"""

from __future__ import annotations

import errno
import os
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

COMPRESSION = "zstd"
FULL = frozenset({errno.ENOSPC, errno.EDQUOT})  # not EFBIG: freeing space would not help


def is_full(exc: OSError) -> bool:
    """Whether `exc` says the file system (or the user's quota on it) is full."""
    return exc.errno in FULL


def temp_pattern(names: str) -> re.Pattern[str]:
    """What `atomic_write` leaves behind when killed mid-write, for targets matching `names`
    (a regular expression without anchors)."""
    return re.compile(rf"^\.({names})\.[0-9a-f]{{32}}\.tmp$")


def fsync(path: Path) -> None:
    """Make a file's content, or a directory's renames and deletions, durable (a crash of the
    machine, not just of this process)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write `path` through a hidden temporary file, fsync it, and rename it into place. The
    temporary file is made new (`O_EXCL`, never through a link: the folder may be shared) and
    handed to `write` open; the rename replaces whatever `path` was, a link included, without
    following it."""
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        with os.fdopen(os.open(temp, flags, 0o666), "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync(path.parent)


def write_bytes(path: Path, data: bytes) -> None:
    """`data` as the whole content of `path`, atomically."""
    atomic_write(path, lambda file: file.write(data))


def write_parquet(path: Path, table: pa.Table) -> None:
    """`table` as one Parquet file at `path`, atomically."""
    atomic_write(path, lambda file: pq.write_table(table, file, compression=COMPRESSION))
