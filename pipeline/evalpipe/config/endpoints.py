"""The config's sections that name a URL the job calls or serves: the evaluation service, and
the run's metrics (the `/metrics` server, the Pushgateway).

Credentials never go in these URLs (`evalpipe.stores.urls`): a URL with a user or password in
it is refused here, in one line that says which variable they belong in and never repeats
them. Where a value is echoed in a message, it is shown without userinfo. The `/metrics` server
listens on loopback unless `metrics.host` names another address: it has no authentication.

The service's API key is never in the config, only the name of the variable that holds it
(`service.api_key_env`); `api_key_in` is the one place evalpipe reads that variable, in whichever
process needs the key (the driver, a Ray worker, which reads its own environment: the key is
never a Ray task's argument).
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from pydantic import Field, ValidationInfo, field_validator

from evalpipe.config.section import ConfigSection, Positive
from evalpipe.config.transport import DEFAULT_KIND, MAX_RESPONSE_MB, TransportKind
from evalpipe.stores import refusal, scrubbed

EMBEDDED = "embedded"
# What `evalpipe init` writes for base_url: refused, with one line, until it is filled in.
BASE_URL_PLACEHOLDER = "<the evaluation service's URL, e.g. https://evals.example.com>"
EMBEDDED_WARNING = (
    "the answers come from the embedded reference service: made-up numbers for demos and tests"
)
LOOPBACK = "127.0.0.1"
# Where a service's credentials go instead of its URL.
SERVICE_CREDENTIALS = (
    "the variable service.api_key_env names (the service takes a key, not a user and "
    "password); a proxy's user and password go in HTTPS_PROXY"
)
GATEWAY_CREDENTIALS = (
    "metrics.pushgateway_user and the variable metrics.pushgateway_password_env names"
)


class ServiceConfig(ConfigSection):
    base_url: str  # required: a service's URL, or "embedded" (the reference, made-up answers)
    """The service's `scheme://host[:port]`, without `/v1`; or `embedded`, which starts the
    reference service on loopback for this job (made-up answers: the run warns, and its rows
    say `_service: embedded`). Answers are reused (the cache, a rerun into the same output)
    only from the service of the same origin. No user or password in it: the key is read from
    `api_key_env`."""
    api_key_env: str = "EVAL_API_KEY"
    """The name of the environment variable that holds the API key (never the key itself). With
    `embedded` and the variable unset, a one-off key is made for the run."""
    transport: TransportKind = DEFAULT_KIND
    """The HTTP transport under the client: `aiohttp` (through httpx-aiohttp, much faster
    with many requests in flight) or `httpx` (its own connection pool)."""
    connect_wait: Positive = 10.0  # seconds to wait for the service at start-up
    """Seconds to wait at start-up for the service to answer `GET /v1/models`; after that,
    `ServiceUnreachable` (exit 2). What waiting cannot mend is said at once instead: a refused
    port, a host name that does not resolve, a certificate not trusted, expired or for another
    name (a company CA goes in SSL_CERT_FILE or SSL_CERT_DIR), the wrong scheme, a proxy that
    refuses the tunnel."""
    latency: Annotated[float, Field(ge=0)] = 0.0  # embedded service only: median seconds/request
    """Embedded service only: the median seconds it takes per request, to rehearse a remote
    service's latency."""
    max_response_mb: Positive = MAX_RESPONSE_MB
    """The largest answer body read, in megabytes (10^6 bytes, after decompression). A larger
    one is not read further: that request ends `invalid_response` (not retried), and the run
    goes on. The largest pack of the largest questions answers in well under 1 MB."""

    @field_validator("base_url")
    @classmethod
    def _url(cls, url: str) -> str:
        if url == EMBEDDED:
            return url
        shown = scrubbed(url)
        if url.startswith("<"):
            raise ValueError(
                f"still the placeholder {shown!r}: write the evaluation service's URL "
                "(scheme://host[:port]), or 'embedded' for the reference service"
            )
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"must be 'embedded' or scheme://host[:port] (got {shown!r})")
        refused = refusal(url, SERVICE_CREDENTIALS)
        if refused is not None:
            raise ValueError(refused)
        url = url.rstrip("/")
        if url.endswith("/v1"):
            raise ValueError("leave out the /v1 path: the client adds it")
        if not urlsplit(url).hostname:
            raise ValueError(f"must be 'embedded' or scheme://host[:port] (got {shown!r})")
        return url

    @property
    def is_embedded(self) -> bool:
        return self.base_url == EMBEDDED

    @property
    def identity(self) -> str:
        """Who answers: the origin (scheme://host:port, no path, query or credentials), or
        `embedded` for the reference service whatever port it got. Answers are reused only
        from the service of the same identity (the cache, a rerun into the same output)."""
        return EMBEDDED if self.is_embedded else origin(self.base_url)

    @property
    def max_response_bytes(self) -> int:
        return int(self.max_response_mb * 1_000_000)


def origin(url: str) -> str:
    """scheme://host:port of `url`, the default port written out, credentials left out."""
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme, 0)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}:{port}"


class MetricsConfig(ConfigSection):
    """Where the run's metrics go while it runs (`evalpipe.observe`); OpenTelemetry and
    OpenLineage are set by their own standard variables instead."""

    port: Annotated[int, Field(ge=0, le=65535)] | None = None
    """Serve Prometheus metrics on `http://HOST:PORT/metrics` while the run lasts (0: a free
    port, said in the log). Unset: no server."""
    host: str = LOOPBACK
    """The address the metrics server listens on. The server has no authentication, and its
    metrics name the run, the model, the service and the spend: by default only this machine
    reaches it; `0.0.0.0` (every address) for a Prometheus elsewhere on a trusted network."""
    pushgateway: str | None = None
    """A Prometheus Pushgateway's URL (`http://host:9091`): the metrics are pushed at the
    start, every `push_seconds` and at the end, grouped by `job` (the config's `name`) and
    `output`, for runs too short to be scraped. Unset: nothing is pushed. No user or password
    in it: see `pushgateway_user`."""
    pushgateway_user: str | None = None
    """The user of a Pushgateway behind basic authentication (with
    `pushgateway_password_env`)."""
    pushgateway_password_env: str | None = None
    """The name of the environment variable that holds the Pushgateway's basic-auth password
    (never the password itself); needs `pushgateway_user`."""
    push_seconds: Positive = 5.0
    """Seconds between two pushes to the Pushgateway, and between two OTLP metric exports
    (unless `OTEL_METRIC_EXPORT_INTERVAL` says otherwise)."""

    @field_validator("pushgateway")
    @classmethod
    def _gateway(cls, url: str | None) -> str | None:
        if url is None:
            return None
        refused = refusal(url, GATEWAY_CREDENTIALS)
        if refused is not None:
            raise ValueError(refused)
        if not urlsplit(url).hostname:
            raise ValueError(f"must be a URL such as http://host:9091 (got {scrubbed(url)!r})")
        return url.rstrip("/")

    @field_validator("pushgateway_password_env")
    @classmethod
    def _with_user(cls, name: str | None, info: ValidationInfo) -> str | None:
        if name is not None and not info.data.get("pushgateway_user"):
            raise ValueError("a password needs its user: set metrics.pushgateway_user too")
        return name
