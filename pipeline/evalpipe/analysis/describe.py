"""`evalpipe describe OUTPUT`: the data dictionary of an output, read from its own files.

The descriptions are the ones the writer put in the Parquet field metadata
(`evalpipe.output.columns`), so what this prints is what the table says of itself, for any
output, local or on an object store. A table written before schema version 2 has no
descriptions; its columns are listed with a note saying so. The columns a calibration added
(`calibration.file`) are tagged with their role: `calibrated`, `abstain`. Where `evalpipe infer
--record` kept the corpus's shares corrected by labels, they are listed too (`corrected`).
"""

from __future__ import annotations

import textwrap
from typing import Any

from evalpipe.output import describe, schema_version
from evalpipe.reading import open_output

NO_DESCRIPTION = "(no description: written with schema version 1, see the schema changelog)"


def data_dictionary(location: str) -> dict[str, Any]:
    """The output's dictionary: its schema version, id column, rows and every column."""
    out = open_output(location)
    schema, manifest, shown = out.schema, out.manifest, out.shown
    columns = describe(schema)
    for column in columns:
        column["description"] = column["description"] or NO_DESCRIPTION
    return {
        "output": shown,
        "schema_version": schema_version(schema),
        "id_column": schema.names[0],
        "rows": (manifest or {}).get("rows"),
        "columns": columns,
        "corrected": _corrected(out.corrected),
    }


def _corrected(document: dict[str, Any] | None) -> dict[str, Any] | None:
    """What `evalpipe infer --record` kept: when, from which labels, and each estimate."""
    if not document:
        return None
    keep = ("question", "what", "of", "group", "estimate", "low", "high", "judge", "labels")
    return {
        "recorded_at": document.get("recorded_at"), "labels": document.get("labels"),
        "confidence": document.get("confidence"), "by": document.get("by"),
        "estimates": [{k: e.get(k) for k in keep} for e in document.get("estimates", [])
                      if e.get("estimate") is not None],
    }  # fmt: skip


def render(dictionary: dict[str, Any], width: int = 100) -> str:
    """The dictionary as text for a terminal: one block per column."""
    head = (
        f"{dictionary['output']}: schema version {dictionary['schema_version']}, id column "
        f"'{dictionary['id_column']}', {len(dictionary['columns'])} columns"
    )
    if dictionary["rows"] is not None:
        head += f", {dictionary['rows']:,} rows"
    lines = [head, ""]
    for column in dictionary["columns"]:
        label = f"  [label: {column['label']!r}]" if column["label"] is not None else ""
        role = f"  [{column['role']}]" if column.get("role") else ""  # a calibration's column
        lines.append(f"{column['column']}  ({column['type']}){label}{role}")
        body = textwrap.wrap(column["description"], width=width - 4)
        lines.extend(f"    {line}" for line in body)
    corrected = dictionary.get("corrected")
    if corrected:
        when, source = corrected["recorded_at"], corrected["labels"]
        level = f"{corrected['confidence']:.0%}"
        lines += ["", f"corrected shares (evalpipe infer, {when}, labels {source}, {level}):"]
        for e in corrected["estimates"]:
            group = f" [{e['group']}]" if e.get("group") is not None else ""
            lines.append(
                f"  {e['question']} {e['what']} {e['of']}{group}: {e['estimate']:.3f} "
                f"[{e['low']:.3f}, {e['high']:.3f}], judge {e['judge']:.3f}, {e['labels']} labels"
            )
    return "\n".join(lines)
