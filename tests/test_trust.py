"""Every outbound connection trusts what the service's client trusts: a company CA given only by
SSL_CERT_FILE reaches OpenLineage, OTLP and a Pushgateway behind it, not just the service.

The receivers are real HTTPS servers on loopback whose certificates a private CA signed
(`trustme`); the run is `evalpipe run` on the session's Ray and embedded service, with this
machine's own REQUESTS_CA_BUNDLE left as it is (the company CA is added to it, never the other
way round). Then the bundle itself: what `evalpipe.stores.ca_bundle` makes of the variables.
"""

from __future__ import annotations

import contextlib
import http.server
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml

from conftest import PUSHGATEWAY, cli_run, free_port, job_config
from evalpipe.stores import ca_bundle, requests_verify

trustme = pytest.importorskip("trustme")


class _Receiver(http.server.BaseHTTPRequestHandler):
    """Takes any POST and keeps its path: an OpenLineage or OTLP collector stand-in."""

    posts: list[str]

    def do_POST(self) -> None:

        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.posts.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return trustme.CA()


@pytest.fixture(scope="module")
def receiver(ca: Any) -> Iterator[tuple[str, list[str]]]:
    """An HTTPS server on loopback under the private CA; its URL and the paths posted to it."""
    posts: list[str] = []
    handler = type("Receiver", (_Receiver,), {"posts": posts})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}", posts
    server.shutdown()
    server.server_close()


def _job(tmp: Path, base_url: str, **changes: Any) -> Path:
    pl.DataFrame(
        {"id": range(12), "text": [f"Review {i}: it fits." for i in range(12)]}
    ).write_parquet(tmp / "in.parquet")
    path = tmp / "job.yaml"
    path.write_text(yaml.safe_dump(job_config(tmp, base_url, **changes)), encoding="utf-8")
    return path


@pytest.mark.ray
def test_lineage_and_otlp_reach_https_receivers_under_a_ca_given_by_ssl_cert_file(
    ray_runtime: None,
    service: Any,
    ca: Any,
    receiver: tuple[str, list[str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, posts = receiver
    ca.cert_pem.write_to_path(str(tmp_path / "company-ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "company-ca.pem"))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.setenv("OPENLINEAGE_URL", url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
    for name in ("OTEL_EXPORTER_OTLP_CERTIFICATE", "OPENLINEAGE_DISABLED", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    posts.clear()
    result = cli_run(_job(tmp_path, service.base_url))
    assert "could not be emitted" not in result.output, result.output
    assert posts.count("/api/v1/lineage") == 2, posts  # START, then COMPLETE
    assert "/v1/metrics" in posts and "/v1/traces" in posts, posts


@pytest.mark.ray
def test_pushes_reach_an_https_pushgateway_under_the_same_ca(
    ray_runtime: None,
    service: Any,
    ca: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Debian's Pushgateway serving TLS (`--web.config.file`) with a certificate of the CA."""
    import httpx

    assert PUSHGATEWAY.exists(), "the Pushgateway is missing: `make prometheus` installs it"
    server = ca.issue_cert("127.0.0.1")
    server.cert_chain_pems[0].write_to_path(str(tmp_path / "gateway.pem"))
    server.private_key_pem.write_to_path(str(tmp_path / "gateway.key"))
    ca.cert_pem.write_to_path(str(tmp_path / "company-ca.pem"))
    (tmp_path / "web.yml").write_text(
        f"tls_server_config:\n  cert_file: {tmp_path / 'gateway.pem'}\n"
        f"  key_file: {tmp_path / 'gateway.key'}\n"
    )
    port = free_port()
    gateway = f"https://127.0.0.1:{port}"
    verify = ssl.create_default_context(cafile=str(tmp_path / "company-ca.pem"))
    argv = [
        str(PUSHGATEWAY),
        f"--web.listen-address=127.0.0.1:{port}",
        f"--web.config.file={tmp_path / 'web.yml'}",
        f"--persistence.file={tmp_path / 'data'}",
    ]
    with _serving(argv, f"{gateway}/-/ready", verify, tmp_path / "gateway.log"):
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "company-ca.pem"))
        monkeypatch.delenv("SSL_CERT_DIR", raising=False)
        for name in ("OPENLINEAGE_URL", "OTEL_EXPORTER_OTLP_ENDPOINT"):
            monkeypatch.delenv(name, raising=False)
        job = _job(tmp_path, service.base_url, name="tls-push")
        result = cli_run(job, "--pushgateway", gateway)
        assert "pushing to" not in result.output, result.output  # no push failed
        metrics = httpx.get(f"{gateway}/metrics", verify=verify, timeout=10).text
        assert "evalpipe_rows_total{" in metrics and 'job="tls-push"' in metrics


@contextlib.contextmanager
def _serving(argv: list[str], ready: str, verify: ssl.SSLContext, log: Path) -> Iterator[None]:
    """A server process, once `ready` answers 200 over TLS; ended afterwards."""
    import httpx

    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        for _ in range(600):
            assert process.poll() is None, log.read_text()[-2000:]
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(ready, verify=verify, timeout=1).status_code == 200:
                    break
            time.sleep(0.1)
        yield
    finally:
        process.terminate()
        process.wait(timeout=10)


# --------------------------------------------------------------------------- the bundle


def _pem(ca: Any, path: Path) -> str:
    ca.cert_pem.write_to_path(str(path))
    return str(path)


def test_no_standard_variable_leaves_every_library_as_it_is(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", _pem(trustme.CA(), tmp_path / "own.pem"))
    assert ca_bundle() is None and requests_verify() is None


def test_the_company_ca_is_added_to_what_a_library_was_told(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    company, own, other = trustme.CA(), trustme.CA(), trustme.CA()
    monkeypatch.setenv("SSL_CERT_FILE", _pem(company, tmp_path / "company.pem"))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    assert requests_verify() == str(tmp_path / "company.pem")  # the file itself: nothing to add
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", _pem(own, tmp_path / "own.pem"))
    both = Path(str(requests_verify())).read_bytes()
    assert company.cert_pem.bytes() in both and own.cert_pem.bytes() in both
    folder = tmp_path / "certs"
    folder.mkdir()
    _pem(other, folder / "other.pem")
    monkeypatch.setenv("SSL_CERT_DIR", str(folder))
    every = Path(str(ca_bundle())).read_bytes()
    assert company.cert_pem.bytes() in every and other.cert_pem.bytes() in every
    assert own.cert_pem.bytes() not in every  # only what a library names is added to it


def test_a_variable_naming_no_certificate_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from evalpipe.errors import ConfigError

    (tmp_path / "empty.pem").write_text("not a certificate\n")
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "empty.pem"))
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match="SSL_CERT_FILE="):
        ca_bundle()
