"""The output as an Apache Iceberg table (`output.format: iceberg`), through pyiceberg.

Many analysts' warehouses read Iceberg, not Delta (Snowflake, BigQuery, Athena and S3 Tables,
Trino, Dremio). pyiceberg is the Iceberg project's own Python library: it writes data files and
metadata with pyarrow and commits through any catalog it knows (SQL on SQLite or PostgreSQL,
REST: Polaris, Nessie, Unity; Glue; S3 Tables), so evalpipe writes none of Iceberg's metadata
by hand. The catalog is `output.catalog` (pyiceberg's own properties, passed through; secrets
from the environment: `PYICEBERG_CATALOG__<NAME>__<PROPERTY>`, `PGPASSWORD`, the AWS chain),
the table `output.table` (`namespace.table`), its location `output.path`, where the run's lock
and journal are kept as for the other formats.

As the Delta committer (`evalpipe.lake.DeltaCommitter`), one batch is one commit, exactly once:
- a night is a partition (identity on the partition column, `output.partition`);
- each batch's commit is one catalog transaction that appends the rows (or, for `--restart`'s
  first batch, overwrites the night: `overwrite_filter` on the partition) AND sets the table
  property `evalpipe.txn.<app id>` to the batch's sequence: the job's last committed batch
  for that night, as Delta's `txn` action says it. A kill before the catalog's commit leaves
  nothing (orphan files at most), after it a journal whose sequence the table has: dropped;
- each snapshot's summary holds the run id, sequence, partition and fingerprint (and on the last
  one how the run ended, with its summary): the runs' history, read by `runs`;
- a question added later adds its columns (`update_schema().union_by_name`); each column's
  description is its field's `doc`; the question layout and schema version are table
  properties (`LAYOUT`, `VERSION`) since Iceberg fields carry no other metadata.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from evalpipe.errors import ConfigError, OutputError, ResumeConflict, first_line
from evalpipe.lake import app_id
from evalpipe.output import columns
from evalpipe.output.delta import delta_schema
from evalpipe.output.table import LAYOUT_KEY, schema_layout
from evalpipe.stores import Folder

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table, Transaction

PREFIX = "evalpipe."  # table properties and snapshot summary keys of this tool
TXN = PREFIX + "txn."  # + app id: the job's last committed sequence for the night
LAYOUT = PREFIX + "layout"  # table property: the questions' layout (JSON)
VERSION = PREFIX + "schema_version"
DOC = b"doc"  # the field metadata key pyiceberg takes as a field's doc
KEPT = "; rows committed so far are kept: fix it and run the same command to resume"


def catalog(properties: Mapping[str, str]) -> Catalog:
    """The catalog `output.catalog` names (`name`, else `evalpipe`; the rest pyiceberg's own
    properties, merged with its `PYICEBERG_CATALOG__<NAME>__*` variables). pyiceberg's S3
    file IO takes the AWS chain's keys but not `AWS_ENDPOINT_URL`: it is passed on here."""
    from pyiceberg.catalog import load_catalog

    given = dict(properties)
    name = given.pop("name", "evalpipe")
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    if endpoint and "s3.endpoint" not in given:  # an S3-compatible store, as for the others
        given["s3.endpoint"] = endpoint
    return load_catalog(name, **given)


def table_location(out: Folder) -> str:
    """`output.path` as Iceberg names a location: a URI as written, a local path as file://."""
    local = out.local
    return f"file://{local.absolute()}" if local is not None else str(out.location).rstrip("/")


def iceberg_schema(schema: pa.Schema, partition: Mapping[str, str]) -> pa.Schema:
    """The output schema as the table holds it: `delta_schema`'s fields (partition columns
    last), each description also as the field's `doc`, timestamps in microseconds (Iceberg's)."""
    fields = []
    for field in delta_schema(schema, partition):
        meta = dict(field.metadata or {})
        if columns.DESCRIPTION in meta:
            meta[DOC] = meta[columns.DESCRIPTION]
        kind = field.type
        if pa.types.is_timestamp(kind):
            kind = pa.timestamp("us", tz=kind.tz)
        fields.append(pa.field(field.name, kind, nullable=True, metadata=meta))
    return pa.schema(fields, metadata=schema.metadata)


