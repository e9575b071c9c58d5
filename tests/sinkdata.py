"""Rows, a schema and a whole run for the output tests (test_table, test_journal, test_sink).

A run here goes through the Sink's real path (open, resume, append, finish) into real Parquet,
as the runner drives it; the tests read the directory back with polars or pyarrow.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pyarrow as pa

from evalpipe.contract.resources import validate_questions
from evalpipe.output.manifest import MANIFEST
from evalpipe.output.resume import ResumeState
from evalpipe.output.sink import Sink
from evalpipe.output.table import RowResult, output_schema

QUESTIONS = validate_questions(
    {
        "helpful": {"type": "noul", "instructions": "Is it helpful?"},
        "sentiment": {
            "type": "choice",
            "instructions": "Which sentiment?",
            "criteria": {"positive": None, "negative": "unhappy", "mixed": None},
        },
        "quality": {"type": "score", "instructions": "Rate it.", "criteria": ["poor", "ok"]},
    }
)
SCHEMA = output_schema("review_id", pa.int64(), QUESTIONS)
SCORED_AT = 1_763_900_000.0  # 2025-11-23, seconds since the epoch


def answers(p: float = 0.75) -> dict[str, Any]:
    """Answer dicts as the service returns them (extra fields like legend are ignored)."""
    return {
        "helpful": {"type": "noul", "noul": p},
        "sentiment": {
            "type": "choice",
            "choice": "positive",
            "probabilities": {"positive": p, "negative": (1 - p) / 2, "mixed": (1 - p) / 2},
            "confidence": p / 3,
        },
        "quality": {
            "type": "score",
            "score": 1 - p,
            "legend": {"0": "poor", "1": "ok"},
            "probabilities": {"0": p, "1": 1 - p},
            "confidence": p / 7,
        },
    }


def digest(row_id: int, version: int = 0) -> bytes:
    """A state digest, as `source.state_key` makes one (16 bytes)."""
    return hashlib.blake2b(f"state {row_id} v{version}".encode(), digest_size=16).digest()


def answered(row_id: int, p: float = 0.75, version: int = 0) -> RowResult:
    return RowResult(
        row_id, answers(p), "model-1.13.0", 120,
        scored_at=SCORED_AT + row_id, state_hash=digest(row_id, version),
    )  # fmt: skip


def failed(row_id: int, error_type: str = "network") -> RowResult:
    state = None if error_type == "invalid_state" else digest(row_id)
    return RowResult(
        row_id, None, None, None, error_type, f"{error_type} happened",
        scored_at=SCORED_AT + row_id, state_hash=state,
    )  # fmt: skip


def run(
    out: Path,
    rows: Sequence[RowResult],
    *,
    run_id: str = "run-1",
    fingerprint: str = "fp",
    stale: pa.Array | None = None,
    ended_how: Any = "finished",
    **settings: Any,
) -> ResumeState:
    """One whole run into `out`, as the runner drives the Sink; returns what its resume did."""
    settings.setdefault("write_seconds", 0)
    sink = Sink.open(out, SCHEMA, fingerprint, run_id=run_id, **settings)
    state = sink.resume(stale)
    sink.append(rows)
    sink.close()
    sink.finish({"rows": len(rows)}, ended_how)
    return state


def table_of(out: Path) -> pl.DataFrame:
    return pl.scan_parquet(out / "part-*.parquet").collect().sort("review_id")


def part_files(out: Path) -> list[str]:
    return sorted(p.name for p in out.glob("part-*.parquet"))


def manifest_of(out: Path) -> dict[str, Any]:
    manifest: dict[str, Any] = orjson.loads((out / MANIFEST).read_bytes())
    return manifest
