"""A Delta Lake table, as delta-rs (`deltalake`) opens, writes and reads it: the one module
that talks to delta-rs, for the output's Delta format (`output.format: delta`,
`evalpipe.output.delta.commit`) and for every reader of such a table
(`evalpipe.output.delta.target`).

A warehouse user expects one table for every night: appended in transactions, with its history,
its column descriptions in the catalog and a schema that grows when a question is added. What
evalpipe's own schema looks like inside the table (descriptions as `comment`, the question
layout on the fields) is `evalpipe.output.delta.schema`'s; this module takes a
ready schema and rows of it.

- Where a table is: `_delta_log` is named here only (`holds_log`, `has_log`); everything else
  asks this module.
- Reading: pyarrow datasets over the table's active files (`query`), so the rows a reader
  sees are exactly the committed version's.
- Exactly once: each batch is one transaction carrying an application transaction
  (`Transaction(app_id, sequence)`); the committer reads back the last sequence committed for
  the app id (the job's fingerprint and the partition), which a resume compares with its journal.
- History: each commit's info carries evalpipe's facts (`CommitInfo`); `runs` and `manifest`
  read them back, as `_manifest.json` says them of a Parquet output.
- Object stores: the AWS variables (`AWS_ENDPOINT_URL` included) configure delta-rs as they do
  pyarrow. On S3 delta-rs 1.x commits a version with a conditional PUT (`If-None-Match: *`),
  so two commits of one version cannot both win, with no lock service; evalpipe never sets
  `AWS_S3_ALLOW_UNSAFE_RENAME`, which would let a second writer overwrite a version.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa

from evalpipe.errors import OutputError
from evalpipe.stores import Location, is_uri, parse_location, resolve

if TYPE_CHECKING:
    from deltalake import DeltaTable

DELTA_LOG = "_delta_log"  # the table's log folder: named here, and nowhere else in evalpipe
COMMIT_KEY = "evalpipe"  # commit info: this tool's facts about the commit


def holds_log(names: Collection[str]) -> bool:
    """Whether a folder whose entries are `names` holds a Delta table's log."""
    return DELTA_LOG in names


def has_log(root: str) -> bool:
    """Whether `root` (a local path or a URI) is the root of a Delta table: its log folder on a
    local disk; on a store, a table that opens (`is_table`)."""
    location = parse_location(root)
    if not is_uri(location):
        return (Path(location) / DELTA_LOG).is_dir()
    try:
        return is_table(location)
    except Exception:
        return False


def uri(location: Location) -> str:
    """The table's URI as delta-rs takes it: a URI as written, a local path made absolute."""
    return location if isinstance(location, str) else str(Path(location).absolute())


def storage_options(location: Location) -> dict[str, str]:
    """delta-rs reads the AWS variables itself; an `http://` endpoint (an S3-compatible
    store on loopback or a LAN) must be allowed explicitly."""
    options: dict[str, str] = {}
    if is_uri(location) and os.environ.get("AWS_ENDPOINT_URL", "").startswith("http://"):
        options["allow_http"] = "true"
    return options


def is_table(location: Location) -> bool:
    """Whether `location` holds a Delta table (a `_delta_log` with a commit). Opened, not
    asked with `DeltaTable.is_deltatable`, whose list request hangs on S3-compatible stores
    such as moto's in deltalake 1.6 (the same request from `DeltaTable` does not)."""
    from deltalake.exceptions import TableNotFoundError

    try:
        load(location)
    except TableNotFoundError:
        return False
    return True


def load(location: Location, version: int | None = None) -> DeltaTable:
    """The table at `location` (at `version`, or the latest)."""
    from deltalake import DeltaTable

    location = parse_location(location)
    return DeltaTable(uri(location), version=version, storage_options=storage_options(location))


def stored_schema(table: DeltaTable) -> pa.Schema:
    """The table's schema as Arrow, with the field metadata it was written with."""
    return pa.schema(table.schema().to_arrow())


def partition_columns(table: DeltaTable) -> list[str]:
    return list(table.metadata().partition_columns)


def predicate(partition: Mapping[str, str]) -> str | None:
    """The SQL predicate that selects one partition, None for none."""
    if not partition:
        return None
    return " AND ".join(
        f"{_name(k)} = '{v.replace(chr(39), chr(39) * 2)}'" for k, v in partition.items()
    )


def _name(column: str) -> str:
    return '"' + column.replace('"', '""') + '"'


def app_id(fingerprint: str, partition: Mapping[str, str]) -> str:
    """The application id of one job's writes into one partition (the txn action's appId)."""
    if not partition:
        return f"evalpipe-{fingerprint}"
    digest = hashlib.blake2b(orjson.dumps(dict(sorted(partition.items()))), digest_size=8)
    return f"evalpipe-{fingerprint}-{digest.hexdigest()}"


# --------------------------------------------------------------------------- rows


def with_partition(rows: pa.Table, schema: pa.Schema, partition: Mapping[str, str]) -> pa.Table:
    """Output rows as the table takes them: `schema` (`delta_schema`), partition columns set."""
    arrays = list(rows.columns)
    arrays += [pa.repeat(pa.scalar(v, pa.string()), rows.num_rows) for v in partition.values()]
    return pa.Table.from_arrays(arrays, schema=schema)


