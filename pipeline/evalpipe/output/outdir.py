"""The output folder's file names, and the checks made before a run writes into it.

Which files in `output.path` are ours (parts, the journal, the manifest, the temporary files a kill
leaves) is decided here once, so that a --restart deletes our files and nothing else, a resume finds
every part, and a folder that holds somebody else's Parquet (which readers would take as rows) or
another job's output is refused before anything is written. The folder is a
`evalpipe.stores.location.Folder`: a local directory or an object-store prefix. The journal is a
local file: in the output directory, or in the staging folder of an object-store output.

A part's name carries its sequence number. A resume that cuts rows out of a part writes the
rows it keeps as a new part with the same sequence number, then deletes the old one (no file
is ever rewritten or renamed in place: objects cannot be). A kill in between leaves both:
`superseded` finds them, and the one with fewer rows is the cut (a cut only removes rows).
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from evalpipe.errors import ConfigError, ResumeConflict, first_line
from evalpipe.output.manifest import MANIFEST
from evalpipe.output.table import schema_json
from evalpipe.stores import Folder, Location, as_folder, local_dir, temp_pattern

JOURNAL = "_journal.bin"
SAMPLE = "_sample.json"  # `evalpipe estimate`'s design and last estimates (`output.sampled`)
_PART = re.compile(r"^part-(\d{5,})-[0-9a-f]{32}\.parquet$")
_TEMP = temp_pattern(r"part-\d{5,}-[0-9a-f]{32}\.parquet|_manifest\.json|_journal\.bin")
_SHOWN_FILES = 5


def journal_name(partition: Mapping[str, str] | None = None) -> str:
    """The journal's file name; a Delta table's partitions each have their own."""
    if not partition:
        return JOURNAL
    digest = hashlib.blake2b(orjson.dumps(dict(sorted(partition.items()))), digest_size=6)
    return f"_journal-{digest.hexdigest()}.bin"


def journal_path(
    out: Folder, staging: Path | None = None, partition: Mapping[str, str] | None = None
) -> Path:
    """Where the journal of output `out` (of its `partition`) is: in it when it is local, else
    in its staging folder under `staging` (see `stores.staging_dir`)."""
    return local_dir(out.location, staging) / journal_name(partition)


def remove_journal_temps(journal: Path) -> None:
    """What a kill during a journal's atomic creation left beside it."""
    pattern = temp_pattern(re.escape(journal.name))
    if journal.parent.is_dir():
        for path in journal.parent.iterdir():
            if pattern.match(path.name):
                path.unlink(missing_ok=True)


def part_name(sequence: int, unique: str) -> str:
    """A part's file name: its sequence number, then a 32-hex-digit unique part."""
    return f"part-{sequence:05d}-{unique}.parquet"


def sequence(name: str) -> int:
    """The sequence number of the part named `name`."""
    match = _PART.match(name)
    assert match is not None, name
    return int(match.group(1))


def is_part(name: str) -> bool:
    """Whether `name` is a part's file name."""
    return _PART.match(name) is not None


def part_names(out: Folder | Location) -> list[str]:
    """The parts in `out`, in sequence order."""
    return [name for name in as_folder(out).names() if _PART.match(name)]


def superseded(out: Folder, names: list[str]) -> list[str]:
    """Parts that a cut killed before it deleted them: of the parts sharing a sequence number,
    all but the one with the fewest rows."""
    by_sequence: dict[int, list[str]] = defaultdict(list)
    for name in names:
        by_sequence[sequence(name)].append(name)
    old = []
    for group in by_sequence.values():
        if len(group) > 1:
            rows = {name: out.num_rows(name) for name in group}
            keep = min(group, key=lambda name: (rows[name], name))
            old += [name for name in group if name != keep]
    return sorted(old)


def remove_temp_files(out: Folder) -> int:
    """Delete what killed atomic writes left behind; returns how many."""
    removed = 0
    for name in out.names():
        if _TEMP.match(name):
            out.delete(name)
            removed += 1
    return removed


def make_dir(out: Folder) -> None:
    try:
        out.create()
    except FileExistsError:
        raise ConfigError(f"output.path '{out.shown}' exists and is not a directory") from None
    except OSError as exc:
        reason = first_line(exc)
        raise ConfigError(f"output.path '{out.shown}' cannot be created: {reason}") from None


def refuse_foreign_parquet(out: Folder) -> None:
    """Readers take every *.parquet in the folder as rows: someone else's would mix in (another
    format's output is refused before, by `evalpipe.output.formats`)."""
    names = out.names()
    foreign = [
        name
        for name in names
        if name.lower().endswith(".parquet")
        and not name.startswith(("_", "."))
        and not _PART.match(name)
    ]
    if foreign:
        shown = ", ".join(foreign[:_SHOWN_FILES]) + (", ..." if len(foreign) > _SHOWN_FILES else "")
        raise ConfigError(
            f"output.path '{out.shown}' holds Parquet files this tool did not write "
            f"({shown}); move them away or choose another output.path"
        )


def check_resumable(
    out: Folder, journal: Path, manifest: dict[str, Any] | None, fingerprint: str, schema: pa.Schema
) -> None:
    """ResumeConflict unless `out` is empty of output or holds this job's (its manifest)."""
    if manifest is None:
        if part_names(out) or journal.exists():
            raise ResumeConflict(
                f"output dir '{out.shown}' holds output files but no {MANIFEST}, so its config "
                "is unknown; use --restart to start over or choose another output.path"
            )
        return
    if manifest.get("fingerprint") != fingerprint:
        raise ResumeConflict(
            f"output dir '{out.shown}' was written by a job with a different config "
            "(questions, model or state mapping); use --restart to start over or choose "
            "another output.path"
        )
    if manifest.get("schema") != schema_json(schema):
        raise ResumeConflict(
            f"output dir '{out.shown}' was written with another output schema (by an older "
            "evalpipe, or the id column's type changed); use --restart to start over or "
            "choose another output.path"
        )


def clear(out: Folder, journal: Path) -> None:
    """--restart: delete our own files only; anything else in the folder stays."""
    journal.unlink(missing_ok=True)
    for name in out.names():
        if _PART.match(name) or _TEMP.match(name) or name in (MANIFEST, JOURNAL, SAMPLE):
            out.delete(name)
    out.sync()
