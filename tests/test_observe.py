"""The run's telemetry (evalpipe.observe) against real receivers: Debian's Prometheus and
Pushgateway (session fixtures in conftest.py), `/metrics` read while a run runs, and loopback
HTTP servers of this module that decode OTLP (with opentelemetry-proto) and take OpenLineage
events, as a collector and a catalog would.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from conftest import CLIENT, cli_run, free_port, job_config, run_config
from evalpipe.config import MetricsConfig, parse_config
from evalpipe.engine.observed import sample
from evalpipe.engine.progress import Counters
from evalpipe.errors import ConfigError
from evalpipe.observe import METRICS, Datasets, RunFacts, Telemetry
from evalpipe.observe.lineage import configured, dataset_id, run_uuid
from evalpipe.observe.metrics import Reading
from evalpipe.observe.otel import wanted
from evalpipe.observe.prom import registry_of
from evalpipe.service import EmbeddedService
from netdoubles import POLL_SECONDS, Receiver

ROWS = 24


def corpus(tmp: Path, rows: int = ROWS) -> None:
    texts = [
        f"Review {i}: the zipper {'broke' if i % 3 else 'holds'} after {i} days."
        for i in range(rows)
    ]
    pq.write_table(pa.table({"id": list(range(rows)), "text": texts}), tmp / "in.parquet")


def eventually(check: Callable[[], Any], seconds: float = 30.0) -> Any:
    """`check()`'s first truthy value, polled (a server's view of what was sent catches up)."""
    deadline = time.monotonic() + seconds
    while True:
        found = check()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


# --------------------------------------------------------------------------- quick: definitions


def test_metric_names_follow_prometheus_conventions() -> None:
    names = [m.name for m in METRICS]
    assert len(set(names)) == len(names)
    for m in METRICS:
        assert m.name.startswith("evalpipe_"), m.name
        assert m.name.endswith("_total") == (m.kind == "counter"), m.name
        if m.unit == "s":
            assert "_seconds" in m.name, m.name
        if m.unit == "USD":
            assert "_dollars" in m.name, m.name
        assert m.help.strip() and m.otel_name == m.name.removesuffix("_total")


def _reading(c: Counters) -> Reading:
    run = RunFacts("r1", "nightly", "out/x", "model-1.13.0", "embedded", 1200, 250_000)
    reading = Reading(run)
    reading.add(sample(c))
    return reading


def test_the_counters_as_prometheus_reads_them() -> None:
    """One bookkeeping: the exposition is the job's Counters, by outcome and status."""
    c = Counters(rows_total=20, rows_skipped=2)
    c.rows_done, c.answered, c.rows_from_cache, c.reused = 15, 12, 3, 2
    c.errors.update({"rate_limited": 2, "invalid_state": 1})
    c.requests, c.requests_failed, c.refused_for_length = 10, 2, 1
    c.attempts, c.retries, c.rate_limited, c.input_tokens = 14, 4, 3, 5000
    c.questions_from_cache = 9
    text = _exposition(_reading(c))
    assert text[("evalpipe_rows_total", (("error_type", ""), ("outcome", "answered")))] == 7
    assert text[("evalpipe_rows_total", (("error_type", ""), ("outcome", "cached")))] == 3
    assert (
        text[("evalpipe_rows_total", (("error_type", "rate_limited"), ("outcome", "error")))] == 2
    )
    assert text[("evalpipe_requests_total", (("status", "answered"),))] == 7
    assert text[("evalpipe_requests_total", (("status", "failed"),))] == 2
    assert text[("evalpipe_rate_limited_total", ())] == 3
    assert text[("evalpipe_input_tokens_total", ())] == 5000
    assert text[("evalpipe_rows_left", ())] == 3
    assert text[("evalpipe_cache_hits_total", ())] == 9
    assert text[("evalpipe_requests_per_minute_limit", ())] == 1200
    assert ("evalpipe_spend_dollars_total", ()) not in text  # no price: no spend, not $0


def _exposition(reading: Reading) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client import generate_latest

    text = generate_latest(registry_of(reading, threading.Lock())).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if not s.name.endswith("_created")
    }


