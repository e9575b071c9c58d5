"""OpenTelemetry: the run's metrics and one trace per run, over OTLP (http/protobuf), when the
standard variables ask for them.

`OTEL_EXPORTER_OTLP_ENDPOINT` (a collector's base URL, e.g. `http://collector:4318`) turns on
both; `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (full URLs)
one each. The exporters read the other standard variables themselves (headers, timeout,
compression, certificates; `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`);
`OTEL_SDK_DISABLED=true`, or `OTEL_METRICS_EXPORTER` / `OTEL_TRACES_EXPORTER` set to `none`,
turn them off. Nothing is exported when no endpoint is set.

The metrics are `evalpipe.observe.metrics.METRICS`, as observable instruments read at each
export (every `metrics.push_seconds`, unless `OTEL_METRIC_EXPORT_INTERVAL` says otherwise, and
once more at the end). The trace has a root span, `evalpipe run`, and a child span per phase
of the run (`plan`, `calibrate`, `send`, `finish`), not one per request.

The exporters trust what the service's client trusts: with SSL_CERT_FILE or SSL_CERT_DIR set,
they are handed those CAs (`evalpipe.stores.requests_verify`), added to the certificate that
`OTEL_EXPORTER_OTLP[_METRICS|_TRACES]_CERTIFICATE` (or requests' REQUESTS_CA_BUNDLE) names:
`requests`, under the exporters, never reads SSL_CERT_FILE itself.

The SDK and the exporter are an optional extra (`pip install 'evalpipe[otel]'`): without
them, a run whose variables ask for OTLP says so in one line and goes on. The providers are the
run's own (never the process's global ones), and end with the run.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from evalpipe.observe.metrics import METRICS, Metric, Reading
from evalpipe.stores import requests_verify

ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
METRICS_ENDPOINT = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
EXTRA = "pip install 'evalpipe[otel]'"
ROOT_SPAN = "evalpipe run"
_MODULES = (  # what the extra brings
    "opentelemetry.sdk.metrics",
    "opentelemetry.sdk.trace",
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
)


@dataclass(frozen=True)
class Wanted:
    """Which signals the environment asks to export over OTLP."""

    metrics: bool
    traces: bool

    def __bool__(self) -> bool:
        return self.metrics or self.traces


def wanted(env: Mapping[str, str] | None = None) -> Wanted:
    """What the standard variables in `env` (default: the process's) ask for."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return Wanted(False, False)

    def on(signal: str, endpoint: str) -> bool:
        chosen = env.get(f"OTEL_{signal}_EXPORTER", "otlp").strip().lower()
        return chosen != "none" and bool(env.get(ENDPOINT) or env.get(endpoint))

    return Wanted(on("METRICS", METRICS_ENDPOINT), on("TRACES", TRACES_ENDPOINT))


def missing_extra() -> str | None:
    """Why the exporters cannot be loaded (the extra is not installed), or None."""
    try:
        for module in _MODULES:
            importlib.import_module(module)
    except ImportError as exc:
        return str(exc)
    return None


def _trusting(signal: str) -> dict[str, Any]:
    """The exporter's TLS options for `signal` (none: its own choice, from its variables): a CA
    file of SSL_CERT_FILE's and SSL_CERT_DIR's CAs with those its own variable names, and a
    session that keeps it (`requests` lets REQUESTS_CA_BUNDLE replace a session's own `verify`,
    psf/requests#3829, and the exporter sets its CA on the session)."""
    own = os.environ.get(f"OTEL_EXPORTER_OTLP_{signal}_CERTIFICATE")
    certificate = requests_verify(own or os.environ.get("OTEL_EXPORTER_OTLP_CERTIFICATE"))
    if certificate is None:
        return {}
    return {"certificate_file": certificate, "session": _session()}


def _session() -> Any:
    import requests

    class KeepsItsCA(requests.Session):
        def merge_environment_settings(self, url: Any, proxies: Any, stream: Any, verify: Any,
                                       cert: Any) -> Any:  # fmt: skip
            settings = super().merge_environment_settings(url, proxies, stream, verify, cert)
            if verify is None and isinstance(self.verify, str):  # the session's CA, not the env's
                settings["verify"] = self.verify
            return settings

    return KeepsItsCA()


def _protocol_note(env: Mapping[str, str]) -> str | None:
    names = ("OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
             "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")  # fmt: skip
    for name in names:
        value = env.get(name, "http/protobuf").strip().lower()
        if value != "http/protobuf":
            return (
                f"{name}={value}: evalpipe exports OTLP over http/protobuf only; the endpoint "
                "must be the collector's HTTP one (port 4318 by default)"
            )
    return None


class Otel:
    """The run's OTLP exporters: observable metrics over `reading`, and the run's trace."""

    def __init__(
        self,
        want: Wanted,
        reading: Reading,
        lock: threading.Lock,
        interval_seconds: float,
        attributes: Mapping[str, str],
    ) -> None:
        from opentelemetry.sdk.resources import Resource

        resource = Resource.create(dict(attributes))
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": "evalpipe"}))
        self.note = _protocol_note(os.environ)
        self._reading, self._lock = reading, lock
        self._meters: Any = None
        self._tracers: Any = None
        self._root: Any = None
        self._phase: Any = None
        if want.metrics:
            self._meters = self._meter_provider(resource, interval_seconds)
        if want.traces:
            self._start_trace(resource, attributes)

    def _meter_provider(self, resource: Any, seconds: float) -> Any:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        every = None if os.environ.get("OTEL_METRIC_EXPORT_INTERVAL") else seconds * 1000
        exporter = OTLPMetricExporter(**_trusting("METRICS"))
        reader = PeriodicExportingMetricReader(exporter, export_interval_millis=every)
        provider = MeterProvider(resource=resource, metric_readers=[reader])
        meter = provider.get_meter("evalpipe")
        for metric in METRICS:
            make = (
                meter.create_observable_counter
                if metric.kind == "counter"
                else meter.create_observable_gauge
            )
            make(metric.otel_name, [self._callback(metric)], metric.unit, metric.help)
        return provider

    def _callback(self, metric: Metric) -> Any:
        from opentelemetry.metrics import CallbackOptions, Observation

        def observe(options: CallbackOptions) -> Iterable[Observation]:
            with self._lock:
                values = metric.values(self._reading)
            return [Observation(value, labels) for labels, value in values]

        return observe

    def _start_trace(self, resource: Any, attributes: Mapping[str, str]) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        self._tracers = TracerProvider(resource=resource)
        exporter = OTLPSpanExporter(**_trusting("TRACES"))
        self._tracers.add_span_processor(BatchSpanProcessor(exporter))
        self._tracer = self._tracers.get_tracer("evalpipe")
        self._root = self._tracer.start_span(ROOT_SPAN, attributes=dict(attributes))

    def begin(self, phase: str) -> None:
        """End the current phase's span (if any) and start `phase`'s, a child of the run's
        (nothing without traces)."""
        if self._root is None:
            return
        from opentelemetry import trace

        self._end_phase(None)
        self._phase = self._tracer.start_span(phase, context=trace.set_span_in_context(self._root))

    def _end_phase(self, error: BaseException | None) -> None:
        if self._phase is None:
            return
        if error is not None:
            _failed(self._phase, error)
        self._phase.end()
        self._phase = None

    def close(self, state: str, error: BaseException | None, figures: Mapping[str, Any]) -> None:
        """End the trace (its state, the run's figures, the error) and export what is left."""
        if self._root is not None:
            self._end_phase(error)
            self._root.set_attribute("evalpipe.state", state)
            for key, value in figures.items():
                self._root.set_attribute(f"evalpipe.{key}", value)
            if error is not None:
                _failed(self._root, error)
            self._root.end()
            self._tracers.shutdown()
        if self._meters is not None:
            self._meters.shutdown()  # a last collection and export


def _failed(span: Any, error: BaseException) -> None:
    from opentelemetry import trace

    span.record_exception(error)
    span.set_status(trace.StatusCode.ERROR, f"{type(error).__name__}: {error}")
