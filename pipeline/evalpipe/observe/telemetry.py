"""A run's telemetry in one object: what the config and the environment ask for, started with
the run and ended with it.

The runner makes one `Telemetry` per run, feeds it samples of the job's counters (`update`),
wraps its phases (`phase`) and ends it once (`close`) with how the run ended. Behind it, each
only when asked for: `/metrics` (`metrics.port`), Pushgateway pushes (`metrics.pushgateway`),
OTLP metrics and a trace (`OTEL_EXPORTER_OTLP_*`, `evalpipe.observe.otel`), OpenLineage events
(`OPENLINEAGE_URL` or the client's config, `evalpipe.observe.lineage`). Asked for nothing, it
imports nothing and costs a lock per sample.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from evalpipe.config import MetricsConfig
from evalpipe.errors import ConfigError
from evalpipe.observe import lineage, otel
from evalpipe.observe.metrics import Reading, RunFacts, Sample
from evalpipe.stores import scrubbed


class Telemetry:
    """See the module docstring. `warn` takes one-line warnings; `say` a line and the URL
    where the metrics are served."""

    def __init__(
        self,
        run: RunFacts,
        settings: MetricsConfig,
        datasets: lineage.Datasets | None = None,
        warn: Callable[[str], None] = lambda _: None,
        say: Callable[[str, str], None] = lambda text, url: None,
    ) -> None:
        self.reading = Reading(run)
        self._lock = threading.Lock()
        self._closed = False
        self._server: Any = None
        self._pusher: Any = None
        self._otel: otel.Otel | None = None
        self._lineage: lineage.Lineage | None = None
        try:
            self._start_prometheus(settings, warn, say)
            self._start_otel(settings, warn)
            if datasets is not None and lineage.configured():
                self._lineage = lineage.Lineage(run.run_id, run.job, datasets, warn)
                self._lineage.start()
        except BaseException:
            self.close("failed")
            raise

    @property
    def url(self) -> str | None:
        """Where `/metrics` is served (None: it is not)."""
        return None if self._server is None else f"http://{self._host}:{self._server.port}/metrics"

    def _start_prometheus(
        self,
        settings: MetricsConfig,
        warn: Callable[[str], None],
        say: Callable[[str, str], None],
    ) -> None:
        if settings.port is None and settings.pushgateway is None:
            return
        from evalpipe.observe import prom

        registry = prom.registry_of(self.reading, self._lock)
        if settings.port is not None:
            try:
                self._server = prom.MetricsServer(registry, settings.host, settings.port)
            except OSError as exc:
                raise ConfigError(
                    f"metrics.port: cannot serve metrics on {settings.host}:{settings.port} "
                    f"({exc.strerror or exc}); choose another port (--metrics-port)"
                ) from None
            self._host = "127.0.0.1" if settings.host in ("0.0.0.0", "") else settings.host
            say(f"Metrics: {self.url} (while the run lasts)", str(self.url))
        if settings.pushgateway is not None:
            run = self.reading.run
            self._pusher = prom.Pusher(
                registry, settings.pushgateway, run.job, run.output, settings.push_seconds, warn,
                _gateway_auth(settings),
            )  # fmt: skip

    def _start_otel(self, settings: MetricsConfig, warn: Callable[[str], None]) -> None:
        want = otel.wanted()
        if not want:
            return
        missing = otel.missing_extra()
        if missing is not None:
            warn(
                f"{otel.ENDPOINT} (or a metrics/traces variant) is set, but the OpenTelemetry "
                f"exporters are not installed ({missing}): nothing is exported; {otel.EXTRA}"
            )
            return
        run = self.reading.run
        attributes = {"evalpipe.run_id": run.run_id, "evalpipe.job": run.job,
                      "evalpipe.output": run.output, "evalpipe.model": run.model}  # fmt: skip
        self._otel = otel.Otel(want, self.reading, self._lock, settings.push_seconds, attributes)
        if self._otel.note:
            warn(self._otel.note)

    def update(self, sample: Sample) -> None:
        """The job's counts now (the driver calls this a few times a second; the first time
        once the run knows what it has to do, which is pushed at once)."""
        with self._lock:
            first = self.reading.sample is None
            self.reading.add(sample)
        if first and self._pusher is not None:
            self._pusher.soon()

    def canary(self, result: dict[str, Any]) -> None:
        """The canary's result (`evalpipe.preflight.check_canary`): its metrics from now on
        (pushed at once), and a facet of the run's last lineage event."""
        with self._lock:
            self.reading.canary = result
        if self._pusher is not None:
            self._pusher.soon()

    def begin(self, phase: str) -> None:
        """The run's next phase (`plan`, `canary`, `calibrate`, `send`, `finish`) begins, and
        the one before it ends: a span of the run's trace each."""
        if self._otel is not None:
            self._otel.begin(phase)

    def close(
        self,
        state: str,
        sample: Sample | None = None,
        committed: int | None = None,
        error: BaseException | None = None,
    ) -> None:
        """The run ended (`finished`, `stopped` or `failed`): a last push and export, the
        lineage's end event, the server stopped. Once; later calls do nothing."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            if sample is not None:
                self.reading.add(sample)
            self.reading.state, self.reading.ended_unix = state, time.time()
        ends = (
            self._end_pushes,
            lambda: self._end_otel(state, error, committed),
            lambda: self._end_lineage(state, committed, error),
            self._end_server,
        )
        for end in ends:
            with contextlib.suppress(Exception):  # one exporter's trouble never hides another's
                end()

    def _end_pushes(self) -> None:
        if self._pusher is not None:
            self._pusher.close()

    def _end_otel(self, state: str, error: BaseException | None, committed: int | None) -> None:
        if self._otel is not None:
            self._otel.close(state, error, self._figures(committed))

    def _end_lineage(self, state: str, committed: int | None, error: BaseException | None) -> None:
        if self._lineage is not None:
            self._lineage.end(state, committed, _said(error), self.reading.canary)

    def _end_server(self) -> None:
        if self._server is not None:
            self._server.close()

    def _figures(self, committed: int | None) -> dict[str, Any]:
        s = self.reading.sample
        figures: dict[str, Any] = {} if committed is None else {"rows_committed": committed}
        if s is not None:
            figures.update(rows_total=s.rows_total, rows_done=s.rows_done,
                           input_tokens=s.input_tokens, requests=s.requests_answered)  # fmt: skip
        return figures


def _said(error: BaseException | None) -> str | None:
    if error is None:
        return None
    return scrubbed(f"{type(error).__name__}: {error}")


def _gateway_auth(settings: MetricsConfig) -> tuple[str, str] | None:
    """The Pushgateway's basic-auth user and password (from the variable the config names)."""
    user, variable = settings.pushgateway_user, settings.pushgateway_password_env
    if user is None:
        return None
    password = os.environ.get(variable) if variable else ""
    if password is None:
        raise ConfigError(
            f"metrics.pushgateway_password_env: the variable {variable} is not set; export "
            "the Pushgateway's password in it"
        )
    return user, password
