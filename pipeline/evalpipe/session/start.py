"""The start-up sequence of every command and call that runs a job, written once.

`evalpipe run`, `evalpipe estimate` and the Python API (`ep.score`, `Job.run`) start a job the
same way, in the same order, so that each refuses what it must before anything is sent:

    tier         the shared tier (`shared.url`), if any, asked once: one that refuses us is
                 exit 2 (`evalpipe.tier.Tier.of`), before the corpus is read
    prepare      every check that needs no service (exit 2): `evalpipe.planning.prepare`
    lock         one run per output: `evalpipe.output.hold` (a second run exits 2 at once),
                 and with a tier the output's lease in it (`evalpipe.output.leased`)
    contact      the service started (embedded) and probed in the background while the job
                 starts Ray; a remote service that refuses at once is reported before Ray
                 (`evalpipe.send.Connection.fail_fast`)
    run          the engine (`evalpipe.engine.run_job`), handed how many rows go in a request
                 (`evalpipe.preflight.choose_packing`, measured first for `packing.rows: auto`)
                 and the canary to ask before the corpus (`evalpipe.preflight.check_canary`,
                 with `canary.labels`: once per session, a run that fails it sends nothing)
    keep         a finished run's night kept by its format, the output still held (a Delta
                 table's: compacted, checkpointed, its retention applied: `Format.keep`)

    with opened(config, log) as session:
        outcome = session.run(restart=True, stop=stop)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from evalpipe.config import JobConfig
from evalpipe.engine import EventLog, Outcome, run_job
from evalpipe.errors import EvalpipeError
from evalpipe.input import Selection
from evalpipe.output import output_format, output_held
from evalpipe.planning import PreparedJob, prepare
from evalpipe.preflight import check_canary, choose_packing, read_canary
from evalpipe.send import Connection
from evalpipe.stores import shown
from evalpipe.tier import Tier


@dataclass
class Session:
    """A prepared job whose output this process holds and whose service it contacted."""

    prepared: PreparedJob
    connection: Connection
    log: EventLog
    canary_asked: bool = False  # the canary is asked before the session's first run only

    def run(self, prepared: PreparedJob | None = None, **options: Any) -> Outcome:
        """Run the session's job (or `prepared`: the same job on other rows) to its end;
        `options` are `evalpipe.engine.run_job`'s."""
        job = prepared or self.prepared
        ready = self.connection.ready
        packing = functools.partial(choose_packing, job, ready, self.log.warning)
        canary = None  # a job without a canary has no canary phase at all
        if not self.canary_asked and job.config.canary.labels is not None:
            self.canary_asked = True
            rows = read_canary(job)
            canary = functools.partial(check_canary, job, ready, warn=self.log.warning, rows=rows)
        outcome = run_job(job, ready, packing, log=self.log, canary=canary, **options)
        if outcome.ended_how == "finished":
            self._keep(job, outcome)
        return outcome

    def _keep(self, job: PreparedJob, outcome: Outcome) -> None:
        """The night just committed kept by its format, the output still held
        (`output.maintain`; a Delta table's night compacted, a checkpoint, the retention);
        its figures go in the summary. A failure is a warning: the run's rows are committed."""
        output = job.config.output
        if not output.maintain:
            return
        self.log.emit("maintain")  # the JSON log's event; the summary says what was done
        try:
            kept = output_format(output.format).keep(
                output.path, [output.partition], retention_days=output.retention_days,
                z_order=output.z_order,
            )  # fmt: skip
        except EvalpipeError as exc:
            self.log.warning(str(exc))
            return
        if kept is not None:
            outcome.summary["maintenance"] = kept


@contextmanager
def opened(
    job: JobConfig | PreparedJob,
    log: EventLog,
    rows: Selection | None = None,
    *,
    held: Callable[[PreparedJob], None] | None = None,
    keep_service: bool = False,
) -> Iterator[Session]:
    """The job of a config prepared (or a job prepared already, by a caller with checks of its
    own to make before the output is touched), its warnings said on `log`, its output held and
    its service contacted, for the length of the block. `rows`: a few rows to try first
    (`--limit`, `--sample`). `held` is told once the output is held and the contact begun,
    before a remote service's early refusal is waited for (`evalpipe run`'s start event).
    `keep_service`: an embedded service is kept for the process's next job of the same settings
    (the Python API's calls; `evalpipe.send.Connection`)."""
    # `prepare` resolves the job's tier first: one that refuses us is said before the corpus
    # is read; its address is handed down from here as a value (`PreparedJob.tier`).
    prepared = job if isinstance(job, PreparedJob) else prepare(job, rows)
    tier = prepared.tier
    if tier is not None:
        Tier.of(tier, log.warning)  # the tier's warnings, on the run's log
    config = prepared.config
    for warning in prepared.warnings:
        log.warning(warning)
    output = config.output.path
    with (
        output_held(
            output, config.output.staging, shown(output), tier, config.shared.lease_seconds
        ),
        Connection(config.service, config.limits, keep_service) as connection,
    ):
        if held is not None:
            held(prepared)
        connection.fail_fast()
        yield Session(prepared, connection, log)
