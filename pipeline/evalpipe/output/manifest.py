"""`_manifest.json`: what an output directory holds, for whom, and the history of its runs.

A reader (a person, the report, a scheduler's check) learns from it which job wrote the output
(fingerprint, schema), which parts it has, and how each run on it went: `runs` lists every run
with its start, its end and how it ended (`finished`, `stopped`, `failed`, or `interrupted` for
a run killed before it could say, found so by the next run), and its summary; the top-level
`summary` is the latest run's, as in older outputs, which have no `runs`.

The manifest is a description, never the truth about rows: on resume the parts on disk win
(the sink rebuilds the part list), so a kill between a part's commit and the manifest's rewrite
loses nothing. It is rewritten whole and atomically.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import orjson

from evalpipe.errors import InputError, ResumeConflict, first_line
from evalpipe.output.columns import SCHEMA_VERSION

if TYPE_CHECKING:
    from evalpipe.stores import Folder

MANIFEST = "_manifest.json"
MANIFEST_FORMAT = 2  # 2: `runs`, and the lineage columns in the schema
Ending = Literal["finished", "stopped", "failed"]  # how a run can end itself
INTERRUPTED = "interrupted"  # a run that never wrote its end, as the next run finds it


def now() -> str:
    """The manifest's time stamps: UTC, ISO 8601, whole seconds."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def read_manifest(out: Folder, reader: bool = False) -> dict[str, Any] | None:
    """The manifest as stored, None if there is none. One that cannot be used is one line:
    for a run about to write (the default) a ResumeConflict saying how to start over, also
    when a newer evalpipe wrote it; for a `reader` of the output an InputError."""
    try:
        data = out.read_bytes(MANIFEST)
        if data is None:
            return None
        manifest = orjson.loads(data)
        reason = None if isinstance(manifest, dict) else "not a JSON object"
    except (OSError, orjson.JSONDecodeError) as exc:
        reason = first_line(exc)
    if reason is not None and reader:
        raise InputError(f"'{out.shown_name(MANIFEST)}' cannot be read: {reason}")
    if reason is not None:
        raise ResumeConflict(
            f"output dir '{out.shown}' has an unreadable {MANIFEST} ({reason}); use --restart "
            "to start over or choose another output.path"
        )
    newer = isinstance(manifest.get("format"), int) and manifest["format"] > MANIFEST_FORMAT
    if newer and not reader:
        raise ResumeConflict(
            f"output dir '{out.shown}' was written by a newer evalpipe ({MANIFEST} format "
            f"{manifest['format']}); upgrade, use --restart, or choose another output.path"
        )
    return dict(manifest)


@dataclass
class Manifest:
    """The manifest of one output directory, as the sink keeps it while a run is on."""

    fingerprint: str
    schema: list[dict[str, str]]
    created: str = field(default_factory=now)
    parts: dict[str, int] = field(default_factory=dict)  # part name -> rows
    runs: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] | None = None  # the latest run's that recorded one
    finished: str | None = None  # when the latest run ended as `finished`
    provenance: dict[str, str] = field(default_factory=dict)  # the latest run's (begin_run)
    fence: int = 0  # with a shared tier: the largest fencing token a commit carried (0: none)

    @classmethod
    def carry_on(cls, stored: dict[str, Any] | None, fingerprint: str, schema: Any) -> Manifest:
        """The manifest of a resumed output (`stored`, already checked to be this job's), or
        of a fresh one (None)."""
        if stored is None:
            return cls(fingerprint, schema)
        parts = {p["name"]: p["rows"] for p in stored.get("parts") or []}
        runs = [dict(run) for run in stored.get("runs") or []]
        created = stored.get("created") or now()
        manifest = cls(fingerprint, schema, created, parts, runs, stored.get("summary"))
        manifest.fence = fence_of(stored)
        return manifest

    def begin_run(self, run_id: str, provenance: Mapping[str, str] | None = None) -> None:
        """Record a run's start, with its provenance (evalpipe's version, the hash of the
        effective config); runs that never recorded their end were interrupted."""
        for run in self.runs:
            if run.get("ended_how") is None:
                run["ended_how"] = INTERRUPTED
        self.runs.append(
            {"run_id": run_id, "started": now(), **(provenance or {}), "ended": None,
             "ended_how": None, "summary": None}
        )  # fmt: skip
        self.provenance = dict(provenance or {})
        self.finished = None

    def end_run(self, run_id: str, how: Ending, summary: dict[str, Any]) -> None:
        """Record how run `run_id` ended, and its summary."""
        ended = now()
        for run in self.runs:
            if run.get("run_id") == run_id:
                run.update(ended=ended, ended_how=how, summary=summary)
        self.summary = summary
        self.finished = ended if how == "finished" else None

    def write(self, out: Folder) -> None:
        manifest = {
            "format": MANIFEST_FORMAT,
            "schema_version": SCHEMA_VERSION,
            "fingerprint": self.fingerprint,
            "created": self.created,
            "updated": now(),
            "finished": self.finished,
            **self.provenance,
            "schema": self.schema,
            "rows": sum(self.parts.values()),
            "parts": [{"name": n, "rows": r} for n, r in sorted(self.parts.items())],
            "runs": self.runs,
            "summary": self.summary,
        }
        if self.fence:  # only where a shared tier's lease held the output
            manifest["fence"] = self.fence
        out.write_bytes(MANIFEST, orjson.dumps(manifest, option=orjson.OPT_INDENT_2, default=str))


def fence_of(stored: Mapping[str, Any] | None) -> int:
    """The fencing token a stored manifest records (0: none, as without a shared tier)."""
    found = (stored or {}).get("fence")
    return found if isinstance(found, int) and not isinstance(found, bool) else 0
