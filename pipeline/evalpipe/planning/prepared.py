"""A job made ready: every check that needs no service, done before anything is sent.

Both `evalpipe plan` and `evalpipe run` start here, so a bad config, a missing column, a
duplicate id or an output column that would be made twice is refused the same way by both,
with exit code 2, before a single request.

It is also where a job's shared tier (`shared.url`) is resolved, once: its address (the URL,
the password's variable, the account's key prefix) is made here, the tier asked first (one that
refuses us is said before the corpus is read), and the address handed down as a value,
`PreparedJob.tier`, to whatever the session runs: the engine, the cache, the account's pace, the
output's lease, the measurements before a run (as the packing choice is handed to the engine).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from evalpipe.calibration import Calibration
from evalpipe.config import JobConfig
from evalpipe.contract import canonical, question_dicts, question_warnings
from evalpipe.errors import ConfigError
from evalpipe.input import Selection, Source, SourceSpec
from evalpipe.output import output_schema
from evalpipe.planning.repeats import state_key
from evalpipe.planning.requests import Planner, Request
from evalpipe.planning.trusted import job_calibration
from evalpipe.stores import Location, is_uri
from evalpipe.tier import Tier, TierAddress, job_address


@dataclass
class PreparedJob:
    """A validated job, ready to run or to plan."""

    config: JobConfig
    source: Source
    questions: dict[str, dict[str, Any]]  # the questions as the service takes them
    planner: Planner
    warnings: list[str]
    schema: pa.Schema  # the output table's
    calibration: Calibration | None = None  # `calibration.file`, checked, thresholds chosen
    tier: TierAddress | None = None  # the shared tier (`shared.url`), resolved by `prepare`

    def calibration_shown(self) -> dict[str, Any] | None:
        """The calibration as a run's summary shows it: the file, and each question's method,
        held-out figures and abstention (the promise, its threshold and bound)."""
        found = self.calibration
        if found is None:
            return None
        questions = {
            key: {"method": q.method, "rows": q.rows, "held_out": q.held_out,
                  "abstain": None if q.abstain is None else q.abstain.shown()}
            for key, q in found.questions.items()
        }  # fmt: skip
        return {"file": found.name, "model": found.model, "fitted": found.fitted,
                "questions": questions}  # fmt: skip

    def questions_digest(self) -> str:
        """A digest of the questions as sent: what a kept packing measurement was made with."""
        return hashlib.blake2b(canonical(self.questions), digest_size=8).hexdigest()

    def sample(self, n: int, whole: bool = False) -> Iterator[tuple[Any, Request]]:
        """The corpus's first `n` distinct states, each with the first request its plan makes;
        `whole`: only states whose every question goes in that one request (rows a pack can
        take). What the token calibration and the packing measurement ask."""
        seen: set[bytes] = set()
        for batch in self.source.batches():
            for row in batch:
                if row.state is None or (key := state_key(row.state)) in seen:
                    continue
                requests = self.planner.plan(row.state).requests
                if not requests or (
                    whole and (len(requests) > 1 or len(requests[0].keys) < len(self.questions))
                ):
                    continue
                seen.add(key)
                yield row.state, requests[0]
                if len(seen) >= n:
                    return


EMBEDDED_NOTE = (
    "service.base_url is 'embedded': the answers come from evalpipe's reference service, "
    "made-up numbers for demos and tests, not from an evaluation service"
)


def prepare(config: JobConfig, rows: Selection | None = None) -> PreparedJob:
    """Every check that needs no service: raises UsageError subclasses (exit 2). `rows`
    keeps a few rows to try first (`--limit`, `--sample`). The job's shared tier is resolved
    and asked first (module docstring): ConfigError (exit 2) if it refuses us."""
    tier = job_address(config)  # the one place a job's tier is resolved
    if tier is not None:
        Tier.of(tier)  # its warnings wait for the run's log (`Tier.of` with one)
    warnings = question_warnings(config.parsed_questions)
    if config.service.is_embedded:
        warnings.insert(0, EMBEDDED_NOTE)
    _check_output(config.output.path)
    if config.model_is_alias:
        warnings.append(
            f"model: {config.model!r} is an alias; answers can change when it moves. "
            "Pin a versioned ID (e.g. model-1.13.0) for scheduled jobs."
        )
    spec = SourceSpec(
        path=config.input.path,
        id_column=config.input.id_column,
        state=config.input.state,
        batch_rows=config.input.batch_rows,
        rows=rows,
    )
    source = Source(spec)
    source.check_unique_ids()
    calibration = job_calibration(config, warnings)
    # Built here so a column-name collision is found by `plan` as well as by `run`.
    schema = output_schema(
        config.input.id_column, source.id_type, config.parsed_questions, config.service.identity,
        calibration,
    )  # fmt: skip
    questions = question_dicts(config.parsed_questions)
    planner = Planner(questions)
    return PreparedJob(config, source, questions, planner, warnings, schema, calibration, tier)


def _check_output(path: Location) -> None:
    """A local output.path that is a file (a Parquet file, a table written elsewhere) is
    refused before anything is sent or written."""
    if not is_uri(path) and Path(path).exists() and not Path(path).is_dir():
        raise ConfigError(f"output.path: {path} is a file; name a folder for the output table")
