"""OpenLineage: which corpus produced which table, told to the catalog a data team runs.

When `OPENLINEAGE_URL` is set (or the `openlineage-python` client's own config: an
`openlineage.yml` where the client looks for one, `OPENLINEAGE_CONFIG`, or `OPENLINEAGE__...`
variables; `OPENLINEAGE_DISABLED=true` turns it off), a run emits a START event as it starts and
a COMPLETE, ABORT (stopped by a signal) or FAIL event as it ends, through that client. Each names:

- the job: its namespace (`OPENLINEAGE_NAMESPACE`, else `evalpipe`) and the config's `name`;
- the run: a UUID derived from evalpipe's run id (`uuid5(NAMESPACE_URL, "evalpipe:" + run id)`);
- with a canary (`canary.labels`), its result as the last event's run facet `evalpipe_canary`;
- the corpus as the input dataset and the output table as the output dataset, each with a
  schema facet, and the row counts (the corpus's rows; the table's rows at the end). A dataset's
  namespace is its URI's scheme and authority (`s3://bucket`), its name the path in it; a
  local path is in the namespace `file`, by its absolute path (OpenLineage's naming spec).

The client posts with `requests`, which never reads SSL_CERT_FILE: with SSL_CERT_FILE or
SSL_CERT_DIR set, its HTTP transport is handed those CAs, added to the CA its own config names
(or REQUESTS_CA_BUNDLE), as the service's client trusts them (`evalpipe.stores.requests_verify`);
a transport told not to verify is left so. Proxies: the variables requests reads (HTTPS_PROXY,
NO_PROXY).

A catalog that cannot be reached never fails the run: it is said once, as a warning.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa

from evalpipe.stores import Location, is_uri, requests_verify, scrubbed

DESCRIPTION = b"description"  # a field's description in Arrow metadata (evalpipe.output)
PRODUCER = "https://pypi.org/project/evalpipe/"


def configured(env: Mapping[str, str] | None = None) -> bool:
    """Whether OpenLineage is set up for this process (see the module docstring)."""
    env = os.environ if env is None else env
    if env.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OPENLINEAGE_URL") or any(k.startswith("OPENLINEAGE__TRANSPORT") for k in env):
        return True
    files = (env.get("OPENLINEAGE_CONFIG"), "openlineage.yml",
             Path.home() / ".openlineage" / "openlineage.yml")  # fmt: skip
    return any(f and Path(f).is_file() for f in files)


def dataset_id(location: Location) -> tuple[str, str]:
    """(namespace, name) of a dataset at `location`, as OpenLineage's naming spec has it."""
    if is_uri(location):  # never a user or password in a namespace (evalpipe.stores.urls)
        parts = urlsplit(scrubbed(str(location)))
        return f"{parts.scheme}://{parts.netloc}", parts.path.lstrip("/") or "/"
    return "file", str(Path(location).absolute())


def run_uuid(run_id: str) -> str:
    """The OpenLineage run id (a UUID) of evalpipe's run `run_id`: the same for every event."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"evalpipe:{run_id}"))


@dataclass(frozen=True)
class Datasets:
    """The run's input and output, with their schemas and the corpus's rows."""

    input: Location
    input_schema: pa.Schema
    input_rows: int
    output: Location
    output_schema: pa.Schema


def schema_facet(schema: pa.Schema) -> Any:
    """OpenLineage's schema facet of `schema`: each field's name, type, place and description."""
    from openlineage.client.facet_v2 import schema_dataset

    fields = []
    for position, f in enumerate(schema, start=1):
        described = (f.metadata or {}).get(DESCRIPTION)
        fields.append(
            schema_dataset.SchemaDatasetFacetFields(
                name=f.name,
                type=str(f.type),
                description=described.decode() if described else None,
                ordinal_position=position,
            )
        )
    return schema_dataset.SchemaDatasetFacet(fields=fields)


@contextlib.contextmanager
def _environment_kept() -> Iterator[None]:
    """The client copies `OPENLINEAGE_URL` into `OPENLINEAGE__TRANSPORT__...` variables of the
    process as it starts; they are taken back, so the process's environment stays as it was."""
    before = dict(os.environ)
    try:
        yield
    finally:
        for name in set(os.environ) - set(before):
            del os.environ[name]
        os.environ.update(before)


