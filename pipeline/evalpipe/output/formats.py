"""The output's formats behind one door: the one registration of every format, and the one place
that chooses among them, for writing and reading alike.

A format is one module (a package for a large one) filling `evalpipe.output.format.Format`;
`FORMATS` registers it. Everything else asks here, by the name `output.format` gives
(`output_format`) or by what is found at a path (`stored_at`), and never names a format:

    sink (a run writes)      `open_committer(name, ...)`: another format's output in the folder
                             is refused, then the format's committer opened
    reading (every reader)   `stored_at(location)`: the output a location names, in its format
    a scheduled run          `output_format(name).partitioned` and `.version(path)`

To add a format (Iceberg): write its module beside `parquet.py` and `delta/` (its `Format`, a
`Committer`, a `Stored`), add it to `FORMATS`, and add its name (and its settings) to the job
config's `output` section (`evalpipe.config.OutputConfig`); tests/test_formats.py checks that the
config and the door agree and that nothing outside the door names a format.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from evalpipe.errors import ConfigError
from evalpipe.output.committer import Committer
from evalpipe.output.delta import DELTA
from evalpipe.output.format import Format, Stored
from evalpipe.output.iceberg import ICEBERG
from evalpipe.output.outdir import make_dir
from evalpipe.output.parquet import PARQUET
from evalpipe.output.space import opening
from evalpipe.stores import Folder, Location

# The one registration. `stored_at` asks them in this order: Parquet, which takes any folder, last.
FORMATS: tuple[Format, ...] = (DELTA, ICEBERG, PARQUET)
_NAMED = {f.name: f for f in FORMATS}


def output_format(name: str) -> Format:
    """The format `output.format` names; ConfigError (one line) for one not registered."""
    found = _NAMED.get(name)
    if found is None:
        known = ", ".join(_NAMED)
        raise ConfigError(f"output.format: '{name}' is not a format evalpipe writes ({known})")
    return found


def open_committer(
    name: str, out: Folder, journal: Path, schema: pa.Schema, fingerprint: str, *, run_id: str,
    partition: Mapping[str, str], restart: bool, part_rows: int,
    provenance: Mapping[str, str] | None, settings: Mapping[str, Any] | None = None,
) -> Committer:  # fmt: skip
    """Format `name`'s output in `out` (created if need be) for run `run_id` (`Format.open`);
    ConfigError, before anything is written, if the folder holds another format's output."""
    chosen = output_format(name)
    with opening(out, journal):
        make_dir(out)
        names = out.names()
        for other in FORMATS:
            if other is not chosen and other.holds(names):
                raise ConfigError(
                    f"output.path '{out.shown}' holds {other.what} (output.format: {other.name}); "
                    f"set output.format: {other.name} to write into it, or choose another "
                    "output.path"
                )
    return chosen.open(
        out, journal, schema, fingerprint, run_id=run_id, partition=partition, restart=restart,
        part_rows=part_rows, provenance=provenance, settings=settings,
    )  # fmt: skip


def stored_at(location: Location) -> Stored:
    """The output `location` names, in the format found there (nothing is read yet: its
    `schema` opens it); InputError if a URI carries credentials or cannot be a place."""
    for candidate in FORMATS:
        found = candidate.find(location)
        if found is not None:
            return found
    raise AssertionError("the Parquet format takes any folder")  # pragma: no cover
