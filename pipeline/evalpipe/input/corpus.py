"""A corpus's files: a Parquet file, a folder of them (and its Hive partition folders), or a
prefix of file names, on a local disk or an object store; and opening one to stream it.

Every failure is an `InputError` that names the path or the file, so a bad corpus is refused
with one line before anything is sent.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from evalpipe.errors import EvalpipeError, InputError, first_line
from evalpipe.stores import (
    FIRST_DELAY,
    MAX_DELAY,
    PATIENCE_SECONDS,
    Location,
    parse_location,
    patiently,
    resolve,
    shown,
)

PARQUET_SUFFIXES = (".parquet", ".parq", ".pq")
HIDDEN_PREFIXES = ("_", ".")  # Spark's _SUCCESS, .crc files, our own temporary files
_READ_BUFFER = 1 << 20  # read pages through a 1 MiB buffer, not whole row groups
_HIVE = re.compile(r"^[^=/]+=[^/]*$")  # a Hive partition folder: `key=value`


@dataclass(frozen=True)
class CorpusFile:
    """One corpus file: its path in the filesystem, and as messages show it."""

    path: str
    shown: str


def _hidden(name: str) -> bool:
    return name.startswith(HIDDEN_PREFIXES)


def _walk(fs: Any, root: str, shown_root: str) -> list[CorpusFile]:
    """The Parquet files in a folder and in its Hive partition folders (`key=value/`), sorted
    by their path below it; other subfolders are not read."""
    found: list[CorpusFile] = []
    folders = [("", root)]
    while folders:
        relative, folder = folders.pop()
        for info in fs.get_file_info(pafs.FileSelector(folder)):
            name = info.base_name
            inner = f"{relative}/{name}" if relative else name
            if _hidden(name):
                continue
            if info.type == pafs.FileType.Directory and _HIVE.match(name):
                folders.append((inner, info.path))
            elif info.type == pafs.FileType.File and name.lower().endswith(PARQUET_SUFFIXES):
                found.append(CorpusFile(info.path, shown(shown_root, inner)))
    return sorted(found, key=lambda f: f.shown)


def _prefixed(fs: Any, root: str, shown_root: str) -> list[CorpusFile]:
    """The Parquet files whose name starts with the last part of `root` (`.../part-`)."""
    parent, _, prefix = root.rstrip("/").rpartition("/")
    if not prefix or not parent:
        return []
    shown_parent = shown_root.rstrip("/").rpartition("/")[0]
    infos = fs.get_file_info(pafs.FileSelector(parent, allow_not_found=True))
    return sorted(
        (
            CorpusFile(i.path, shown(shown_parent, i.base_name))
            for i in infos
            if i.type == pafs.FileType.File
            and i.base_name.startswith(prefix)
            and i.base_name.lower().endswith(PARQUET_SUFFIXES)
        ),
        key=lambda f: f.shown,
    )


def parquet_files(fs: Any, root: str, location: Location) -> list[CorpusFile]:
    """The files to read, in sorted order; a named file is taken whatever its suffix."""
    where = shown(location)
    try:
        kind = fs.get_file_info(root).type
        if kind == pafs.FileType.File:
            return [CorpusFile(root, where)]
        files = _walk(fs, root, where) if kind == pafs.FileType.Directory else []
        if kind == pafs.FileType.NotFound:
            files = _prefixed(fs, root, where)
            if not files:
                raise InputError(f"input path '{where}' does not exist")
    except OSError as exc:
        raise InputError(f"input path '{where}' cannot be read: {first_line(exc)}") from None
    if not files:
        raise InputError(
            f"input directory '{where}' holds no Parquet files (*.parquet; names starting with "
            "'_' or '.' are ignored, and of subfolders only Hive partitions such as dt=.../)"
        )
    return files


def corpus_files(path: str) -> list[str]:
    """The Parquet files of a local corpus, found as a job finds them (a file, a folder with its
    Hive partitions, or a prefix of names); InputError naming `path` otherwise."""
    return corpus_paths(path)[1]


def corpus_paths(path: str, key: str = "input.path") -> tuple[Any, list[str]]:
    """The filesystem of a corpus (local or an object store) and its Parquet files' paths in
    it, found as a job finds them; InputError naming `key` and `path` otherwise."""
    fs, root = resolve(parse_location(path), InputError, key)
    return fs, [file.path for file in parquet_files(fs, root, parse_location(path))]


def open_file(fs: Any, file: CorpusFile, patience: float = 0.0) -> pq.ParquetFile:
    """Open one file for reading; every failure becomes an InputError naming the file. A store
    that cannot be reached is waited for up to `patience` seconds (`evalpipe.stores.patience`)."""
    try:
        # pre_buffer=False + a read buffer: pages stream in, a huge row group is not loaded
        # whole; on an object store each buffer fill is one ranged read
        return patiently(
            lambda: pq.ParquetFile(
                file.path, pre_buffer=False, buffer_size=_READ_BUFFER, filesystem=fs
            ),
            patience,
        )
    except pa.ArrowInvalid as exc:
        raise InputError(
            f"input file '{file.shown}' is not a Parquet file ({first_line(exc)})"
        ) from None
    except OSError as exc:
        raise InputError(f"input file '{file.shown}' cannot be read: {first_line(exc)}") from None


def footer(fs: Any, file: CorpusFile) -> tuple[pa.Schema, int]:
    with open_file(fs, file) as parquet:
        return parquet.schema_arrow, parquet.metadata.num_rows


class StoreAway(Exception):
    """The store broke off a read mid-file: wait a growing pause, then read on."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(str(cause))
        self.cause = cause

    def wait_out(self, shown: str, waited: float) -> float:
        """Wait, and return the seconds waited in all; an error after PATIENCE_SECONDS."""
        if waited >= PATIENCE_SECONDS:
            raise EvalpipeError(
                f"input file '{shown}' cannot be read: the store could not be reached for "
                f"{waited:.0f}s ({first_line(self.cause)}); the rows finished are kept: run the "
                "same command to resume"
            )
        delay = min(MAX_DELAY, max(FIRST_DELAY, waited))
        time.sleep(delay)
        return waited + delay
