"""OpenLineage for the corpus's shares corrected by labels (`evalpipe infer --record`): where
they were computed, told to the catalog a data team runs, beside the runs that wrote the table.

When OpenLineage is configured (as for a run: `evalpipe.observe.lineage`), recording the
estimates emits one COMPLETE event of a job of its own, named `infer:` and the table's dataset
name, in `OPENLINEAGE_NAMESPACE` (else `evalpipe`): its inputs are the output table (with its
schema facet) and the labels file, and its run facet `evalpipe_corrected` holds the estimates
(per question and answer: the corrected estimate, its interval, the judge's figure, the labels)
with the confidence and the labelled rows. A catalog that cannot be reached fails nothing: it
is said once, as a warning.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from evalpipe.observe.lineage import (
    PRODUCER,
    _environment_kept,
    _trust,
    configured,
    dataset_id,
    schema_facet,
)
from evalpipe.stores import scrubbed

SHOWN = ("question", "what", "of", "group", "estimate", "low", "high", "judge", "labels")


def corrected_facet(document: dict[str, Any]) -> Any:
    """`evalpipe infer`'s document as the custom run facet `evalpipe_corrected`."""
    from openlineage.client.generated.base import RunFacet

    estimates = [{k: e.get(k) for k in SHOWN} for e in document.get("estimates", [])
                 if e.get("estimate") is not None]  # fmt: skip
    return RunFacet(producer=PRODUCER).with_additional_properties(
        confidence=document.get("confidence"), labelled_rows=document.get("labelled_rows"),
        by=document.get("by"), estimates=estimates,
    )  # fmt: skip


def tell_corrected(
    output: str, schema: pa.Schema, labels: str, document: dict[str, Any],
    warn: Callable[[str], None],
) -> bool:  # fmt: skip
    """Emit the estimates' event (module docstring); False when OpenLineage is not set up."""
    if not configured():
        return False
    from openlineage.client import OpenLineageClient
    from openlineage.client.event_v2 import InputDataset, Job, Run, RunEvent, RunState

    out_ns, out_name = dataset_id(output)
    labels_ns, labels_name = dataset_id(labels)
    event = RunEvent(
        eventType=RunState.COMPLETE, eventTime=datetime.now(UTC).isoformat(),
        run=Run(runId=str(uuid.uuid4()), facets={"evalpipe_corrected": corrected_facet(document)}),
        job=Job(namespace=os.environ.get("OPENLINEAGE_NAMESPACE", "evalpipe"),
                name=f"infer:{out_name}"),
        inputs=[InputDataset(out_ns, out_name, facets={"schema": schema_facet(schema)}),
                InputDataset(labels_ns, labels_name)],
        outputs=[], producer=PRODUCER,
    )  # fmt: skip
    try:
        with _environment_kept():
            client = OpenLineageClient()
        _trust(client.transport)
        client.emit(event)
        client.close(5.0)
    except Exception as exc:  # the catalog is down or refuses: the estimates are kept anyway
        warn(f"OpenLineage: the estimates' event could not be emitted ({scrubbed(str(exc))})")
    return True