def _merged_layout(old: str | None, schema: pa.Schema) -> str:
    """The questions' layout: the table's (`old`), then this schema's questions it lacks."""
    known = orjson.loads(old) if old else []
    keys = {entry[0] for entry in known}
    known += [list(e) for e in schema_layout(schema) if e[0] not in keys]
    return orjson.dumps(known).decode()


class IcebergCommitter:
    """One run's commits into an Iceberg table (one night of it), for `evalpipe.output.Sink`:
    the sink's committer seam (`evalpipe.output.committer`), as `DeltaCommitter` is for Delta."""

    def __init__(
        self, out: Folder, schema: pa.Schema, fingerprint: str, *, run_id: str,
        partition: Mapping[str, str], provenance: Mapping[str, str],
        catalog: Mapping[str, str], table: str,
    ) -> None:  # fmt: skip
        """Keeps what it is given; does no I/O."""
        self.out, self.output_schema = out, schema
        self.schema = iceberg_schema(schema, partition)
        self.fingerprint, self.run_id = fingerprint, run_id
        self.partition, self.provenance = dict(partition), dict(provenance)
        self.properties, self.identifier = dict(catalog), table
        self.app_id = app_id(fingerprint, partition)
        self.table: Table | None = None
        self.sequence = 0
        self.replacing = False
        self._keys: pa.Table | None = None

    # ----------------------------------------------------------------------- opening

    def open(self, restart: bool) -> None:
        """The table, created if need be (its namespace, its night partition), its schema
        evolved to this job's; ResumeConflict if another config wrote this night last."""
        with errors(self.out, "cannot be opened"):
            found = catalog(self.properties)
            namespace = self.identifier.rsplit(".", 1)[0]
            found.create_namespace_if_not_exists(namespace)
            location = table_location(self.out)
            if found.table_exists(self.identifier):
                self.table = found.load_table(self.identifier)
                if self.table.location().rstrip("/") != location:
                    raise ConfigError(
                        f"output.table '{self.identifier}' is at '{self.table.location()}', not "
                        f"output.path '{self.out.shown}': give the table's own location"
                    )
            else:
                self.table = found.create_table(
                    self.identifier, schema=self.schema, location=location
                )
            self._check_compatible()
            self._shape()
            if not restart:
                self._check_resumable()
        self.replacing = restart
        self.sequence = self._done() + 1

    def _check_compatible(self) -> None:
        """ConfigError (one line) unless this job's rows can go into the table: the same
        partition columns (or none yet), no question whose kind changed."""
        assert self.table is not None
        spec = [f.name for f in self.table.spec().fields]
        if spec and sorted(spec) != sorted(self.partition):
            raise ConfigError(
                f"output.partition: the Iceberg table '{self.identifier}' is partitioned by "
                f"{', '.join(spec)}; give output.partition exactly those keys"
            )
        was = {e[0]: e[1] for e in orjson.loads(self.table.properties.get(LAYOUT, "[]"))}
        for key, kind, _, _ in schema_layout(self.output_schema):
            if was.get(key, kind) != kind:
                raise ConfigError(
                    f"questions.{key}: is a {kind} question here but a {was[key]} question in "
                    f"the Iceberg table '{self.identifier}'; a question's type cannot change "
                    "under the same key: give it a new key"
                )

    def _shape(self) -> None:
        """The night's partition field, the schema's new columns and the layout, in one
        commit (none when the table has them)."""
        assert self.table is not None
        table = self.table
        spec = {f.name for f in table.spec().fields}
        layout = _merged_layout(table.properties.get(LAYOUT), self.output_schema)
        version = str(columns.schema_version(self.output_schema))
        new_columns = set(self.schema.names) - {f.name for f in table.schema().fields}
        if set(self.partition) <= spec and not new_columns and \
                table.properties.get(LAYOUT) == layout:  # fmt: skip
            return
        with table.transaction() as tx:
            if new_columns:
                with tx.update_schema() as update:
                    update.union_by_name(self.schema)
            missing = [k for k in self.partition if k not in spec]
            if missing:
                with tx.update_spec() as specs:
                    for key in missing:
                        specs.add_identity(key)
            tx.set_properties({LAYOUT: layout, VERSION: version})
        self.table = table.refresh()

    def _check_resumable(self) -> None:
        last = self._last_fingerprint()
        if last is not None and last != self.fingerprint:
            night = ", ".join(f"{k}={v}" for k, v in self.partition.items()) or "the table"
            raise ResumeConflict(
                f"output.table '{self.identifier}': {night} was written by a job with a "
                "different config (questions, model or state mapping); use --restart to "
                "replace it"
            )

    def _last_fingerprint(self) -> str | None:
        assert self.table is not None
        mine = orjson.dumps(self.partition).decode()
        for snapshot in reversed(self.table.snapshots()):
            summary = snapshot.summary.additional_properties if snapshot.summary else {}
            if summary.get(PREFIX + "partition") == mine:
                return summary.get(PREFIX + "fingerprint")
        return None

    def _done(self) -> int:
        """The last sequence the table has for this job and night (-1: none)."""
        assert self.table is not None
        return int(self.table.properties.get(TXN + self.app_id, -1))

    # ----------------------------------------------------------------------- the seam

    def header(self) -> dict[str, Any]:
        return {"sequence": self.sequence, "replaces": self.replacing, "app_id": self.app_id}

    def unsent(self, header: Mapping[str, Any], rows: pa.Table) -> tuple[pa.Table | None, int]:
        sequence = int(header.get("sequence", -1))
        if sequence <= self._done():
            return None, rows.num_rows
        self.sequence, self.replacing = sequence, bool(header.get("replaces"))
        return rows, 0

    def keys(self, select: list[str]) -> pa.Table:
        if self.replacing:
            self._keys = None
            return pa.table({c: pa.array([], self.schema.field(c).type) for c in select})
        self._keys = self._night(select)
        return self._keys

    def reconcile(self, drop: pa.ChunkedArray | pa.Array, retry: int, stale: int) -> int:
        if self._keys is None or not pc.any(drop).as_py():
            return 0
        name = self.schema.names[0]
        cut = self._keys[name].filter(drop)
        night = self._night(None)
        kept = night.filter(pc.invert(pc.is_in(night[name], cut)))
        facts = {"cut": orjson.dumps({"retry": retry, "stale": stale}).decode()}
        self._write(kept, True, self._summary(None, facts))
        return 0

    def recover(self, rows: pa.Table | None, unsent: pa.Table | None) -> int:
        if rows is None or unsent is None:
            return 0
        self.commit(rows)
        return unsent.num_rows

    def commit(self, rows: pa.Table) -> None:
        self._commit(rows, {})

    def finish(self, rows: pa.Table | None, how: str, summary: Mapping[str, Any]) -> None:
        if rows is not None:
            text = orjson.dumps(dict(summary), default=str).decode()
            self._commit(rows, {"ended_how": how, "summary": text})

    # ----------------------------------------------------------------------- the table

    def _commit(self, rows: pa.Table, more: Mapping[str, str]) -> None:
        data = self._rows(rows)
        self._write(data, self.replacing, self._summary(self.sequence, more), self.sequence)
        self.replacing = False
        self.sequence += 1

    def _rows(self, rows: pa.Table) -> pa.Table:
        """Output rows as the table takes them: partition columns set, the table's types."""
        arrays = list(rows.columns)
        arrays += [pa.repeat(pa.scalar(v, pa.string()), rows.num_rows)
                   for v in self.partition.values()]  # fmt: skip
        return pa.Table.from_arrays(arrays, names=self.schema.names).cast(self.schema)

    def _night(self, select: list[str] | None) -> pa.Table:
        assert self.table is not None
        with errors(self.out, "cannot be read"):
            return night_rows(self.table, self.partition, select)

    def _summary(self, sequence: int | None, more: Mapping[str, str]) -> dict[str, str]:
        facts = {
            "run_id": self.run_id, "app_id": self.app_id, "fingerprint": self.fingerprint,
            "partition": orjson.dumps(self.partition).decode(), **self.provenance, **more,
        }  # fmt: skip
        if sequence is not None:
            facts["sequence"] = str(sequence)
        return {PREFIX + k: str(v) for k, v in facts.items()}

    def _write(
        self, rows: pa.Table, replace: bool, summary: dict[str, str], sequence: int | None = None
    ) -> None:
        """One catalog commit: `rows` appended (or the night replaced by them) and, for a
        batch, the job's sequence for the night set with them."""
        assert self.table is not None
        with errors(self.out, "cannot write"):
            tx: Transaction = self.table.transaction()
            if sequence is not None:
                tx.set_properties({TXN + self.app_id: str(sequence)})
            if replace:
                tx.overwrite(rows, overwrite_filter=_where(self.partition),
                             snapshot_properties=summary)  # fmt: skip
            else:
                tx.append(rows, snapshot_properties=summary)
            tx.commit_transaction()
            self.table = self.table.refresh()


