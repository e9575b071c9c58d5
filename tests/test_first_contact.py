"""First contact on a company network: the service over HTTPS under a CA the test makes
(trustme), behind a CONNECT proxy, both real servers on loopback (tests/netdoubles.py).

With the CA trusted (SSL_CERT_FILE) and the proxy set (HTTPS_PROXY), the service answers through
the proxy; without the CA, with a name that does not resolve, with the wrong scheme or a proxy
that refuses the tunnel, `models`, `plan --calibrate`, `run` and the Python API stop at once
(no retry: a `run` that waited would start Ray, which the process guard refuses here) with one
line naming the cause and the fix, exit 2. A server that merely hangs up keeps the retries'
patience. In the middle of a run, a row's `_error` says which (`_error_type` stays `network`),
and the summary counts the causes.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import os
import shutil
import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import trustme
import yaml
from click.testing import CliRunner, Result

import evalpipe as ep
from conftest import API_KEY, QUESTIONS, job_config, run_config
from evalpipe.cli.main import main
from evalpipe.engine.progress import Counters
from evalpipe.engine.summary import format_summary, summary
from evalpipe.errors import (
    CertificateError,
    HostNotFound,
    NetworkError,
    ProxyError,
    SchemeMismatch,
    ServiceUnreachable,
)
from evalpipe.send import EvalClient
from evalpipe.send.actors import fold
from evalpipe.send.transport import new_transport, tls_context
from evalpipe.service import EmbeddedService
from netdoubles import ConnectProxy, HangUp, TlsFront, connect_proxy, tls_front
from test_resume import evalpipe_command

NAME = "evalsvc.example"  # the service's name behind the proxy (the proxy resolves it)
SECRET = "s3cret-proxy-password"
PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY", "SSL_CERT_FILE",
                   "SSL_CERT_DIR")  # fmt: skip


# --------------------------------------------------------------------------- the network


def _server_context(cert: trustme.LeafCert) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    return context


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA(organization_name="Example Corp (test)")


@pytest.fixture(scope="module")
def ca_file(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ca") / "company-ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return path


def _upstream(service: EmbeddedService) -> tuple[str, int]:
    return ("127.0.0.1", int(service.base_url.rsplit(":", 1)[1]))


@pytest.fixture(scope="module")
def front(ca: trustme.CA, service: EmbeddedService) -> Iterator[TlsFront]:
    """The session's service over TLS, its certificate for `localhost` and NAME."""
    cert = ca.issue_cert("localhost", NAME)
    with tls_front(_server_context(cert), _upstream(service)) as started:
        yield started


@pytest.fixture(scope="module")
def expired(ca: trustme.CA, service: EmbeddedService) -> Iterator[TlsFront]:
    past = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
    cert = ca.issue_cert("localhost", not_before=past, not_after=past + datetime.timedelta(30))
    with tls_front(_server_context(cert), _upstream(service)) as started:
        yield started


@pytest.fixture(autouse=True)
def _network_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test sets the variables it means; the process's TLS context is made again."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setenv("EVAL_API_KEY", API_KEY)
    tls_context.cache_clear()
    yield
    tls_context.cache_clear()


@pytest.fixture
def proxy(front: TlsFront) -> Iterator[ConnectProxy]:
    """A CONNECT proxy that takes NAME to the TLS front (any other name: as asked)."""
    with connect_proxy(route=lambda host, port: _route(front, host, port)) as started:
        yield started


def _route(front: TlsFront, host: str, port: int) -> tuple[str, int]:
    return ("127.0.0.1", front.port) if host == NAME else (host, port)


def _trust(monkeypatch: pytest.MonkeyPatch, ca_file: Path) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    tls_context.cache_clear()  # read once per process, as a run reads it


def _through(monkeypatch: pytest.MonkeyPatch, proxy: ConnectProxy, user: bool = True) -> None:
    auth = f"analyst:{SECRET}@" if user else ""
    monkeypatch.setenv("HTTPS_PROXY", f"http://{auth}127.0.0.1:{proxy.port}")


# --------------------------------------------------------------------------- helpers


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def last_line(result: Result) -> str:
    return result.output.strip().splitlines()[-1]


def corpus(tmp: Path, n: int = 12) -> None:
    rows = [{"id": i, "text": f"Review {i}: the kettle {'boils' if i % 2 else 'leaks'}."}
            for i in range(n)]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), tmp / "in.parquet")


def config_file(tmp: Path, url: str, **service: Any) -> Path:
    corpus(tmp)
    config = job_config(tmp, url, service={"base_url": url, "connect_wait": 30, **service})
    path = tmp / "job.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _one_line_exit_2(result: Result, error: type[ServiceUnreachable], *says: str) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    line = last_line(result)
    assert line.startswith(f"{error.__name__}: "), line
    for words in says:
        assert words in line, line
    assert "within" not in line  # nothing was waited out
    assert SECRET not in result.output
    return line


