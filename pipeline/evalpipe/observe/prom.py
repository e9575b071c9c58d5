"""Prometheus, two ways, with `prometheus_client`: `/metrics` served while the run lasts, and
pushes to a Pushgateway (at the start, every few seconds, at the end) for runs too short to be
scraped.

Both read one `Reading` through a custom collector (prometheus_client's pattern for values
counted elsewhere): the job's counters are the only bookkeeping, and each scrape or push shows
their last sample. The registry is the run's own, not the process's global one, so two runs
of one process (the Python API) never clash, and nothing but the run's metrics is exported.
Pushes go out on a thread of their own: a slow Pushgateway never holds up the driver. An
https:// Pushgateway is trusted as the service is (`evalpipe.stores.tls_context`: SSL_CERT_FILE,
SSL_CERT_DIR, else certifi's bundle); proxies as urllib reads them (HTTPS_PROXY, NO_PROXY).
"""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, push_to_gateway, start_http_server
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from evalpipe.observe.metrics import METRICS, Reading
from evalpipe.stores import tls_context

PUSH_TIMEOUT = 5.0  # seconds one push may take


class _ReadingCollector(Collector):
    """`METRICS` as they read now."""

    def __init__(self, reading: Reading, lock: threading.Lock) -> None:
        self._reading, self._lock = reading, lock

    def collect(self) -> Iterator[Metric]:
        with self._lock:  # a consistent reading: the driver adds samples under this lock
            found = [(m, m.values(self._reading)) for m in METRICS]
        for metric, values in found:
            family: CounterMetricFamily | GaugeMetricFamily
            if metric.kind == "counter":
                family = CounterMetricFamily(metric.name, metric.help, labels=metric.labels)
            else:
                family = GaugeMetricFamily(metric.name, metric.help, labels=metric.labels)
            for labels, value in values:
                family.add_metric([labels[name] for name in metric.labels], value)
            yield family


def registry_of(reading: Reading, lock: threading.Lock) -> CollectorRegistry:
    """A registry of the run's own that exports `reading`."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_ReadingCollector(reading, lock))
    return registry


class MetricsServer:
    """`/metrics` on `host:port` (port 0: a free one, `port` says which) until `close`."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        self._server: Any
        self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        self.port: int = self._server.server_port

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _trusting(
    url: str, method: str, timeout: float | None, headers: Sequence[tuple[str, str]], data: bytes
) -> Callable[[], None]:
    """prometheus_client's push handler, with the TLS trust of the service's client."""

    def handle() -> None:
        request = urllib.request.Request(url, data=data, method=method, headers=dict(headers))
        opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=tls_context()))
        with opener.open(request, timeout=timeout):  # an HTTP error status raises
            pass

    return handle


class Pusher:
    """Pushes the registry to a Pushgateway, grouped by `job` and `output`, from a thread of
    its own: at once, again when woken (`soon`: the run's first counts are in), every `seconds`,
    and a last time at `close`. A failed push is said once (`warn`) and tried again at the next
    turn."""

    def __init__(
        self,
        registry: CollectorRegistry,
        gateway: str,
        job: str,
        output: str,
        seconds: float,
        warn: Callable[[str], None],
    ) -> None:
        self._registry, self._gateway, self._seconds = registry, gateway, seconds
        self._job, self._group = job, {"output": output}
        self._warn, self.failures = warn, 0
        self._stop, self._wake = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._loop, name="evalpipe-push", daemon=True)
        self._thread.start()

    def push(self) -> bool:
        try:
            push_to_gateway(
                self._gateway, self._job, self._registry, self._group,
                timeout=PUSH_TIMEOUT, handler=_trusting,
            )  # fmt: skip
        except Exception as exc:  # unreachable, refused, an HTTP error: the run goes on
            self.failures += 1
            if self.failures == 1:
                self._warn(
                    f"metrics.pushgateway: pushing to {self._gateway} failed ({exc}); "
                    "the run goes on and tries again"
                )
            return False
        return True

    def soon(self) -> None:
        """Push now (on the pusher's thread), not at the next turn."""
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.push()
            self._wake.wait(self._seconds)
            self._wake.clear()

    def close(self) -> None:
        """The last push, with the run's end in it."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=PUSH_TIMEOUT + 1)
        self.push()
