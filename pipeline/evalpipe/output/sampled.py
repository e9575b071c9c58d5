"""A sampled output: `evalpipe estimate`'s design beside the rows, and the rows' weights.

`_sample.json` (metadata: its name starts with `_`) says how the sample was drawn (the seed, the
`--by` columns, each stratum's size and how many of its rows were drawn) and what the last
estimate found, so that a later estimate goes on with the same sample and `evalpipe report` and
`diff` show the estimates without the corpus. `_sample_weight` (the last column) gives each
answered sample row its weight; the weights move as a sample grows, so after each estimate
`weigh` rewrites the column in every part whose weights changed: the part's rows go to a new
part of the same sequence number, then the old part is deleted (as a resume's cut does: a kill
in between leaves two parts of one sequence with the same rows, and the next run keeps one).
Only a run that holds the output's lock calls it.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from evalpipe.errors import ResumeConflict
from evalpipe.output.manifest import MANIFEST, read_manifest
from evalpipe.output.outdir import SAMPLE, part_name, part_names, sequence, superseded
from evalpipe.output.table import SAMPLE_WEIGHT, schema_json, with_sample_weight
from evalpipe.stores import Folder, Location


class SampleFile:
    """An output's sample: `read` and `write` its `_sample.json`, `ready` the output for it."""

    def __init__(self, location: Location) -> None:
        self.location = location

    def read(self) -> dict[str, Any] | None:
        return read_sample(self.location)

    def write(self, document: dict[str, Any]) -> None:
        write_sample(self.location, document)

    def ready(self, schema: pa.Schema, fingerprint: str) -> pa.Schema:
        return make_sampled(self.location, schema, fingerprint)


def read_sample(location: Location) -> dict[str, Any] | None:
    """The output's `_sample.json`, None when it holds no sample (or the file is unreadable:
    the sample then starts anew)."""
    try:
        raw = Folder(location).read_bytes(SAMPLE)
        found = orjson.loads(raw) if raw is not None else None
    except (OSError, orjson.JSONDecodeError):
        return None
    return found if isinstance(found, dict) else None


def write_sample(location: Location, document: dict[str, Any]) -> None:
    """`document` as the output's `_sample.json` (atomically)."""
    data = orjson.dumps(document, option=orjson.OPT_INDENT_2, default=str)
    Folder(location).write_bytes(SAMPLE, data)


def make_sampled(location: Location, schema: pa.Schema, fingerprint: str) -> pa.Schema:
    """The schema of a sampled output of this job (`schema` with `_sample_weight`); the parts
    of its unsampled output (a full run's), if any, get the column (null) first. An output of
    another job (or schema) is left as it is: the run's own checks refuse it, with their
    message."""
    out = Folder(location)
    sampled = with_sample_weight(schema)
    manifest = read_manifest(out)
    if not part_names(out) or manifest is None or manifest.get("fingerprint") != fingerprint:
        return sampled
    if manifest.get("schema") == schema_json(schema):  # not sampled yet
        id_field = schema.field(0)
        ids = pa.array([], id_field.type)
        weigh(location, schema, pa.table({id_field.name: ids, "w": pa.array([], pa.float64())}))
    return sampled


def weigh(location: Location, schema: pa.Schema, weights: pa.Table) -> int:
    """Set `_sample_weight` in every part from `weights` (id, weight; ids not in it get
    null), adding the column to parts written without it; the manifest's schema and part list
    follow. `schema`: the job's, with or without the column. Returns the parts rewritten."""
    out = Folder(location)
    schema = with_sample_weight(schema)
    names = part_names(out)
    old = set(superseded(out, names))
    rewritten, parts = 0, {}
    for name in names:
        if name in old:
            out.delete(name)
            continue
        table = out.read_table(name)
        new = _weighted(table, schema, weights)
        if new is None:
            parts[name] = table.num_rows
            continue
        fresh = part_name(sequence(name), uuid.uuid4().hex)
        out.write_parquet(fresh, new)
        out.delete(name)
        parts[fresh] = new.num_rows
        rewritten += 1
    out.sync()
    _manifest_follows(out, schema, parts)
    return rewritten


def _weighted(table: pa.Table, schema: pa.Schema, weights: pa.Table) -> pa.Table | None:
    """The part with its weights from `weights`; None when they are what it holds."""
    ids = table.column(0)
    at = pc.index_in(ids, value_set=weights.column(0).cast(ids.type))
    found = pc.take(weights.column(1).cast(pa.float64()), at)
    if SAMPLE_WEIGHT in table.schema.names:
        held = table.column(SAMPLE_WEIGHT)
        equal = pc.fill_null(pc.equal(held, found), False)
        agree = pc.or_(equal, pc.and_(pc.is_null(held), pc.is_null(found)))
        if pc.all(agree).as_py():
            return None
        table = table.drop_columns([SAMPLE_WEIGHT])
    table = table.append_column(SAMPLE_WEIGHT, found)
    return table.cast(schema).replace_schema_metadata(schema.metadata)


def _manifest_follows(out: Folder, schema: pa.Schema, parts: dict[str, int]) -> None:
    """The manifest's schema and parts as they are now (its runs and summary unchanged)."""
    manifest = read_manifest(out)
    if manifest is None:
        raise ResumeConflict(f"output dir '{out.shown}' has parts but no {MANIFEST}")
    manifest["schema"] = schema_json(schema)
    manifest["parts"] = [{"name": n, "rows": r} for n, r in sorted(parts.items())]
    manifest["rows"] = sum(parts.values())
    out.write_bytes(MANIFEST, orjson.dumps(manifest, option=orjson.OPT_INDENT_2, default=str))
