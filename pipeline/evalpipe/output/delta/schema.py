"""evalpipe's own schema inside a Delta Lake table (`output.format: delta`).

A warehouse user expects one table for every night, its column descriptions in the catalog and a
schema that grows when a question is added. `evalpipe.output.delta.table` talks to delta-rs; this
module says what evalpipe's own schema (`evalpipe.output.table.output_schema`) looks like there:

- every field's description also under `comment` (what Spark, Databricks and Unity Catalog
  show), the question layout on each question's first field (`evalpipe.layout`), the schema
  version on the id field, and one string column per partition key (`delta_schema`);
  `arrow_schema` rebuilds from a table the schema metadata the readers know (`LAYOUT_KEY`);
- a question added later adds its columns (`schema_mode="merge"`: earlier rows read null
  there); a column whose type would change, or a question whose kind would, is refused before
  anything is sent (`check_compatible`): a new key is needed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import orjson
import pyarrow as pa

from evalpipe.errors import ConfigError
from evalpipe.output import columns
from evalpipe.output.delta.table import stored_schema
from evalpipe.output.table import LAYOUT_KEY, schema_layout

if TYPE_CHECKING:
    from deltalake import DeltaTable


COMMENT = "comment"  # field metadata: the description, as engines (Spark, Databricks) read it
FIELD_LAYOUT = "evalpipe.layout"  # field metadata: its question's layout entry
FIELD_VERSION = "evalpipe.schema_version"  # field metadata of the id column: the schema version
PARTITION_TEXT = "The partition of the run that wrote the row (output.partition): {key}."


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


def arrow_schema(table: DeltaTable | pa.Schema) -> pa.Schema:
    """A table's schema (or its stored schema) with the metadata evalpipe's readers know: the
    layout of every question in column order (`LAYOUT_KEY`) and the schema version."""
    schema = table if isinstance(table, pa.Schema) else stored_schema(table)
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
    shown: str, stored: pa.Schema, keys: list[str], schema: pa.Schema, partition: Mapping[str, str]
) -> None:
    """ConfigError (one line) unless rows of `schema` (`delta_schema`) can go into a table of
    schema `stored`, partitioned by `keys`: the same partition columns, no question whose kind
    changed, no column whose type changed."""
    if sorted(keys) != sorted(partition):
        want = ", ".join(keys) or "none"
        raise ConfigError(
            f"output.partition: the Delta table '{shown}' is partitioned by {want}; give "
            f"output.partition exactly those keys (it gives {', '.join(partition) or 'none'})"
        )
    stored = arrow_schema(stored)
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
