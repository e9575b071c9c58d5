"""`EvalpipeOperator`: a job config run as an Airflow 3 task, whose retry resumes and never pays
twice.

The task runs `evalpipe run`'s own sequence in the worker (`evalpipe.session.run_scheduled`:
the one-run-per-output lock, the service's first contact, the engine, the exit codes) and
turns its end into what Airflow understands:

    0               success; the run's summary is the task's XCom (`return_value`)
    no retry mends  AirflowFailException, whatever `retries` says: the exit codes of
                    `evalpipe.errors.NO_RETRY_EXIT_CODES` (a bad config or input, a refused
                    key, the cost cap, the canary; too many rows in error, after the summary
                    is pushed: everything is written, the failure is the alert)
    any other       AirflowException: Airflow's retries apply, and a retry resumes (the
                    deadline, a signal, a full disk, a held output or a lost lease, a crash)

(`evalpipe.errors.retry_mends` decides; the docs' tables are made from it.) A retry resumes
because the output is named by the config and the templated partition alone, never by the
try: rows committed and journaled are skipped, so what a killed try paid for is paid once, but
for the requests in flight when it died. A SIGTERM from Airflow (a timeout, a task marked
failed) stops the run as it stops `evalpipe run`: the requests in flight finish within
`grace_seconds` and are kept.

The DAG file's import stays light: Airflow's DAG processor parses the file again and again
(every `min_file_process_interval`), so what only a run needs (`evalpipe.session`: the engine,
pyarrow's datasets, pandas; about a CPU-second a parse) is imported when the task runs.

Lineage is sent once: where Airflow's OpenLineage provider is installed and enabled, the run
sends no event of its own, and the operator hands the provider the corpus and the table, with
their schemas and row counts (`get_openlineage_facets_on_complete`); elsewhere the run's own
events are sent as `evalpipe run` sends them (`OPENLINEAGE_URL`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from evalpipe.engine import GRACE_SECONDS

if TYPE_CHECKING:
    from evalpipe.session import Ran, Scheduled


class EvalpipeOperator(BaseOperator):
    """Run (or resume) the job config at `config` as one task; its XCom is the run's summary.

    `overrides` are `--set` strings (`"input.path=s3://corpora/dt={{ ds }}/"`); `partition` the
    run's partition (`{"dt": "{{ ds }}"}`: a Delta table's `output.partition`, a folder per
    partition for Parquet); `max_cost`, `max_duration`, `deadline` and `max_error_rate` are
    `evalpipe run`'s guard rails; `ray_address` joins a Ray cluster instead of starting one in
    the worker. All but `grace_seconds` are templated."""

    template_fields: Sequence[str] = (
        "config", "overrides", "partition", "max_cost", "max_duration", "deadline",
        "max_error_rate", "ray_address",
    )  # fmt: skip
    ui_color = "#e8f0fe"

    def __init__(
        self,
        *,
        config: str | Path,
        overrides: Sequence[str] = (),
        partition: Mapping[str, str] | None = None,
        max_cost: float | str | None = None,
        max_duration: float | str | None = None,
        deadline: str | None = None,
        max_error_rate: float | str | None = None,
        ray_address: str | None = None,
        grace_seconds: float = GRACE_SECONDS,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.config = str(config)
        self.overrides = list(overrides)
        self.partition = dict(partition or {})
        self.max_cost = max_cost
        self.max_duration = max_duration
        self.deadline = deadline
        self.max_error_rate = max_error_rate
        self.ray_address = ray_address
        self.grace_seconds = grace_seconds
        self._ran: Ran | None = None

    def job(self) -> Scheduled:
        """The run this task makes, from its (rendered) fields."""
        from evalpipe.session import Scheduled

        return Scheduled(
            Path(self.config),
            tuple(self.overrides),
            {str(k): str(v) for k, v in self.partition.items()},
            max_cost=_number(self.max_cost),
            max_duration=self.max_duration or None,
            deadline=self.deadline or None,
            max_error_rate=_number(self.max_error_rate),
            ray_address=self.ray_address or None,
            grace_seconds=self.grace_seconds,
            lineage=not airflow_sends_lineage(),
        )

    def execute(self, context: Any) -> dict[str, Any] | None:
        from evalpipe.session import run_scheduled

        ran = self._ran = run_scheduled(self.job())
        if ran.exit_code == 0:
            return ran.summary
        if ran.summary is not None:  # the figures of a run that stopped: the XCom too
            context["ti"].xcom_push(key="return_value", value=ran.summary)
        if ran.retry:
            raise AirflowException(ran.message)
        raise AirflowFailException(ran.message)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The run's datasets for Airflow's OpenLineage provider (it sends the events)."""
        return self._lineage()

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        return self._lineage()

    def _lineage(self) -> Any:
        from airflow.providers.openlineage.extractors import OperatorLineage
        from openlineage.client.event_v2 import InputDataset, OutputDataset
        from openlineage.client.facet_v2 import (
            input_statistics_input_dataset as input_stats,
            output_statistics_output_dataset as output_stats,
        )

        from evalpipe.observe import canary_facet, dataset_id, schema_facet

        ran = self._ran
        if ran is None or ran.datasets is None:  # it failed before the job was read
            return OperatorLineage()
        d = ran.datasets
        read = input_stats.InputStatisticsInputDatasetFacet(rowCount=d.input_rows)
        corpus = InputDataset(*dataset_id(d.input), facets={"schema": schema_facet(d.input_schema)},
                              inputFacets={"inputStatistics": read})  # fmt: skip
        written: dict[str, Any] = {}
        if ran.rows_committed is not None:
            written["outputStatistics"] = output_stats.OutputStatisticsOutputDatasetFacet(
                rowCount=ran.rows_committed
            )
        schema = {"schema": schema_facet(d.output_schema)}
        table = OutputDataset(*dataset_id(d.output), facets=schema, outputFacets=written)
        canary = (ran.summary or {}).get("canary")
        facets = {"evalpipe_canary": canary_facet(canary)} if canary else {}
        return OperatorLineage(inputs=[corpus], outputs=[table], run_facets=facets)


def airflow_sends_lineage() -> bool:
    """Whether Airflow's OpenLineage provider is installed and enabled in this worker: then it
    sends the task's events, and the run sends none of its own."""
    try:
        from airflow.providers.openlineage.conf import is_disabled
    except ImportError:
        return False
    return not is_disabled()


def _number(value: float | str | None) -> float | None:
    """A templated number (rendered as text), or None when it is unset or empty."""
    if value is None or value == "":
        return None
    return float(value)