def test_cli_flags_are_the_config_keys(tmp_path: Path) -> None:
    from evalpipe.cli.main import _metrics_overrides
    from evalpipe.config.load import apply_overrides

    corpus(tmp_path)
    base = job_config(tmp_path, "embedded")
    data = apply_overrides(base, _metrics_overrides(9464, "http://gw.example:9091/"))
    config = parse_config(data)
    assert (config.metrics.port, config.metrics.pushgateway) == (9464, "http://gw.example:9091")
    with pytest.raises(ConfigError, match=r"^metrics\.pushgateway: "):
        parse_config({**base, "metrics": {"pushgateway": "not a url"}})


def test_a_port_in_use_is_a_config_error_naming_the_key() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        settings = MetricsConfig(port=port, host="127.0.0.1")
        run = RunFacts("r", "j", "o", "m", "s", 1, 1)
        with pytest.raises(ConfigError, match=r"^metrics\.port: .*--metrics-port"):
            Telemetry(run, settings)


def test_metrics_are_served_on_loopback_unless_a_host_is_given() -> None:
    """`/metrics` has no authentication: only this machine reaches it by default."""
    assert MetricsConfig().host == "127.0.0.1"
    watch = Telemetry(RunFacts("r", "j", "o", "m", "s", 1, 1), MetricsConfig(port=0))
    try:
        server = watch._server._server  # the http.server prometheus_client started
        assert server.server_address[0] == "127.0.0.1"
        assert watch.url is not None and watch.url.startswith("http://127.0.0.1:")
    finally:
        watch.close("finished")


class _Gateway(ThreadingHTTPServer):
    """A loopback stand-in for a Pushgateway behind basic auth: keeps each push's path and
    Authorization, answers 401 without the right one."""

    def __init__(self, expected: str) -> None:
        self.expected = expected
        self.pushes: list[tuple[str, str]] = []
        super().__init__(("127.0.0.1", 0), _GatewayHandler)
        threading.Thread(target=self.serve_forever, args=(POLL_SECONDS,), daemon=True).start()