def _trust(transport: Any) -> None:
    """Hand an HTTP transport (or each of a composite's) the CAs the service's client trusts."""
    for each in [transport, *getattr(transport, "transports", [])]:
        verify = getattr(each, "verify", False)
        if verify is False:  # not an HTTP transport, or one told not to verify
            continue
        bundle = requests_verify(verify if isinstance(verify, str) else None)
        if bundle is not None:
            each.verify = bundle


class Lineage:
    """The run's OpenLineage events (see the module docstring)."""

    def __init__(
        self, run_id: str, job: str, datasets: Datasets, warn: Callable[[str], None]
    ) -> None:
        from openlineage.client import OpenLineageClient

        with _environment_kept():
            self._client = OpenLineageClient()
        _trust(self._client.transport)
        self._run, self._job, self._datasets = run_uuid(run_id), job, datasets
        self._namespace = os.environ.get("OPENLINEAGE_NAMESPACE", "evalpipe")
        self._warn, self._failed = warn, False

    def _event(
        self, state: str, committed: int | None = None, error: str | None = None,
        canary: dict[str, Any] | None = None,
    ) -> Any:  # fmt: skip
        from openlineage.client.event_v2 import (
            InputDataset,
            Job,
            OutputDataset,
            Run,
            RunEvent,
            RunState,
        )
        from openlineage.client.facet_v2 import (
            error_message_run,
            input_statistics_input_dataset,
            job_type_job,
            output_statistics_output_dataset,
            processing_engine_run,
        )

        d = self._datasets
        run_facets: dict[str, Any] = {
            "processing_engine": processing_engine_run.ProcessingEngineRunFacet(
                version=_version("evalpipe"), name="evalpipe",
                openlineageAdapterVersion=_version("openlineage-python"),
            )
        }  # fmt: skip
        if error is not None:
            run_facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
                message=scrubbed(error), programmingLanguage="python"
            )
        if canary is not None:
            run_facets["evalpipe_canary"] = canary_facet(canary)
        job_facets: dict[str, Any] = {
            "jobType": job_type_job.JobTypeJobFacet(
                processingType="BATCH", integration="EVALPIPE", jobType="JOB"
            )
        }
        in_ns, in_name = dataset_id(d.input)
        out_ns, out_name = dataset_id(d.output)
        in_schema, out_schema = schema_facet(d.input_schema), schema_facet(d.output_schema)
        stats = input_statistics_input_dataset.InputStatisticsInputDatasetFacet(d.input_rows)
        out_facets: dict[str, Any] = {}
        if committed is not None:
            out_facets["outputStatistics"] = (
                output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(committed)
            )
        return RunEvent(
            eventType=getattr(RunState, state),
            eventTime=datetime.now(UTC).isoformat(),
            run=Run(runId=self._run, facets=run_facets),
            job=Job(namespace=self._namespace, name=self._job, facets=job_facets),
            inputs=[InputDataset(in_ns, in_name, facets={"schema": in_schema},
                                 inputFacets={"inputStatistics": stats})],
            outputs=[OutputDataset(out_ns, out_name, facets={"schema": out_schema},
                                   outputFacets=out_facets)],
            producer=PRODUCER,
        )  # fmt: skip

    def _emit(self, event: Any) -> None:
        try:
            self._client.emit(event)
        except Exception as exc:  # the catalog is down or refuses: the run goes on
            if not self._failed:
                self._failed = True
                said = scrubbed(str(exc))  # a client's error may quote its URL
                self._warn(f"OpenLineage: an event could not be emitted ({said}); the run goes on")

    def start(self) -> None:
        self._emit(self._event("START"))

    def end(
        self, state: str, committed: int | None, error: str | None = None,
        canary: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        """COMPLETE (finished), ABORT (stopped) or FAIL (failed), then the client closed; with
        the canary's result as the run facet `evalpipe_canary`."""
        kind = {"finished": "COMPLETE", "stopped": "ABORT"}.get(state, "FAIL")
        self._emit(self._event(kind, committed, error, canary))
        with contextlib.suppress(Exception):
            self._client.close(5.0)


def canary_facet(canary: dict[str, Any]) -> Any:
    """The canary's result as a custom run facet (its figures as the facet's properties): the
    run's own events' `evalpipe_canary`, or a scheduler's (`evalpipe.airflow`)."""
    from openlineage.client.generated.base import RunFacet

    shown = {k: canary[k] for k in ("passed", "rows", "answered", "compared_with", "tests")}
    return RunFacet(producer=PRODUCER).with_additional_properties(**shown)


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
