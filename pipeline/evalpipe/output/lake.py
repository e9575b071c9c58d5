"""A Delta Lake table as the output (`output.format: delta`): its schema, partitions, commits.

A warehouse user expects one table for every night: appended in transactions, with its history,
its column descriptions in the catalog and a schema that grows when a question is added. The
`deltalake` package (delta-rs) writes such a table on a local disk or an object store; this
module is the one place that talks to it, for the sink (`evalpipe.output.delta`) and for the
readers (`evalpipe.analysis`).

- Schema: the output schema (`table.output_schema`) with every field's description also under
  `comment` (what Spark, Databricks and Unity Catalog show), the question layout on each
  question's first field (`evalpipe.layout`), and one string column per partition key.
  `arrow_schema` rebuilds from a table the schema metadata the readers know (`LAYOUT_KEY`).
- A question added later adds its columns (`schema_mode="merge"`: earlier rows read null
  there); a column whose type would change, or a question whose kind would, is refused
  before anything is sent (`check_compatible`): a new key is needed.
- Reading: pyarrow datasets over the table's active files (`query`), so the rows a reader
  sees are exactly the committed version's.
- Exactly once: each batch is one transaction carrying an application transaction
  (`Transaction(app_id, sequence)`); `done` reads back the last sequence committed for the
  app id (the job's fingerprint and the partition), which a resume compares with its journal.
- Object stores: the AWS variables (`AWS_ENDPOINT_URL` included) configure delta-rs as they do
  pyarrow. On S3 delta-rs 1.x commits a version with a conditional PUT (`If-None-Match: *`),
  so two commits of one version cannot both win, with no lock service; evalpipe never sets
  `AWS_S3_ALLOW_UNSAFE_RENAME`, which would let a second writer overwrite a version.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa

from evalpipe.errors import ConfigError, OutputError
from evalpipe.output import columns
from evalpipe.output.table import LAYOUT_KEY, schema_layout
from evalpipe.stores import Location, is_uri, parse_location, resolve

if TYPE_CHECKING:
    from deltalake import DeltaTable

DELTA_LOG = "_delta_log"
COMMENT = "comment"  # field metadata: the description, as engines (Spark, Databricks) read it
FIELD_LAYOUT = "evalpipe.layout"  # field metadata: its question's layout entry
FIELD_VERSION = "evalpipe.schema_version"  # field metadata of the id column: the schema version
COMMIT_KEY = "evalpipe"  # commit info: this tool's facts about the commit
PARTITION_TEXT = "The partition of the run that wrote the row (output.partition): {key}."


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


# --------------------------------------------------------------------------- schema


def delta_schema(schema: pa.Schema, partition: Mapping[str, str]) -> pa.Schema:
    """The output schema as the table holds it: descriptions as `comment`, each question's
    layout on its first field, the schema version on the id field, partition columns last."""
    first = {}
    for entry in schema_layout(schema):
        key, kind = entry[0], entry[1]
        head = f"{key}__p_true" if kind == "noul" else f"{key}__{kind}"
        first[head] = orjson.dumps(entry).decode()
    fields = []
    for i, field in enumerate(schema):
        meta = {k.decode(): v.decode() for k, v in (field.metadata or {}).items()}
        if columns.DESCRIPTION.decode() in meta:
            meta[COMMENT] = meta[columns.DESCRIPTION.decode()]
        if field.name in first:
            meta[FIELD_LAYOUT] = first[field.name]
        if i == 0:
            meta[FIELD_VERSION] = str(columns.schema_version(schema))
        fields.append(field.with_metadata(meta))
    for key in partition:
        if key in schema.names:
            raise ConfigError(
                f"output.partition: '{key}' is a column of the output already; name the "
                "partition column otherwise (dt, night)"
            )
        text = PARTITION_TEXT.format(key=key)
        meta = {columns.DESCRIPTION.decode(): text, COMMENT: text}
        fields.append(pa.field(key, pa.string(), metadata=meta))
    return pa.schema(fields, metadata=schema.metadata)


def arrow_schema(table: DeltaTable) -> pa.Schema:
    """The table's schema with the metadata evalpipe's readers know: the layout of every
    question in column order (`LAYOUT_KEY`) and the schema version."""
    schema = pa.schema(table.schema().to_arrow())
    layout = []
    for field in schema:
        raw = (field.metadata or {}).get(FIELD_LAYOUT.encode())
        if raw is not None:
            layout.append(orjson.loads(raw))
    version = (schema.field(0).metadata or {}).get(FIELD_VERSION.encode(), b"1")
    meta = {LAYOUT_KEY: orjson.dumps(layout), columns.VERSION_KEY: version}
    return schema.with_metadata(meta)


def _kinds(schema: pa.Schema) -> dict[str, str]:
    return {key: kind for key, kind, _, _ in schema_layout(schema)}


def _same_type(a: pa.DataType, b: pa.DataType) -> bool:
    if pa.types.is_timestamp(a) and pa.types.is_timestamp(b):
        return bool(a.tz == b.tz)  # the table keeps microseconds; our rows carry milliseconds
    return bool(a.equals(b))


def check_compatible(
    shown: str, table: DeltaTable, schema: pa.Schema, partition: Mapping[str, str]
) -> None:
    """ConfigError (one line) unless rows of `schema` can go into `table`: the same partition
    columns, no question whose kind changed, no column whose type changed."""
    keys = list(table.metadata().partition_columns)
    if sorted(keys) != sorted(partition):
        want = ", ".join(keys) or "none"
        raise ConfigError(
            f"output.partition: the Delta table '{shown}' is partitioned by {want}; give "
            f"output.partition exactly those keys (it gives {', '.join(partition) or 'none'})"
        )
    stored = arrow_schema(table)
    was = _kinds(stored)
    for key, kind in _kinds(schema).items():
        if was.get(key, kind) != kind:
            raise ConfigError(
                f"questions.{key}: is a {kind} question here but a {was[key]} question in the "
                f"Delta table '{shown}'; a question's type cannot change under the same key: "
                "give it a new key"
            )
    for field in schema:
        if field.name in stored.names:
            old = stored.field(field.name).type
            if not _same_type(old, field.type):
                raise ConfigError(
                    f"output column '{field.name}' is {field.type} here but {old} in the Delta "
                    f"table '{shown}'; a column's type cannot change: give the question a new key"
                )


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
        "partition_columns": list(table.metadata().partition_columns),
        "runs": history,
        "summary": summary,
    }