class _GatewayHandler(BaseHTTPRequestHandler):
    server: _Gateway

    def do_PUT(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        said = self.headers.get("authorization", "")
        self.server.pushes.append((self.path, said))
        self.send_response(200 if said == self.server.expected else 401)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_the_pushgateway_password_comes_from_its_variable_never_from_the_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    password = "pushgateway-Pa55word-x"
    expected = "Basic " + base64.b64encode(f"nightly:{password}".encode()).decode()
    gateway = _Gateway(expected)
    run = RunFacts("r", "reviews", "/data/out", "m", "s", 1, 1)
    url = f"http://127.0.0.1:{gateway.server_address[1]}"
    settings = MetricsConfig(
        pushgateway=url, pushgateway_user="nightly", pushgateway_password_env="GW_PASSWORD"
    )
    with pytest.raises(ConfigError, match=r"^metrics\.pushgateway_password_env: .*GW_PASSWORD"):
        Telemetry(run, settings)
    monkeypatch.setenv("GW_PASSWORD", password)
    warnings: list[str] = []
    Telemetry(run, settings, warn=warnings.append).close("finished")
    assert gateway.pushes and {said for _, said in gateway.pushes} == {expected}
    assert warnings == []
    monkeypatch.setenv("GW_PASSWORD", "wrong-" + password)
    Telemetry(run, settings, warn=warnings.append).close("finished")
    gateway.shutdown()
    assert len(warnings) == 1 and "401" in warnings[0], warnings
    assert password not in warnings[0] and f"pushing to {url} failed" in warnings[0]


def test_what_the_standard_variables_turn_on() -> None:
    base = "http://127.0.0.1:4318"
    assert not wanted({})
    both = wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": base})
    assert (both.metrics, both.traces) == (True, True)
    only = wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": base + "/v1/traces"})
    assert (only.metrics, only.traces) == (False, True)
    assert not wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": base, "OTEL_SDK_DISABLED": "true"})
    off = wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": base, "OTEL_METRICS_EXPORTER": "none"})
    assert (off.metrics, off.traces) == (False, True)
    assert not configured({}) and configured({"OPENLINEAGE_URL": "http://x"})
    assert not configured({"OPENLINEAGE_URL": "http://x", "OPENLINEAGE_DISABLED": "true"})


def test_without_the_extra_one_line_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setitem(__import__("sys").modules, "opentelemetry.sdk.metrics", None)
    warnings: list[str] = []
    watch = Telemetry(
        RunFacts("r", "j", "o", "m", "s", 1, 1), MetricsConfig(), warn=warnings.append
    )
    watch.begin("plan")
    watch.close("finished")
    assert len(warnings) == 1 and "evalpipe[otel]" in warnings[0], warnings
    assert "\n" not in warnings[0]


def test_dataset_namespaces_from_the_uri(tmp_path: Path) -> None:
    assert dataset_id("s3://corpora/reviews/2026.parquet") == (
        "s3://corpora",
        "reviews/2026.parquet",
    )
    assert dataset_id("abfs://c@acct.dfs.core.windows.net/t") == (
        "abfs://c@acct.dfs.core.windows.net",
        "t",
    )
    assert dataset_id(tmp_path / "in.parquet") == ("file", str(tmp_path / "in.parquet"))
    assert run_uuid("20261127T020000Z-abc123") == run_uuid("20261127T020000Z-abc123")


# --------------------------------------------------------------------------- Prometheus


@pytest.mark.ray
def test_a_pushed_run_answers_a_promql_query(
    tmp_path: Path, ray_runtime: None, service: EmbeddedService, pushgateway: str, prometheus: str
) -> None:
    """`--pushgateway`: a run too short to be scraped is in Prometheus all the same, by job
    (the config file's name) and output."""
    corpus(tmp_path)
    config = tmp_path / "nightly-push.yaml"
    config.write_text(yaml.safe_dump(job_config(tmp_path, service.base_url)))
    cli_run(config, "--pushgateway", pushgateway)
    query = f'sum(evalpipe_rows_total{{job="nightly-push",output="{tmp_path / "out"}"}})'

    def rows() -> float | None:
        answer = CLIENT.get(f"{prometheus}/api/v1/query", params={"query": query}).json()
        result = answer["data"]["result"]
        return float(result[0]["value"][1]) if result else None

    assert eventually(lambda: rows() == ROWS), rows()
    state = httpx.get(f"{prometheus}/api/v1/query", params={
        "query": 'evalpipe_run_info{job="nightly-push"}'}).json()["data"]["result"]  # fmt: skip
    assert [r["metric"]["state"] for r in state] == ["finished"]


def test_pushes_at_the_start_and_at_the_end(pushgateway: str) -> None:
    """The first counts (what the run has to do) are pushed at once, before any answer; the
    end is pushed at `close`, however soon it comes (a push every hour would be too late)."""
    run = RunFacts("run-7", "pushed-at-start", "out/p", "model-1.13.0", "embedded", 60, 1000)
    settings = MetricsConfig(pushgateway=pushgateway, push_seconds=3600)
    watch = Telemetry(run, settings)
    counters = Counters(rows_total=40, rows_skipped=10)
    watch.update(sample(counters))

    def pushed() -> dict[str, float]:
        text = httpx.get(f"{pushgateway}/metrics").text
        return {
            f"{s.name}:{s.labels.get('state', '')}": s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.labels.get("job") == "pushed-at-start"
        }

    assert eventually(lambda: pushed().get("evalpipe_rows_left:") == 30), pushed()
    assert pushed()["evalpipe_run_info:running"] == 1
    counters.rows_done = counters.answered = 30
    watch.close("finished", sample(counters), committed=40)
    after = pushed()  # at once: close pushes before it returns
    assert after["evalpipe_rows_left:"] == 0 and after["evalpipe_run_info:finished"] == 1
    assert "evalpipe_run_info:running" not in after  # the group holds the last push only


@pytest.mark.ray
def test_metrics_grow_while_the_run_runs(tmp_path: Path, ray_runtime: None) -> None:
    """`--metrics-port`: /metrics answers while a (slowed) run runs, its rows counted up as
    they finish; it is gone when the run ends."""
    corpus(tmp_path, 30)
    port = free_port()
    slow = job_config(
        tmp_path, "embedded", service={"latency": 0.1},
        concurrency={"actors": 1, "max_in_flight": 2},
    )  # fmt: skip
    config = tmp_path / "slow.yaml"
    config.write_text(yaml.safe_dump(slow))
    seen: list[float] = []
    done = threading.Event()

    def scrape() -> None:
        while not done.is_set():
            try:
                text = CLIENT.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
            except httpx.HTTPError:
                time.sleep(0.05)
                continue
            rows = [s.value for f in text_string_to_metric_families(text) for s in f.samples
                    if s.name == "evalpipe_rows_total"]  # fmt: skip
            seen.append(sum(rows))
            time.sleep(0.1)

    scraper = threading.Thread(target=scrape, daemon=True)
    scraper.start()
    try:
        result = cli_run(config, "--metrics-port", str(port))
    finally:
        done.set()
        scraper.join()
    assert f"Metrics: http://127.0.0.1:{port}/metrics" in result.output  # said where
    growing = [n for n in seen if 0 < n < 30]
    assert len(set(growing)) >= 2, seen  # several counts on the way up, not one jump
    assert seen == sorted(seen)  # counters only grow
    with pytest.raises(httpx.HTTPError):  # served while the run lasts, not after
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)