# --------------------------------------------------------------------------- works when set up


def test_the_company_ca_in_ssl_cert_file_and_the_proxy_let_models_through(
    front: TlsFront, proxy: ConnectProxy, ca_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _trust(monkeypatch, ca_file)
    direct = invoke("models", "--base-url", f"https://localhost:{front.port}")
    assert direct.exit_code == 0, direct.output
    assert "model-1.13.0" in direct.output
    assert proxy.targets == []  # localhost: never through a proxy
    _through(monkeypatch, proxy)
    proxied = invoke("models", "--base-url", f"https://{NAME}")
    assert proxied.exit_code == 0, proxied.output
    assert "model-1.13.0" in proxied.output
    assert proxy.targets and set(proxy.targets) == {f"{NAME}:443"}
    assert proxy.plain == []


@pytest.mark.subprocess  # `openssl rehash` makes the directory's hash links
@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_ssl_cert_dir_is_honoured_too_even_beside_ssl_cert_file(
    front: TlsFront, ca: trustme.CA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both variables are read, as OpenSSL reads them (httpx's default took the file alone)."""
    certs = tmp_path / "certs"
    certs.mkdir()
    ca.cert_pem.write_to_path(str(certs / "company.pem"))
    subprocess.run(["openssl", "rehash", str(certs)], check=True, capture_output=True)
    unrelated = tmp_path / "other.pem"
    trustme.CA().cert_pem.write_to_path(str(unrelated))
    url = f"https://localhost:{front.port}"
    monkeypatch.setenv("SSL_CERT_FILE", str(unrelated))
    tls_context.cache_clear()
    assert invoke("models", "--base-url", url).exit_code == 2  # the file alone: not trusted
    monkeypatch.setenv("SSL_CERT_DIR", str(certs))
    tls_context.cache_clear()
    listed = invoke("models", "--base-url", url)
    assert listed.exit_code == 0, listed.output


def test_ssl_cert_file_naming_nothing_is_a_one_line_config_error(
    front: TlsFront, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "missing.pem"))
    result = invoke("models", "--base-url", f"https://localhost:{front.port}")
    assert result.exit_code == 2, result.output
    assert last_line(result).startswith(f"ConfigError: SSL_CERT_FILE={tmp_path / 'missing.pem'}")


# --------------------------------------------------------------------------- said at once


def test_an_untrusted_certificate_says_which_host_and_how_to_trust_the_ca(
    front: TlsFront, ca_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"https://localhost:{front.port}"
    listed = invoke("models", "--base-url", url)
    line = _one_line_exit_2(
        listed, CertificateError, f"localhost:{front.port}", "not trusted", "SSL_CERT_FILE",
        "SSL_CERT_DIR", "unable to get local issuer certificate",
    )  # fmt: skip
    # run, plan --calibrate and the Python API say the same line; run stops before Ray
    path = config_file(tmp_path, url)
    for args in (("run", str(path)), ("plan", str(path), "--calibrate", "3")):
        assert last_line(invoke(*args)) == line, args
    assert not (tmp_path / "out").exists()
    with pytest.raises(CertificateError) as raised:
        ep.score(pl.DataFrame({"id": [1], "text": ["hi"]}), id="id", state="text",
                 questions=QUESTIONS, service=ep.Service(url, model="model-1.13.0"))  # fmt: skip
    assert f"CertificateError: {raised.value}" == line
    _trust(monkeypatch, ca_file)  # the fix the line names mends it
    assert invoke("models", "--base-url", url).exit_code == 0


def test_an_expired_certificate_and_one_for_another_name_say_so(
    front: TlsFront, expired: TlsFront, ca_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _trust(monkeypatch, ca_file)
    old = invoke("models", "--base-url", f"https://localhost:{expired.port}")
    _one_line_exit_2(old, CertificateError, "not valid now", "certificate has expired", "renew")
    other = invoke("models", "--base-url", f"https://127.0.0.1:{front.port}")
    _one_line_exit_2(
        other, CertificateError, f"127.0.0.1:{front.port}", "for another name",
        "service.base_url",
    )  # fmt: skip


def test_a_name_that_does_not_resolve_says_check_service_base_url(tmp_path: Path) -> None:
    line = _one_line_exit_2(
        invoke("models", "--base-url", "https://evalsvc.invalid"),
        HostNotFound, "evalsvc.invalid", "does not resolve", "check service.base_url",
    )  # fmt: skip
    assert last_line(invoke("run", str(config_file(tmp_path, "https://evalsvc.invalid")))) == line


def test_the_wrong_scheme_either_way_names_the_right_one(
    front: TlsFront, service: EmbeddedService, tmp_path: Path
) -> None:
    plain_to_tls = invoke("models", "--base-url", f"http://localhost:{front.port}")
    _one_line_exit_2(
        plain_to_tls, SchemeMismatch, "may speak https", f"https://localhost:{front.port}"
    )
    port = _upstream(service)[1]
    tls_to_plain = invoke("models", "--base-url", f"https://127.0.0.1:{port}")
    _one_line_exit_2(tls_to_plain, SchemeMismatch, "may speak http", f"http://127.0.0.1:{port}")
    path = config_file(tmp_path, f"http://localhost:{front.port}")
    assert "may speak https" in last_line(invoke("run", str(path)))


def _loopback_name() -> str | None:
    """A name of this machine that resolves to loopback and is not `localhost` (which is
    never proxied), or None."""
    name = socket.gethostname()
    try:
        address = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)[0][4][0]
    except OSError:
        return None
    return name if ipaddress.ip_address(address).is_loopback and name != "localhost" else None


@pytest.mark.skipif(_loopback_name() is None, reason="the host name does not resolve to loopback")
def test_http_through_a_forwarding_proxy_to_the_https_service_names_https(
    front: TlsFront, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTP_PROXY set, http:// given: the proxy answers 502 (the TLS port hung up on its plain
    request), and the port, asked directly, speaks TLS."""
    with connect_proxy(plain_status=502) as forwarding:
        monkeypatch.setenv("HTTP_PROXY", forwarding.url)
        url = f"http://{_loopback_name()}:{front.port}"
        _one_line_exit_2(invoke("models", "--base-url", url), SchemeMismatch, "may speak https")
        assert len(forwarding.plain) == 1


@pytest.mark.parametrize("status", [407, 403, 502])
def test_a_proxy_that_refuses_the_tunnel_is_named_with_its_status_not_its_password(
    status: int, ca_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _trust(monkeypatch, ca_file)
    with connect_proxy(refuse=status) as refusing:
        _through(monkeypatch, refusing)
        result = invoke("models", "--base-url", f"https://{NAME}")
        fix = {407: "user and password in HTTPS_PROXY", 403: "NO_PROXY", 502: "could not reach"}
        _one_line_exit_2(
            result, ProxyError, f"the proxy http://127.0.0.1:{refusing.port} refused the tunnel",
            f"to {NAME}:443 ({status}", fix[status],
        )  # fmt: skip
        assert refusing.targets == [f"{NAME}:443"]  # asked once: no retry


def test_a_proxy_that_is_not_there_is_named(
    ca_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", f"http://analyst:{SECRET}@127.0.0.1:9")
    result = invoke("models", "--base-url", f"https://{NAME}")
    _one_line_exit_2(result, ProxyError, "cannot connect to the proxy http://127.0.0.1:9")


def test_a_proxy_without_a_scheme_is_read_as_curl_reads_it(
    proxy: ConnectProxy, ca_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`HTTPS_PROXY=user:password@host:port` (curl takes it: an http:// proxy) tunnels to the
    service with that user and password, and nothing prints the password."""
    _trust(monkeypatch, ca_file)
    monkeypatch.setenv("HTTPS_PROXY", f"analyst:{SECRET}@127.0.0.1:{proxy.port}")
    result = invoke("models", "--base-url", f"https://{NAME}")
    assert result.exit_code == 0, result.output
    assert "model-1.13.0" in result.output and SECRET not in result.output
    assert proxy.targets and set(proxy.targets) == {f"{NAME}:443"}
    basic = base64.b64encode(f"analyst:{SECRET}".encode()).decode()
    assert set(proxy.auth) == {f"Basic {basic}"}  # the credentials reached the proxy


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (f"ftp://analyst:{SECRET}@127.0.0.1:21", "a ftp:// proxy cannot carry the requests"),
        (f"http://analyst:{SECRET}@127.0.0.1:port", "not a proxy URL"),
        (f"analyst:{SECRET}@", "not a proxy URL"),
    ],
)
def test_a_proxy_that_cannot_be_used_is_one_line_naming_the_variable_not_the_password(
    value: str, says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", value)
    result = invoke("models", "--base-url", f"https://{NAME}")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and SECRET not in result.output
    assert last_line(result).startswith(f"ConfigError: HTTPS_PROXY: {says}"), last_line(result)


# --------------------------------------------------------------------------- transient: patient


def test_a_server_that_hangs_up_keeps_the_retries_patience() -> None:
    """Not TLS, not a name, not a proxy: the probe retries until `wait`, then says so."""
    hang_up = HangUp()
    try:

        async def probe() -> None:
            async with EvalClient(f"http://127.0.0.1:{hang_up.port}", API_KEY) as client:
                await client.probe(wait=0.6)

        with pytest.raises(ServiceUnreachable) as raised:
            asyncio.run(probe())
    finally:
        hang_up.close()
    assert type(raised.value) is ServiceUnreachable
    assert "within 0.6s" in str(raised.value)
    assert hang_up.connections >= 3  # tried again and again (the TLS check among them)


# --------------------------------------------------------------------------- mid-run


@pytest.mark.parametrize("kind", ["aiohttp", "httpx"])
def test_mid_run_a_certificate_error_is_the_rows_network_error_said_not_retried(
    kind: Any, front: TlsFront
) -> None:
    """A request meets a certificate it does not trust: the call ends after one attempt
    (no retry mends it), as a `network` error whose message says which, with its cause."""
    url = f"https://localhost:{front.port}"

    async def call() -> Any:
        async with EvalClient(url, API_KEY, transport=new_transport(url, kind)) as client:
            return await client.evaluate({"model": "model-1.13.0"}, {}, 10)

    result = asyncio.run(call())
    error = result.error
    assert isinstance(error, NetworkError) and error.error_type == "network"
    assert error.cause == "certificate_untrusted", error.message
    assert f"POST /v1/evaluate: the certificate of localhost:{front.port} is not trusted" in (
        error.message
    )
    assert result.attempts == 1
    job = fold([(_request(), result)], 0, 0)
    assert (job.error_type, job.error_cause) == ("network", "certificate_untrusted")


def _request() -> Any:
    from evalpipe.planning import Request

    return Request(keys=("q",), tokens=10, state_tokens=5)


def test_the_summary_counts_network_errors_by_cause() -> None:
    counters = Counters(rows_total=5)
    counters.errors.update({"network": 4})
    counters.network_causes.update({"certificate_untrusted": 3, "proxy_refused": 1})
    shown = summary(counters, 1200, 250_000)
    assert shown["network_causes"] == {"certificate_untrusted": 3, "proxy_refused": 1}
    text = format_summary(shown)
    assert (
        "network       4 rows in error: certificate not trusted 3, the proxy refused the tunnel 1"
        in text
    )


@pytest.mark.ray
def test_a_certificate_that_changes_mid_run_ends_rows_as_network_errors_counted(
    ray_runtime: None,
    ca: trustme.CA,
    ca_file: Path,
    service: EmbeddedService,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first contact meets the company's certificate; every connection after it (the
    workers') a certificate of another CA, as when a certificate is replaced mid-run."""
    other = trustme.CA().issue_cert("localhost")
    good = _server_context(ca.issue_cert("localhost"))
    with tls_front(good, _upstream(service), later=_server_context(other)) as changing:
        _trust(monkeypatch, ca_file)
        corpus(tmp_path, 6)
        config = job_config(tmp_path, f"https://localhost:{changing.port}")
        done = run_config(config)
    assert done["rows_answered"] == 0
    assert done["rows_in_error"] == {"network": 6}
    assert done["network_causes"] == {"certificate_untrusted": 6}
    assert done["attempts"] == done["requests"]  # not retried
    table = ep.read(tmp_path / "out").collect()
    assert set(table["_error_type"]) == {"network"}
    assert all(
        f"the certificate of localhost:{changing.port} is not trusted" in e for e in table["_error"]
    )


# --------------------------------------------------------------------------- end to end


@pytest.mark.subprocess
def test_a_run_through_the_proxy_under_the_company_ca_answers_every_row(
    front: TlsFront, proxy: ConnectProxy, ca_file: Path, tmp_path: Path
) -> None:
    """`evalpipe run` as a user runs it, with HTTPS_PROXY and SSL_CERT_FILE exported: a Ray of
    its own (its workers inherit the environment, which is the point, so not the session's),
    every row answered, and every connection (the probe's, the worker's) a tunnel of the proxy:
    `evalsvc.example` resolves nowhere else. One worker: what it inherits is the point, not how
    many there are (each is a new Ray worker process)."""
    path = config_file(tmp_path, f"https://{NAME}")
    config = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**config, "concurrency": {"actors": 1}}, sort_keys=False))
    env = {
        **os.environ,
        "HTTPS_PROXY": f"http://analyst:{SECRET}@127.0.0.1:{proxy.port}",
        "SSL_CERT_FILE": str(ca_file),
        "EVAL_API_KEY": API_KEY,
    }
    env.pop("RAY_ADDRESS", None)
    before = front.connections
    ran = subprocess.run(
        [*evalpipe_command(), "run", str(path), "--progress-interval", "60"],
        env=env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert SECRET not in ran.stderr + ran.stdout
    table = ep.read(tmp_path / "out").collect()
    assert table.height == 12 and table["_error_type"].null_count() == 12
    assert len(proxy.targets) >= 2 and set(proxy.targets) == {f"{NAME}:443"}  # probe + worker
    assert front.connections - before == len(proxy.targets)  # none came another way
