"""An Iceberg table as pyiceberg opens, writes and reads it: the catalog, evalpipe's schema in
the table, the pointer a reader finds the table by, and the rows of a night.

- The catalog is `output.catalog` (pyiceberg's own properties, passed through, merged with its
  `PYICEBERG_CATALOG__<NAME>__*` variables); none given, a SQLite catalog in the table's own
  folder (`_catalog.db`, a local output only): one machine, nothing to set up.
- The pointer (`POINTER`, `_iceberg.json` in the table's location): the catalog's properties
  (no secret: the config holds none) and the table's identifier, written by the run that opens
  the table, so that a reader given the location (`evalpipe describe s3://lake/reviews`) opens
  the table through its catalog, never by guessing its newest metadata file (a killed commit's
  may be newer than the catalog's).
- The schema: each column's description is its field's `doc`; timestamps in microseconds
  (Iceberg's); the questions' layout and the schema version are table properties, since
  Iceberg's fields carry no other metadata.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa

from evalpipe.errors import ConfigError, InputError, OutputError, ResumeConflict, first_line
from evalpipe.output import columns
from evalpipe.output.table import LAYOUT_KEY, schema_layout
from evalpipe.stores import Folder

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

POINTER = "_iceberg.json"  # in the table's location: its catalog and identifier
LOCAL_CATALOG = "_catalog.db"  # the default catalog of a local output: SQLite, in the folder
DEFAULT_TABLE = "evalpipe.scores"
PREFIX = "evalpipe."  # table properties and snapshot summary keys of this tool
LAYOUT = PREFIX + "layout"  # table property: the questions' layout (JSON)
VERSION = PREFIX + "schema_version"
DOC = b"doc"  # the field metadata key pyiceberg takes as a field's doc
PARTITION_TEXT = "The partition of the run that wrote the row (output.partition): {key}."
KEPT = "; rows committed so far are kept: fix it and run the same command to resume"


def named(out: Folder, settings: Mapping[str, Any]) -> tuple[dict[str, str], str]:
    """The catalog's properties and the table's identifier a job's `output` section names (a
    local output without a catalog: SQLite in its folder); ConfigError (one line) otherwise."""
    table = settings.get("table") or DEFAULT_TABLE
    if "." not in table:
        raise ConfigError(f"output.table: '{table}' is not namespace.table (evals.reviews)")
    given = {str(k): str(v) for k, v in (settings.get("catalog") or {}).items()}
    local = out.local
    if not given:
        if local is None:
            raise ConfigError(
                f"output.catalog: the Iceberg table at '{out.shown}' needs a catalog (a SQL "
                "catalog on PostgreSQL, a REST catalog, Glue): name it in output.catalog"
            )
        given = {"type": "sql", "uri": f"sqlite:///{local.absolute() / LOCAL_CATALOG}"}
    uri = given.get("uri", "")
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        given["uri"] = f"sqlite:///{os.path.abspath(uri.removeprefix('sqlite:///'))}"
    return given, table


def catalog(properties: Mapping[str, str]) -> Catalog:
    """The catalog (`name`, else `evalpipe`; pyiceberg's properties, its variables merged in).
    pyiceberg's S3 file IO takes the AWS chain's keys but neither `AWS_ENDPOINT_URL` nor the
    region variables: passed on. Without a region it asks AWS itself for the bucket's (a
    HeadBucket to amazonaws.com, whatever the endpoint): for an S3-compatible store the wrong
    place, and where AWS cannot be reached a wait of seconds in every process."""
    from pyiceberg.catalog import load_catalog

    given = dict(properties)
    name = given.pop("name", "evalpipe")
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    if endpoint and "s3.endpoint" not in given:  # an S3-compatible store, as for the others
        given["s3.endpoint"] = endpoint
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region and not {"s3.region", "client.region"} & given.keys():
        given["s3.region"] = region
    return load_catalog(name, **given)


def location_of(out: Folder) -> str:
    """`output.path` as Iceberg names a location: a URI as written, a local path as file://."""
    local = out.local
    return f"file://{local.absolute()}" if local is not None else str(out.location).rstrip("/")


def write_pointer(out: Folder, properties: Mapping[str, str], identifier: str) -> None:
    body = orjson.dumps(
        {"catalog": dict(properties), "table": identifier}, option=orjson.OPT_SORT_KEYS
    )
    if out.read_bytes(POINTER) != body:
        out.write_bytes(POINTER, body)


def read_pointer(out: Folder) -> tuple[dict[str, str], str] | None:
    """The catalog and identifier a table's location points at (None: no pointer there)."""
    raw = out.read_bytes(POINTER)
    if raw is None:
        return None
    found = orjson.loads(raw)
    return dict(found["catalog"]), str(found["table"])


def app_id(fingerprint: str, partition: Mapping[str, str]) -> str:
    """The id of one job's writes into one night (its sequence: a table property)."""
    digest = hashlib.blake2b(orjson.dumps(dict(sorted(partition.items()))), digest_size=8)
    return f"evalpipe-{fingerprint}-{digest.hexdigest()}"


