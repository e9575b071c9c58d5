"""The job config: YAML in, typed and validated objects out, before anything is sent.

Every error is a ConfigError whose one-line message starts with the key path that is wrong
(`limits.requests_per_minute: must be greater than 0`); an unknown key suggests the likely one.
The questions are validated by the contract module, so a question the service would refuse
with 422 is refused here first. Paths in the config are relative to the working directory;
`input.path` and `output.path` may also be object-store URIs (`evalpipe.stores.location`).
"""

from __future__ import annotations

import hashlib
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from evalpipe.config.retry import RetryPolicy
from evalpipe.contract import (
    REQUESTS_PER_MINUTE,
    TOKENS_PER_SECOND,
    ChoiceQuestion,
    NoulQuestion,
    ScoreQuestion,
    canonical,
    question_dicts,
    validate_questions,
)
from evalpipe.stores import Location, parse_location

EMBEDDED = "embedded"
# What `evalpipe init` writes for base_url: refused, with one line, until it is filled in.
BASE_URL_PLACEHOLDER = "<the evaluation service's URL, e.g. https://evals.example.com>"
EMBEDDED_WARNING = (
    "the answers come from the embedded reference service: made-up numbers for demos and tests"
)
# The HTTP library that moves the bytes (evalpipe.send.transport builds it): aiohttp's pool
# holds its rate under concurrency where httpx's own does not (bench/RESULTS.md).
TransportKind = Literal["aiohttp", "httpx"]
DEFAULT_KIND: TransportKind = "aiohttp"
MODEL_ALIASES = ("model-latest", "model-preview")
ParsedQuestion = NoulQuestion | ChoiceQuestion | ScoreQuestion

Positive = Annotated[float, Field(gt=0)]
PositiveInt = Annotated[int, Field(gt=0)]
# A local path, or a URI such as s3://bucket/prefix kept as written (evalpipe.stores.location).
Place = Annotated[Location, BeforeValidator(parse_location)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InputConfig(_Section):
    path: Place
    id_column: str
    state: str | tuple[str, ...]
    batch_rows: PositiveInt = 8192

    @field_validator("state", mode="before")
    @classmethod
    def _columns(cls, state: Any) -> Any:
        if isinstance(state, str) and state:
            return state
        if not isinstance(state, list) or not all(isinstance(c, str) and c for c in state):
            raise ValueError("must be a column name, or a list of column names")
        if not state:
            raise ValueError("name a column, or a list of at least one column")
        if len(set(state)) != len(state):
            raise ValueError("a column is listed twice")
        return tuple(state)


class OutputConfig(_Section):
    path: Place
    # object-store outputs: the local folder under which each keeps its journal and lock
    staging: Path | None = None  # default: the cache folder (evalpipe.stores.location.staging_dir)
    part_rows: PositiveInt = 5000  # rows per part file at most
    flush_seconds: Positive = 0.5  # finished rows are fsynced to the journal at least this often


class ServiceConfig(_Section):
    base_url: str  # required: a service's URL, or "embedded" (the reference, made-up answers)
    api_key_env: str = "EVAL_API_KEY"
    transport: TransportKind = DEFAULT_KIND
    connect_wait: Positive = 10.0  # seconds to wait for the service at start-up
    latency: Annotated[float, Field(ge=0)] = 0.0  # embedded service only: median seconds/request

    @field_validator("base_url")
    @classmethod
    def _url(cls, url: str) -> str:
        if url == EMBEDDED:
            return url
        if url.startswith("<"):
            raise ValueError(
                f"still the placeholder {url!r}: write the evaluation service's URL "
                "(scheme://host[:port]), or 'embedded' for the reference service"
            )
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"must be 'embedded' or scheme://host[:port] (got {url!r})")
        url = url.rstrip("/")
        if url.endswith("/v1"):
            raise ValueError("leave out the /v1 path: the client adds it")
        parts = urlsplit(url)
        if not parts.hostname:
            raise ValueError(f"must be 'embedded' or scheme://host[:port] (got {url!r})")
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


def origin(url: str) -> str:
    """scheme://host:port of `url`, the default port written out, credentials left out."""
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme, 0)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}:{port}"


class LimitsConfig(_Section):
    requests_per_minute: Positive = REQUESTS_PER_MINUTE  # the account's (spec section 8)
    tokens_per_second: Positive = TOKENS_PER_SECOND
    headroom: Annotated[float, Field(gt=0, le=1)] = 0.995  # pace at this share of the limits


class RetriesConfig(_Section):
    """The client's patience; the defaults are RetryPolicy's (evalpipe.config.retry)."""

    max_attempts: PositiveInt = RetryPolicy.max_attempts
    base_delay: Positive = RetryPolicy.base_delay
    max_delay: Positive = RetryPolicy.max_delay
    attempt_timeout: Positive = RetryPolicy.attempt_timeout

    def policy(self) -> RetryPolicy:
        return RetryPolicy(self.max_attempts, self.base_delay, self.max_delay, self.attempt_timeout)


class ConcurrencyConfig(_Section):
    actors: PositiveInt = 2
    max_in_flight: PositiveInt | None = None  # per actor; default covers rate x latency


class CacheConfig(_Section):
    enabled: bool = True  # used only when the model is a versioned ID (never for an alias)
    path: Path | None = (
        None  # a directory (or a .sqlite3 file); None: evalpipe.cache.answers's default
    )
    max_age_days: Positive | None = None  # older answers are not used, and are pruned


class PricingConfig(_Section):
    """Dollars per million input tokens, by versioned model; `default` for a model not listed.
    Without a price the plan and the summary give tokens and say the cost is unknown."""

    default: Positive | None = None
    models: dict[str, Positive] = {}


class JobConfig(_Section):
    input: InputConfig
    output: OutputConfig
    service: ServiceConfig
    model: str
    pricing: PricingConfig = PricingConfig()
    limits: LimitsConfig = LimitsConfig()
    retries: RetriesConfig = RetriesConfig()
    concurrency: ConcurrencyConfig = ConcurrencyConfig()
    cache: CacheConfig = CacheConfig()
    questions: dict[str, Any]

    @cached_property
    def parsed_questions(self) -> dict[str, ParsedQuestion]:
        return validate_questions(self.questions)

    @property
    def state_columns(self) -> tuple[str, ...]:
        state = self.input.state
        return (state,) if isinstance(state, str) else state

    @property
    def model_is_alias(self) -> bool:
        return self.model in MODEL_ALIASES

    def config_hash(self) -> str:
        """SHA-256 of the effective config (the file with its `--set` overrides, defaults
        filled in), as the manifest records it: two runs with one hash ran one config."""
        return hashlib.sha256(canonical(self.model_dump(mode="json"))).hexdigest()

    def fingerprint(self) -> str:
        """A digest of what determines the answers: rerunning with another one must not mix."""
        parts = {
            "questions": question_dicts(self.parsed_questions),
            "model": self.model,
            "service": self.service.identity,
            "id_column": self.input.id_column,
            "state": list(self.state_columns)
            if isinstance(self.input.state, tuple)
            else self.input.state,
        }
        return hashlib.blake2b(canonical(parts), digest_size=16).hexdigest()
