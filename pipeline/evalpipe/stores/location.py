"""Where a job's files live: a local path or an object-store URI, behind one small interface.

Corpora and output tables live on object stores (S3, GCS, Azure, HDFS) as often as on a disk.
`pyarrow.fs` resolves a URI to a filesystem that uses each store's own credential chain (for S3
the `AWS_*` variables, profiles and instance roles, and `AWS_ENDPOINT_URL` for an S3-compatible
store), so no credential ever appears in a job config. This module decides, once:

- what a location is (`parse_location`): a URI (`scheme://...`) stays a string, anything else
  is a local `Path` (a `Path` would turn `s3://b/x` into the local path `s3:/b/x`);
- how it resolves to a filesystem and a path in it (`resolve`), with one-line errors; a URI with
  credentials in it is refused there (they belong in the store's variables) and never shown
  (`evalpipe.stores.urls`);
- `Folder`: an output folder as files that appear whole or not at all. On a local disk: a
  temporary file, fsync, rename (`evalpipe.stores.files`). On S3, GCS and Azure an object is visible
  only once its upload completes, so a file is one PUT of bytes serialized beforehand (no
  Python code runs between the bytes of one object, so a stop cannot complete half of one);
  elsewhere (HDFS) a temporary name and a rename, which HDFS does atomically;
- where the local staging folder of an object-store output is (`staging_dir`): a store cannot
  append to an object or lock one, so the journal and the lock file stay on local disk;
- how long a store that went away is waited for (`Folder.patience`, `evalpipe.stores.patience`),
  and the filesystem beneath such a wait (`patient_fs`): pyarrow's own retries cut short, so
  that the wait is the documented one and not that plus pyarrow's.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from evalpipe.errors import ConfigError, EvalpipeError, first_line
from evalpipe.stores.files import COMPRESSION, fsync, write_bytes, write_parquet
from evalpipe.stores.home import cache_home
from evalpipe.stores.patience import STORE_ATTEMPTS, patiently
from evalpipe.stores.urls import refusal, scrubbed

T = TypeVar("T")

Location = Path | str  # a local path, or a URI kept as written (see `parse_location`)
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_ATOMIC_PUT = ("s3", "gcs", "abfs")  # pyarrow filesystems whose objects appear whole
STAGING = "staging"  # under the cache folder: one folder per object-store output


def is_uri(location: Location) -> bool:
    return isinstance(location, str) and _URI.match(location) is not None


def parse_location(value: Any) -> Location:
    """A config's path: a URI as a string (trailing slashes dropped), `file://` and anything
    else as a local Path."""
    if isinstance(value, Path):
        return value
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be a local path or a URI such as s3://bucket/prefix")
    if not is_uri(value):
        return Path(value)
    scheme, _, rest = value.partition("://")
    if scheme.lower() == "file":
        return Path("/" + rest.lstrip("/"))
    return f"{scheme.lower()}://{rest.rstrip('/')}"


def shown(location: Location, name: str | None = None) -> str:
    """A location (or a file in it) as messages, metrics and lineage show it: a URI without
    any user or password in it."""
    if not is_uri(location):
        return str(location) if name is None else str(Path(location) / name)
    text = scrubbed(str(location))
    return text if name is None else f"{text}/{name}"


def resolve(
    location: Location, error: type[EvalpipeError], key: str, patient: bool = False
) -> tuple[Any, str]:
    """(pyarrow filesystem, path in it) of `location`; `error` naming config `key` if the
    store is unknown or cannot be reached, or the URI holds credentials. `patient`: for
    operations that `patiently` waits on, pyarrow's own retries cut short (`patient_fs`)."""
    if not is_uri(location):
        return pafs.LocalFileSystem(), os.path.abspath(location)
    refused = refusal(str(location))
    if refused is not None:
        raise error(f"{key}: {refused}")
    try:
        fs, path = pafs.FileSystem.from_uri(str(location))
    except pa.ArrowInvalid:
        scheme = str(location).partition("://")[0]
        raise error(
            f"{key} '{shown(location)}': pyarrow knows no filesystem for '{scheme}://' "
            "(it knows s3://, gs://, abfs://, hdfs:// and local paths)"
        ) from None
    except OSError as exc:
        raise error(
            f"{key} '{shown(location)}': the store cannot be reached ({first_line(exc)})"
        ) from None
    return (patient_fs(fs) if patient else fs), str(path)


def patient_fs(fs: Any) -> Any:
    """`fs` for operations that `patiently` waits on: an S3 filesystem made again with the same
    options (pyarrow's own pickling gives them) but `STORE_ATTEMPTS` attempts at a request
    instead of retrying one for 6 s (`evalpipe.stores.patience`); any other filesystem as is."""
    if not isinstance(fs, pafs.S3FileSystem):
        return fs
    _, (options,) = fs.__reduce__()
    retry = pafs.AwsStandardS3RetryStrategy(max_attempts=STORE_ATTEMPTS)
    return pafs.S3FileSystem(**{**options, "retry_strategy": retry})


def staging_dir(location: Location, root: Path | None = None) -> Path:
    """The local folder of an object-store output's journal and lock: under `root` (the
    config's `output.staging`, else the cache folder), named by a digest of the URI so that
    every output has its own and the same output finds its own again."""
    digest = hashlib.blake2b(str(parse_location(location)).encode(), digest_size=10).hexdigest()
    return (root if root is not None else cache_home() / STAGING) / digest