def iceberg_schema(schema: pa.Schema, partition: Mapping[str, str]) -> pa.Schema:
    """The output schema as the table holds it: each description also the field's `doc`,
    timestamps in microseconds, one string column per partition key, last."""
    fields = []
    for field in schema:
        meta = dict(field.metadata or {})
        if columns.DESCRIPTION in meta:
            meta[DOC] = meta[columns.DESCRIPTION]
        kind = (
            pa.timestamp("us", tz=field.type.tz)
            if pa.types.is_timestamp(field.type)
            else field.type
        )
        fields.append(pa.field(field.name, kind, nullable=True, metadata=meta))
    for key in partition:
        if key in schema.names:
            raise ConfigError(
                f"output.partition: '{key}' is a column of the output already; name the "
                "partition column otherwise (dt, night)"
            )
        text = PARTITION_TEXT.format(key=key).encode()
        fields.append(pa.field(key, pa.string(), metadata={columns.DESCRIPTION: text, DOC: text}))
    return pa.schema(fields, metadata=schema.metadata)


def merged_layout(old: str | None, schema: pa.Schema) -> str:
    """The questions' layout: the table's (`old`), then this schema's questions it lacks."""
    known = orjson.loads(old) if old else []
    keys = {entry[0] for entry in known}
    known += [list(e) for e in schema_layout(schema) if e[0] not in keys]
    return orjson.dumps(known).decode()


def arrow_schema(table: Table, written: set[str] | None = None) -> pa.Schema:
    """A table's schema as Arrow with the metadata evalpipe's readers know: each field's doc
    as its description, the questions' layout and the schema version (table properties);
    `written`: those columns only, and the questions they answer."""
    fields = []
    for field in table.schema().as_arrow():
        if written is not None and field.name not in written:
            continue
        meta = dict(field.metadata or {})
        if DOC in meta:
            meta[columns.DESCRIPTION] = meta[DOC]
        fields.append(field.with_metadata(meta))
    layout = orjson.loads(table.properties.get(LAYOUT, "[]"))
    if written is not None:
        layout = [e for e in layout if any(n.startswith(f"{e[0]}__") for n in written)]
    meta = {LAYOUT_KEY: orjson.dumps(layout),
            columns.VERSION_KEY: table.properties.get(VERSION, "2").encode()}  # fmt: skip
    return pa.schema(fields, metadata=meta)


def where(partition: Mapping[str, str]) -> Any:
    """The row filter of one night (all rows: no partition)."""
    from pyiceberg.expressions import AlwaysTrue, And, EqualTo

    found: Any = AlwaysTrue()
    for key, value in partition.items():
        found = And(found, EqualTo(key, value))  # type: ignore[call-arg,arg-type]
    return found


def night_rows(table: Table, partition: Mapping[str, str], select: list[str] | None) -> pa.Table:
    """The rows of `table` in `partition` (all: empty), columns `select` (all: None)."""
    fields = tuple(select) if select is not None else ("*",)
    return table.scan(row_filter=where(partition), selected_fields=fields).to_arrow()


def summaries(table: Table) -> list[dict[str, str]]:
    """evalpipe's facts of each snapshot, oldest first (`PREFIX` keys, without it)."""
    found = []
    for snapshot in table.snapshots():
        facts = snapshot.summary.additional_properties if snapshot.summary else {}
        mine = {k.removeprefix(PREFIX): v for k, v in facts.items() if k.startswith(PREFIX)}
        found.append({**mine, "snapshot_id": str(snapshot.snapshot_id),
                      "timestamp_ms": str(snapshot.timestamp_ms)})  # fmt: skip
    return found


def runs(table: Table) -> list[dict[str, Any]]:
    """The runs that wrote the table, oldest first, from its snapshots' summaries."""
    found: dict[str, dict[str, Any]] = {}
    for facts in summaries(table):
        run_id = facts.get("run_id")
        if run_id is None:
            continue
        run = found.setdefault(run_id, {"run_id": run_id, "ended_how": None, "summary": None})
        run["partition"] = orjson.loads(facts.get("partition", "{}"))
        for key in ("evalpipe_version", "config_hash", "ended_how"):
            if key in facts:
                run[key] = facts[key]
        if "summary" in facts:
            run["summary"] = orjson.loads(facts["summary"])
    out = list(found.values())
    for run in out[:-1]:
        run["ended_how"] = run["ended_how"] or "interrupted"
    return out


@contextlib.contextmanager
def errors(out: Folder, what: str, reading: bool = False) -> Iterator[None]:
    """pyiceberg's, SQLAlchemy's and the store's errors as one line (an InputError for a
    reader, else an OutputError); evalpipe's own pass through."""
    try:
        yield
    except (ConfigError, ResumeConflict, OutputError, InputError):
        raise
    except Exception as exc:
        if reading:
            raise InputError(f"output '{out.shown}' cannot be read: {first_line(exc)}") from None
        raise OutputError(
            f"output.path '{out.shown}': the Iceberg table {what} ({first_line(exc)}){KEPT}"
        ) from None
