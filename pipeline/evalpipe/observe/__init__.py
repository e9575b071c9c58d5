"""What an operator watches while a nightly run runs: Prometheus metrics (served and pushed),
OpenTelemetry metrics and a trace over OTLP, OpenLineage events (a run's, and the corrected
shares `evalpipe infer --record` keeps); each only when asked for.

The job's counters are the one bookkeeping (`evalpipe.engine.progress`); this package reads samples
of them (`Sample`) through one list of metric definitions (`METRICS`), which the docs list too.
"""

from evalpipe.observe.corrected import tell_corrected
from evalpipe.observe.lineage import Datasets, canary_facet, dataset_id, schema_facet
from evalpipe.observe.metrics import METRICS, Metric, RunFacts, Sample
from evalpipe.observe.telemetry import Telemetry

__all__ = [
    "METRICS",
    "Datasets",
    "Metric",
    "RunFacts",
    "Sample",
    "Telemetry",
    "canary_facet",
    "dataset_id",
    "schema_facet",
    "tell_corrected",
]
