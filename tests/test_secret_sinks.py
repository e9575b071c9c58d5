"""Every sink on, and a distinct secret in each place one can come from: none of them is in
anything the run writes, pushes, exports or prints.

One `evalpipe run` for real (a process and a Ray of its own: its workers must inherit the
proxy and CA variables, as a user's would), reaching the service as `https://evalsvc.example`
through a CONNECT proxy named without a scheme, under a company CA (tests/netdoubles.py), with
`/metrics` served, pushes to the session's Pushgateway (basic auth), OTLP and OpenLineage into
receivers of this module, a Delta table on the session's S3 server, the JSON log; then
`evalpipe report` on the table (in this process, in the run's environment: what it printed is
the CLI's output and whatever reached this process's stdout and stderr meanwhile). The secrets:
the API key, the proxy's password, the store's secret key, the OTLP headers' token, the
catalog's API key, the Pushgateway's password. Everything is searched: what was printed, every
file under the test's folders (the cache, the staging, the report, Ray's session logs), every
object of the table, what the receivers, the Pushgateway and the scrapes of `/metrics` got.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import shutil
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
import trustme
import yaml

from conftest import CLIENT, LIFTED, QUESTIONS, free_port
from evalpipe.service import EmbeddedService, ServiceSettings
from netdoubles import Receiver, connect_proxy, tls_front
from test_resume import evalpipe_command

NAME = "evalsvc.example"  # the service's name behind the proxy (the proxy resolves it)
SECRETS = {
    what: f"{what}-{secrets.token_hex(12)}"
    for what in ("api-key", "proxy-password", "aws-secret", "otlp-token", "lineage-key",
                 "pushgateway-password")
}  # fmt: skip
ROWS = 30


def _server_context(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(NAME).configure_cert(context)
    return context


def _address(url: str) -> tuple[str, int]:
    return ("127.0.0.1", int(url.rsplit(":", 1)[1]))


def _route(front: int, host: str, port: int) -> tuple[str, int]:
    return ("127.0.0.1", front) if host == NAME else (host, port)


def _scrape(url: str, pages: list[str], done: threading.Event) -> None:
    while not done.is_set():
        with contextlib.suppress(httpx.HTTPError):
            pages.append(CLIENT.get(url, timeout=2).text)
        time.sleep(0.2)


def _files(*roots: Path) -> Iterator[tuple[str, bytes]]:
    for root in roots:
        for folder, _, names in os.walk(root):
            for name in names:
                path = Path(folder) / name
                if path.is_file() and not path.is_symlink():
                    with contextlib.suppress(OSError):
                        yield str(path), path.read_bytes()


def _objects(prefix: str) -> Iterator[tuple[str, bytes]]:
    fs, root = pafs.FileSystem.from_uri(prefix)
    for info in fs.get_file_info(pafs.FileSelector(root, recursive=True)):
        if info.type == pafs.FileType.File:
            with fs.open_input_stream(info.path) as stream:
                yield info.path, stream.read()


@pytest.mark.subprocess
def test_no_secret_in_anything_written_pushed_exported_or_printed(
    tmp_path: Path, s3_endpoint: str, pushgateway: str, capfd: pytest.CaptureFixture[str]
) -> None:
    ca = trustme.CA(organization_name="Example Corp (test)")
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    rows = [{"id": i, "text": f"Review {i}: the kettle {'boils' if i % 2 else 'leaks'}."}
            for i in range(ROWS)]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in.parquet")
    out = f"s3://tables/secrets-{secrets.token_hex(4)}"
    port = free_port()
    config = {
        "name": "secret-keeping",
        "input": {"path": str(tmp_path / "in.parquet"), "id_column": "id", "state": "text"},
        "output": {"path": out, "format": "delta", "staging": str(tmp_path / "staging")},
        "service": {"base_url": f"https://{NAME}", "connect_wait": 30},
        "model": "model-1.13.0",
        "limits": {"requests_per_minute": 60_000, "tokens_per_second": 10_000_000},
        "concurrency": {"actors": 1, "max_in_flight": 2},  # a run long enough to be scraped
        "questions": QUESTIONS,
        "metrics": {"port": port, "pushgateway": pushgateway, "pushgateway_user": "nightly",
                    "pushgateway_password_env": "GW_PASSWORD", "push_seconds": 0.5},
    }  # fmt: skip
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    otlp, catalog = Receiver(), Receiver()
    ray_tmp = Path(tempfile.mkdtemp(prefix="evs-", dir="/tmp"))  # short: Ray's socket paths
    settings = ServiceSettings(api_key=SECRETS["api-key"], latency=0.05, **LIFTED)
    pages: list[str] = []
    done = threading.Event()
    try:
        with (
            EmbeddedService(settings) as service,
            tls_front(_server_context(ca), _address(service.base_url)) as front,
            connect_proxy(route=lambda host, port: _route(front.port, host, port)) as proxy,
        ):
            env = {
                **{k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "OTEL_",
                   "OPENLINEAGE", "RAY_ADDRESS")) and "proxy" not in k.lower()},
                "EVAL_API_KEY": SECRETS["api-key"],
                "HTTPS_PROXY": f"analyst:{SECRETS['proxy-password']}@127.0.0.1:{proxy.port}",
                "SSL_CERT_FILE": str(ca_file),
                "AWS_ENDPOINT_URL": s3_endpoint, "AWS_ACCESS_KEY_ID": "test-access-key",
                "AWS_SECRET_ACCESS_KEY": SECRETS["aws-secret"], "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": "/dev/null",
                "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
                "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url,
                "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer {SECRETS['otlp-token']}",
                "OPENLINEAGE_URL": catalog.url, "OPENLINEAGE_API_KEY": SECRETS["lineage-key"],
                "GW_PASSWORD": SECRETS["pushgateway-password"],
                "RAY_TMPDIR": str(ray_tmp), "XDG_CACHE_HOME": str(tmp_path / "cache"),
            }  # fmt: skip
            scraper = threading.Thread(
                target=_scrape, args=(f"http://127.0.0.1:{port}/metrics", pages, done)
            )
            scraper.start()
            ran = subprocess.run(
                [*evalpipe_command(), "run", str(path), "--log-format", "json",
                 "--progress-interval", "1"],
                env=env, capture_output=True, timeout=300, check=False,
            )  # fmt: skip
            done.set()
            scraper.join()
            assert ran.returncode == 0, ran.stderr.decode()[-3000:]
            reported = _report(out, tmp_path / "report.html", env, capfd)
            assert set(proxy.targets) == {f"{NAME}:443"}  # the run went through the proxy
            basic = base64.b64encode(f"analyst:{SECRETS['proxy-password']}".encode()).decode()
            assert set(proxy.auth) == {f"Basic {basic}"}
            with _aws(env):
                table = list(_objects(out))
        pushed = httpx.get(f"{pushgateway}/metrics", timeout=10).text
        pushed += httpx.get(f"{pushgateway}/api/v1/metrics", timeout=10).text
    finally:
        done.set()
        otlp.shutdown()
        catalog.shutdown()
    # Each sink was on, and got something.
    assert pages and "evalpipe_rows_total" in pages[-1]
    assert 'job="secret-keeping"' in pushed
    assert otlp.bodies("/v1/traces") and otlp.bodies("/v1/metrics")
    assert any(b'"COMPLETE"' in body for body in catalog.bodies("/api/v1/lineage"))
    assert any(path.endswith(".parquet") for path, _ in table)
    assert any("_delta_log" in path for path, _ in table)
    assert (tmp_path / "report.html").stat().st_size > 0
    assert b'"event": "summary"' in ran.stderr or b'"event":"summary"' in ran.stderr
    places: list[tuple[str, bytes]] = [
        ("run stdout", ran.stdout), ("run stderr", ran.stderr),
        ("report's output", reported),
        ("/metrics", "".join(pages).encode()), ("pushgateway", pushed.encode()),
        *otlp.posts, *catalog.posts,
        *table, *_files(tmp_path, ray_tmp),
    ]  # fmt: skip
    try:
        found = [
            (what, where) for what, secret in SECRETS.items() for where, data in places
            if secret.encode() in data
        ]  # fmt: skip
        assert found == []
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


def _report(out: str, html: Path, env: dict[str, str], capfd: pytest.CaptureFixture[str]) -> bytes:
    """`evalpipe report OUT --html HTML` in this process (the run's process is the one whose
    Ray and workers must see the environment), in the run's environment (nothing else of
    this one's); what it printed: its streams, and anything written to the process's stdout
    and stderr meanwhile."""
    from click.testing import CliRunner

    from evalpipe.cli.main import main

    unset: dict[str, str | None] = {name: None for name in os.environ if name not in env}
    capfd.readouterr()
    result = CliRunner().invoke(main, ["report", out, "--html", str(html)], env={**unset, **env})
    assert result.exit_code == 0, result.output[-3000:]
    printed = capfd.readouterr()
    return (result.output + printed.out + printed.err).encode()


@contextlib.contextmanager
def _aws(env: dict[str, str]) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            if name.startswith("AWS_"):
                patch.setenv(name, value)
        yield
