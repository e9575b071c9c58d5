"""The Iceberg committer: a sink's batches as catalog commits, exactly once across kill -9.

As the Delta committer does with Delta's `txn` action, one batch is one commit, exactly once:
- each batch's commit is one catalog transaction that appends the rows (or, for `--restart`'s
  first batch, overwrites the night: `overwrite_filter` on the partition) AND sets the table
  property `evalpipe.txn.<app id>` (the job's fingerprint and the night) to the batch's
  sequence. A kill before the catalog's commit leaves nothing but files no snapshot names;
  after it, a journal whose sequence the table has: dropped, never committed twice;
- each snapshot's summary holds the run id, sequence, partition and fingerprint, and the run's
  last one how it ended, with its summary (`table.runs` reads them back);
- with a shared tier (`hold`), every commit also sets `evalpipe.fence` to the output lease's
  fencing token, after reading the table's: a larger one (a newer holder's) refuses it, and a
  newer holder's commit made meanwhile makes the catalog refuse ours (its optimistic check on
  the table's metadata), either way LeaseLost;
- a question added later adds its columns (`update_schema().union_by_name`), the night is an
  identity partition on `output.partition`'s column, and the layout a table property.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa

from evalpipe.errors import ConfigError, ResumeConflict
from evalpipe.output import columns
from evalpipe.output.committer import TableCommitter, fenced_out
from evalpipe.output.iceberg.table import (
    LAYOUT,
    PREFIX,
    VERSION,
    app_id,
    catalog,
    errors,
    iceberg_schema,
    location_of,
    merged_layout,
    night_rows,
    where,
    write_pointer,
)
from evalpipe.output.table import schema_layout
from evalpipe.stores import Folder

if TYPE_CHECKING:
    from pyiceberg.table import Table, Transaction

TXN = PREFIX + "txn."  # + app id: the job's last committed sequence for the night
FENCE = PREFIX + "fence"  # the output lease's fencing token of the last holder that committed


class IcebergCommitter(TableCommitter):
    """One run's commits into an Iceberg table (one night of it), for `evalpipe.output.Sink`:
    the sink's committer seam, as the table formats share it (`evalpipe.output.committer`)."""

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

    @property
    def row_schema(self) -> pa.Schema:
        """The rows the sink journals: the output's own schema."""
        return self.output_schema

    # ----------------------------------------------------------------------- opening

    def open(self, restart: bool) -> None:
        """The table, created if need be (its namespace, its night partition), its schema
        evolved to this job's; ResumeConflict if another config wrote this night last."""
        with errors(self.out, "cannot be opened"):
            found = catalog(self.properties)
            namespace = self.identifier.rsplit(".", 1)[0]
            found.create_namespace_if_not_exists(namespace)
            location = location_of(self.out)
            write_pointer(self.out, self.properties, self.identifier)
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
        layout = merged_layout(table.properties.get(LAYOUT), self.output_schema)
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

    # ----------------------------------------------------------------------- the table

    def _fenced(self) -> None:
        """LeaseLost when the table, as the catalog has it now, holds a larger fencing token."""
        if not self.fence or self.table is None:
            return
        with errors(self.out, "cannot be read"):
            self.table = self.table.refresh()
        seen = self.table.properties.get(FENCE)
        if seen is not None and int(seen) > self.fence:
            raise fenced_out(int(seen), self.fence)

    def _write(
        self, rows: pa.Table, replace: bool, sequence: int, facts: Mapping[str, Any]
    ) -> None:
        self._transact(self._rows(rows), replace, self._summary(sequence, facts), sequence)

    def _cut(self, kept: pa.Table, facts: Mapping[str, Any]) -> None:
        self._transact(kept, True, self._summary(None, facts))

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

    def _summary(self, sequence: int | None, more: Mapping[str, Any]) -> dict[str, str]:
        """A snapshot's summary: text values, any other as JSON (a run's summary, a cut)."""
        facts = {
            "run_id": self.run_id, "app_id": self.app_id, "fingerprint": self.fingerprint,
            "partition": self.partition, **self.provenance, **more,
        }  # fmt: skip
        if sequence is not None:
            facts["sequence"] = str(sequence)
        return {
            PREFIX + k: v if isinstance(v, str) else orjson.dumps(v).decode()
            for k, v in facts.items()
        }

    def _transact(
        self, rows: pa.Table, replace: bool, summary: dict[str, str], sequence: int | None = None
    ) -> None:
        """One catalog commit: `rows` appended (or the night replaced by them) and, for a
        batch, the job's sequence for the night set with them."""
        from pyiceberg.exceptions import CommitFailedException

        self._fenced()
        assert self.table is not None
        properties = {TXN + self.app_id: str(sequence)} if sequence is not None else {}
        if self.fence:
            properties[FENCE] = str(self.fence)
        with errors(self.out, "cannot write"):
            tx: Transaction = self.table.transaction()
            if properties:
                tx.set_properties(properties)
            if replace:
                tx.overwrite(rows, overwrite_filter=where(self.partition),
                             snapshot_properties=summary)  # fmt: skip
            else:
                tx.append(rows, snapshot_properties=summary)
            try:
                tx.commit_transaction()
            except CommitFailedException:
                if self.fence:  # a newer holder committed since we read the table
                    raise fenced_out(None, self.fence) from None
                raise
            self.table = self.table.refresh()