def _where(partition: Mapping[str, str]) -> Any:
    from pyiceberg.expressions import AlwaysTrue, And, EqualTo

    where: Any = AlwaysTrue()
    for key, value in partition.items():
        where = And(where, EqualTo(key, value))  # type: ignore[call-arg,arg-type]
    return where


def night_rows(table: Table, partition: Mapping[str, str], select: list[str] | None) -> pa.Table:
    """The rows of `table` in `partition` (all: empty), columns `select` (all: None)."""
    fields = tuple(select) if select is not None else ("*",)
    return table.scan(row_filter=_where(partition), selected_fields=fields).to_arrow()


def open_iceberg(
    out: Folder, journal: Path, schema: pa.Schema, fingerprint: str, *, run_id: str,
    partition: Mapping[str, str], restart: bool, provenance: Mapping[str, str] | None,
    catalog: Mapping[str, str], table: str,
) -> IcebergCommitter:  # fmt: skip
    """The Iceberg table `table` of `catalog` at `out` for run `run_id`, writing `partition`
    (created with its night partition if need be). With `restart` the night is replaced by the
    first commit."""
    from evalpipe.output.outdir import remove_journal_temps

    committer = IcebergCommitter(
        out, schema, fingerprint, run_id=run_id, partition=partition,
        provenance=provenance or {}, catalog=catalog, table=table,
    )  # fmt: skip
    committer.open(restart)
    journal.parent.mkdir(parents=True, exist_ok=True)
    remove_journal_temps(journal)
    if restart:
        journal.unlink(missing_ok=True)
    return committer


def arrow_schema(table: Table) -> pa.Schema:
    """A table's schema as Arrow with the metadata evalpipe's readers know: each field's doc
    as its description, the questions' layout and the schema version (table properties)."""
    fields = []
    for field in table.schema().as_arrow():
        meta = dict(field.metadata or {})
        if DOC in meta:
            meta[columns.DESCRIPTION] = meta[DOC]
        fields.append(field.with_metadata(meta))
    properties = table.properties
    meta = {LAYOUT_KEY: properties.get(LAYOUT, "[]").encode(),
            columns.VERSION_KEY: properties.get(VERSION, "2").encode()}  # fmt: skip
    return pa.schema(fields, metadata=meta)


@contextlib.contextmanager
def errors(out: Folder, what: str) -> Iterator[None]:
    """pyiceberg's, SQLAlchemy's and the store's errors as one OutputError line; evalpipe's own
    (ConfigError, ResumeConflict, OutputError) pass through."""
    try:
        yield
    except (ConfigError, ResumeConflict, OutputError):
        raise
    except Exception as exc:
        raise OutputError(
            f"output.path '{out.shown}': the Iceberg table {what} ({first_line(exc)}){KEPT}"
        ) from None