# --------------------------------------------------------------------------- OTLP and OpenLineage


def _lineage_variables() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("OPENLINEAGE")}


@pytest.fixture(scope="module")
def observed(
    tmp_path_factory: pytest.TempPathFactory, ray_runtime: None, service: EmbeddedService
) -> Iterator[dict[str, Any]]:
    """One run with OTLP and OpenLineage turned on by their standard variables, into receivers
    of this module; what they got. On the session's service (its account's Budget is made
    once for the session's jobs, not once a run)."""
    tmp = tmp_path_factory.mktemp("observed")
    corpus(tmp)
    otlp, catalog = Receiver(), Receiver()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.url)
        patch.setenv("OPENLINEAGE_URL", catalog.url)
        patch.setenv("OPENLINEAGE_NAMESPACE", "nightly-jobs")
        before = _lineage_variables()
        summary = run_config(job_config(tmp, service.base_url, name="reviews-nightly"))
        after = _lineage_variables()
    yield {"tmp": tmp, "otlp": otlp, "catalog": catalog, "summary": summary,
           "environ_kept": before == after, "base_url": service.base_url}  # fmt: skip
    otlp.shutdown()
    catalog.shutdown()


@pytest.mark.ray
def test_an_otlp_receiver_gets_the_metrics_and_a_run_trace(observed: dict[str, Any]) -> None:
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    otlp: Receiver = observed["otlp"]
    last: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for body in otlp.bodies("/v1/metrics"):
        for rm in ExportMetricsServiceRequest.FromString(body).resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    points = m.sum.data_points if m.HasField("sum") else m.gauge.data_points
                    for p in points:
                        labels = tuple(sorted((a.key, a.value.string_value) for a in p.attributes))
                        last[(m.name, labels)] = p.as_int or p.as_double
    answered = (("error_type", ""), ("outcome", "answered"))
    assert last[("evalpipe_rows", answered)] == ROWS, sorted(last)[:10]
    assert last[("evalpipe_input_tokens", ())] == observed["summary"]["input_tokens"] > 0

    spans = [
        span
        for body in otlp.bodies("/v1/traces")
        for rs in ExportTraceServiceRequest.FromString(body).resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    ]
    (root,) = [s for s in spans if s.name == "evalpipe run"]
    phases = sorted(
        (s for s in spans if s.parent_span_id == root.span_id), key=lambda s: s.start_time_unix_nano
    )
    assert [s.name for s in phases] == ["plan", "calibrate", "send", "finish"]
    assert all(s.trace_id == root.trace_id for s in phases)
    attributes = {a.key: a.value for a in root.attributes}
    assert attributes["evalpipe.state"].string_value == "finished"
    assert attributes["evalpipe.job"].string_value == "reviews-nightly"


@pytest.mark.ray
def test_an_openlineage_receiver_gets_start_and_complete(observed: dict[str, Any]) -> None:
    tmp: Path = observed["tmp"]
    events = [json.loads(body) for body in observed["catalog"].bodies("/api/v1/lineage")]
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"]
    start, complete = events
    assert start["run"]["runId"] == complete["run"]["runId"]
    assert complete["job"] == {
        **complete["job"],
        "namespace": "nightly-jobs",
        "name": "reviews-nightly",
    }
    (source,), (table,) = complete["inputs"], complete["outputs"]
    assert (source["namespace"], source["name"]) == ("file", str(tmp / "in.parquet"))
    assert (table["namespace"], table["name"]) == ("file", str(tmp / "out"))
    assert [f["name"] for f in source["facets"]["schema"]["fields"]] == ["id", "text"]
    columns = [f["name"] for f in table["facets"]["schema"]["fields"]]
    assert columns[0] == "id" and "_run_id" in columns and "helpful__p_true" in columns
    assert source["inputFacets"]["inputStatistics"]["rowCount"] == ROWS
    assert table["outputFacets"]["outputStatistics"]["rowCount"] == ROWS
    assert observed["environ_kept"]  # the client's OPENLINEAGE__ copies were taken back