def query(
    table: DeltaTable, location: Location, select: list[str] | None, partition: Mapping[str, str]
) -> pa.Table:
    """The rows of `table` (at `location`) in `partition` (all: empty), columns `select`
    (all: None). Read by pyarrow through its own filesystem for `location`: delta-rs's Python
    file system handler made interpreters abort at exit after a filtered scan, and DataFusion's
    reader (`QueryBuilder`) hung on S3-compatible stores' range requests (deltalake 1.6)."""
    dataset = _dataset(table, location)
    return dataset.to_table(columns=select, filter=_where(partition))


def _dataset(table: DeltaTable, location: Location) -> Any:
    import pyarrow.fs as pafs

    fs, root = resolve(parse_location(location), OutputError, "output.path")
    return table.to_pyarrow_dataset(filesystem=pafs.SubTreeFileSystem(root, fs))


def _where(partition: Mapping[str, str]) -> Any:
    import pyarrow.dataset as ds

    where = None
    for key, value in partition.items():
        test = ds.field(key) == value
        where = test if where is None else where & test
    return where


def has_rows(table: DeltaTable, location: Location, partition: Mapping[str, str]) -> bool:
    """Whether `partition` (the table: empty) holds any data file (the table's state only)."""
    return bool(fragments(table, location, partition))


def count_rows(table: DeltaTable, location: Location, partition: Mapping[str, str]) -> int:
    """How many rows `partition` (the table: empty) holds, from its files' footers."""
    return int(_dataset(table, location).count_rows(filter=_where(partition)))


def fragments(
    table: DeltaTable, location: Location, partition: Mapping[str, str]
) -> list[tuple[str, Any]]:
    dataset = _dataset(table, location)
    return [(f.path, f) for f in dataset.get_fragments(filter=_where(partition))]


@dataclass(frozen=True)
class CommitInfo:
    """What one commit says about itself (`COMMIT_KEY` in the commit info)."""

    run_id: str
    sequence: int | None
    facts: Mapping[str, Any]

    def as_metadata(self) -> dict[str, Any]:
        body = {"run_id": self.run_id, "sequence": self.sequence, **self.facts}
        return {COMMIT_KEY: orjson.loads(orjson.dumps(body, default=str))}


def commits(location: Location, version: int | None = None) -> Iterator[dict[str, Any]]:
    """The commit info of the table's versions up to `version` (all: None), newest first,
    each with its `version`, read one log file at a time (stop early, read little): from the
    log's JSON files through pyarrow's filesystem (`DeltaTable.history()` hung on
    S3-compatible stores in deltalake 1.6, as `is_deltatable` did). Versions whose JSON the
    log no longer keeps (cleaned after a checkpoint) are absent."""
    import pyarrow.fs as pafs

    fs, root = resolve(parse_location(location), OutputError, "output.path")
    log = f"{root.rstrip('/')}/{DELTA_LOG}"
    infos = fs.get_file_info(pafs.FileSelector(log, allow_not_found=True))
    found = []
    for info in infos:
        stem, _, suffix = info.base_name.partition(".")
        if suffix == "json" and stem.isdigit() and (version is None or int(stem) <= version):
            found.append((int(stem), info.path))
    for number, path in sorted(found, reverse=True):
        with fs.open_input_stream(path) as stream:
            for line in stream.read().splitlines():
                action = orjson.loads(line)
                if "commitInfo" in action:
                    yield {**action["commitInfo"], "version": number}


def runs(table: DeltaTable, location: Location) -> list[dict[str, Any]]:
    """The runs that wrote `table`, oldest first, from its commit info: per run its id,
    partition, evalpipe version, config hash, first and last commit, rows added, and how it
    ended (None while it has not said; `interrupted` when a later run followed)."""
    found: dict[str, dict[str, Any]] = {}
    for commit in reversed(list(commits(location, table.version()))):
        info = commit.get(COMMIT_KEY)
        if not isinstance(info, dict) or "run_id" not in info:
            continue
        run = found.setdefault(
            info["run_id"],
            {"run_id": info["run_id"], "started": _time(commit), "rows": 0, "ended_how": None,
             "summary": None, "versions": []},
        )  # fmt: skip
        for key in ("partition", "evalpipe_version", "config_hash", "ended_how", "summary"):
            if info.get(key) is not None:
                run[key] = info[key]
        run["ended"] = _time(commit)
        run["versions"].append(commit.get("version"))
        run["rows"] += int((commit.get("operationMetrics") or {}).get("num_added_rows") or 0)
    out = list(found.values())
    for run in out[:-1]:
        run["ended_how"] = run["ended_how"] or "interrupted"
    return out


def last_fingerprint(location: Location, partition: Mapping[str, str]) -> str | None:
    """The fingerprint of the job that last committed to `partition` (None: none did)."""
    for commit in commits(location):
        info = commit.get(COMMIT_KEY)
        if isinstance(info, dict) and (info.get("partition") or {}) == dict(partition):
            fingerprint = info.get("fingerprint")
            return fingerprint if isinstance(fingerprint, str) else None
    return None


def _time(commit: Mapping[str, Any]) -> str | None:
    from datetime import UTC, datetime

    stamp = commit.get("timestamp")
    if not isinstance(stamp, int):
        return None
    return datetime.fromtimestamp(stamp / 1000, UTC).isoformat(timespec="seconds")


def manifest(table: DeltaTable, location: Location) -> dict[str, Any]:
    """What `_manifest.json` says of a Parquet output, for a Delta table: its format, version,
    rows, runs and the latest run's summary."""
    history = runs(table, location)
    summary = next((r["summary"] for r in reversed(history) if r.get("summary")), None)
    return {
        "format": "delta",
        "table_version": table.version(),
        "partition_columns": partition_columns(table),
        "runs": history,
        "summary": summary,
    }