def local_dir(location: Location, staging: Path | None = None) -> Path:
    """Where a run keeps an output's local files (its lock, its journal): in the output when
    it is a local directory, else in its staging folder (`staging_dir`)."""
    return staging_dir(location, staging) if is_uri(location) else Path(location)


class Folder:
    """One output folder: a local directory, or a prefix on an object store. Every file is
    written whole, once, under its final name as readers see it; see the module docstring.
    `patience`: how long an object store that cannot be reached is waited for (0 at first:
    a run that cannot reach it at the start says so at once; the sink raises it once open,
    and from then on `fs` is the `patient_fs`, whose own retries are short)."""

    def __init__(self, location: Location, key: str = "output.path") -> None:
        location = parse_location(location)
        self.location = location
        self.shown = shown(location)
        self.local: Path | None = None if is_uri(location) else Path(location)
        self._fs, self.root = resolve(location, ConfigError, key)
        self.fs, self._patience = self._fs, 0.0

    @property
    def patience(self) -> float:
        return self._patience

    @patience.setter
    def patience(self, seconds: float) -> None:
        self._patience = seconds
        self.fs = patient_fs(self._fs) if seconds > 0 else self._fs

    def path(self, name: str) -> str:
        """`name`'s path in `self.fs`."""
        return f"{self.root.rstrip('/')}/{name}"

    def shown_name(self, name: str) -> str:
        return shown(self.location, name)

    def _remote(self, operation: Callable[[], T]) -> T:
        return patiently(operation, self.patience)

    def create(self) -> None:
        """Make the folder (a local directory; an object-store prefix needs nothing, but its
        bucket must be there)."""
        if self.local is not None:
            self.local.mkdir(parents=True, exist_ok=True)
            return
        bucket = self.root.split("/", 1)[0]
        if self.fs.get_file_info(bucket).type == pafs.FileType.NotFound:
            raise FileNotFoundError(f"the bucket or container '{bucket}' does not exist")

    def names(self) -> list[str]:
        """The names of the files directly in the folder, sorted."""
        if self.local is not None:
            return sorted(os.listdir(self.local)) if self.local.is_dir() else []
        selector = pafs.FileSelector(self.root, allow_not_found=True)
        infos = self._remote(lambda: self.fs.get_file_info(selector))
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.File)

    def read_bytes(self, name: str) -> bytes | None:
        """A file's content; None if there is no such file."""
        if self.local is not None:
            try:
                return (self.local / name).read_bytes()
            except FileNotFoundError:
                return None

        def read() -> bytes:
            with self.fs.open_input_stream(self.path(name)) as stream:
                data: bytes = stream.read()
                return data

        try:
            return self._remote(read)
        except FileNotFoundError:
            return None

    def write_bytes(self, name: str, data: bytes) -> None:
        """`data` as the whole content of file `name`, atomically (replacing any)."""
        if self.local is not None:
            write_bytes(self.local / name, data)
        else:
            self._put(name, lambda stream: stream.write(data))

    def write_parquet(self, name: str, table: pa.Table) -> None:
        """`table` as one Parquet file `name`, atomically."""
        if self.local is not None:
            write_parquet(self.local / name, table)
            return
        buffer = pa.BufferOutputStream()
        pq.write_table(table, buffer, compression=COMPRESSION)
        data = buffer.getvalue()
        self._put(name, lambda stream: stream.write(data))

    def _put(self, name: str, write: Callable[[Any], object]) -> None:
        self._remote(lambda: self._put_once(name, write))  # a put is whole or absent: redo it

    def _put_once(self, name: str, write: Callable[[Any], object]) -> None:
        if self.fs.type_name in _ATOMIC_PUT:  # the object appears when its upload completes
            with self.fs.open_output_stream(self.path(name)) as stream:
                write(stream)
            return
        temp = self.path(f".{name}.{uuid.uuid4().hex}.tmp")  # outdir's temporary-file pattern
        try:
            with self.fs.open_output_stream(temp) as stream:
                write(stream)
            # HDFS renames atomically but not onto an existing file: only the manifest is ever
            # replaced, and it is a description (the parts are the truth), so a moment without
            # it is harmless
            with contextlib.suppress(FileNotFoundError):
                self.fs.delete_file(self.path(name))
            self.fs.move(temp, self.path(name))
        except BaseException:
            with contextlib.suppress(OSError):
                self.fs.delete_file(temp)
            raise

    def delete(self, name: str, missing_ok: bool = True) -> None:
        if self.local is not None:
            (self.local / name).unlink(missing_ok=missing_ok)
            return
        try:
            self._remote(lambda: self.fs.delete_file(self.path(name)))
        except FileNotFoundError:
            if not missing_ok:
                raise

    def sync(self) -> None:
        """Make deletions durable (a local directory's entries; a store's are at once)."""
        if self.local is not None:
            fsync(self.local)

    def read_table(self, name: str, **options: Any) -> pa.Table:
        path, fs = self.path(name), self.fs
        return self._remote(lambda: pq.read_table(path, filesystem=fs, **options))

    def open_parquet(self, name: str) -> pq.ParquetFile:
        """A Parquet file, its footer read once (a ranged GET on a store) for its schema and
        its reads."""
        return self._remote(lambda: pq.ParquetFile(self.path(name), filesystem=self.fs))

    def num_rows(self, name: str) -> int:
        def count() -> int:
            with pq.ParquetFile(self.path(name), filesystem=self.fs) as parquet:
                return int(parquet.metadata.num_rows)

        return self._remote(count)


def as_folder(out: Folder | Location) -> Folder:
    return out if isinstance(out, Folder) else Folder(out)