@pytest.mark.ray
def test_a_run_that_fails_tells_the_catalog(
    observed: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run refused on the way (another model into the same output: ResumeConflict) ends
    its lineage with FAIL and the error, not with silence."""
    from evalpipe.errors import ResumeConflict

    catalog = Receiver()
    monkeypatch.setenv("OPENLINEAGE_URL", catalog.url)
    changed = job_config(
        observed["tmp"], observed["base_url"], name="reviews-nightly", model="model-latest"
    )
    with pytest.raises(ResumeConflict):
        run_config(changed)
    catalog.shutdown()
    events = [json.loads(body) for body in catalog.bodies("/api/v1/lineage")]
    assert [e["eventType"] for e in events] == ["START", "FAIL"]
    assert events[1]["run"]["facets"]["errorMessage"]["message"].startswith("ResumeConflict: ")


def _watched_ends(
    monkeypatch: pytest.MonkeyPatch, run_id: str
) -> tuple[Receiver, Receiver, Datasets, RunFacts]:
    """A collector and a catalog, named by the standard variables; an S3 run's datasets and
    facts, for a Telemetry made without a job."""
    otlp, catalog = Receiver(), Receiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", otlp.url + "/v1/traces")
    monkeypatch.setenv("OPENLINEAGE_URL", catalog.url)
    schema = pa.schema([pa.field("id", pa.int64())])
    datasets = Datasets("s3://corpora/in.parquet", schema, 10, "s3://tables/out", schema)
    run = RunFacts(run_id, "reviews", "s3://tables/out", "model-1.13.0", "embedded", 1, 1)
    return otlp, catalog, datasets, run


def test_a_failed_run_ends_in_fail_and_an_error_span(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The end of a run that failed (or was stopped), as the catalog and the collector get it."""
    otlp, catalog, datasets, run = _watched_ends(monkeypatch, "run-1")
    for state, error in (("failed", OSError("the disk went away")), ("stopped", None)):
        watch = Telemetry(run, MetricsConfig(), datasets)
        watch.begin("plan")
        watch.begin("send")
        watch.close(state, error=error)
    otlp.shutdown()
    catalog.shutdown()
    events = [json.loads(body) for body in catalog.bodies("/api/v1/lineage")]
    assert [e["eventType"] for e in events] == ["START", "FAIL", "START", "ABORT"]
    assert events[1]["run"]["facets"]["errorMessage"]["message"] == "OSError: the disk went away"
    assert events[1]["inputs"][0]["namespace"] == "s3://corpora"
    assert events[1]["outputs"][0]["name"] == "out"
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    spans = [
        span
        for body in otlp.bodies("/v1/traces")
        for rs in ExportTraceServiceRequest.FromString(body).resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    ]
    failed = {s.name: s.status for s in spans if s.trace_id == spans[0].trace_id}
    assert set(failed) == {"evalpipe run", "plan", "send"}
    error = 2  # STATUS_CODE_ERROR
    assert failed["send"].code == error and failed["evalpipe run"].code == error
    assert failed["plan"].code != error  # it ended before the failure


def test_a_failure_is_exported_without_a_url_s_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The error a run fails with, its causes' messages too (a span records the traceback),
    reaches the collector and the catalog with every URL's user and password cut."""
    secret = "Url-Pa55word-in-a-cause"
    otlp, catalog, datasets, run = _watched_ends(monkeypatch, "run-2")
    try:
        try:
            raise ValueError(f"cannot reach https://svc:{secret}@eval.example.com/v1/models")
        except ValueError as cause:
            raise OSError(f"the store at s3://KEY:{secret}@tables went away") from cause
    except OSError as failed:
        error = failed
    watch = Telemetry(run, MetricsConfig(), datasets)
    watch.begin("send")
    watch.close("failed", error=error)
    otlp.shutdown()
    catalog.shutdown()
    spans = b"".join(otlp.bodies("/v1/traces"))
    events = b"".join(catalog.bodies("/api/v1/lineage"))
    assert b"went away" in events and b"ValueError" in spans  # the error and its cause went
    assert secret.encode() not in spans and secret.encode() not in events
