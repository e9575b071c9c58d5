"""The job config: YAML in, typed and validated objects out, before anything is sent.

Every error is a ConfigError whose one-line message starts with the key path that is wrong
(`limits.requests_per_minute: must be greater than 0`); an unknown key suggests the likely one.
The questions are validated by the contract module, so a question the service would refuse
with 422 is refused here first. Paths in the config are relative to the working directory;
`input.path` and `output.path` may also be object-store URIs (`evalpipe.stores.location`).
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from evalpipe.config.retry import RetryPolicy
from evalpipe.contract import (
    REQUESTS_PER_MINUTE,
    TOKENS_PER_SECOND,
    ChoiceQuestion,
    NoulQuestion,
    ScoreQuestion,
    canonical,
    path_of,
    question_dicts,
    validate_questions,
)
from evalpipe.errors import ConfigError, ContractError
from evalpipe.stores import Location, parse_location

EMBEDDED = "embedded"
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
    base_url: str = EMBEDDED
    api_key_env: str = "EVAL_API_KEY"
    transport: TransportKind = DEFAULT_KIND
    connect_wait: Positive = 10.0  # seconds to wait for the service at start-up
    latency: Annotated[float, Field(ge=0)] = 0.0  # embedded service only: median seconds/request

    @field_validator("base_url")
    @classmethod
    def _url(cls, url: str) -> str:
        if url == EMBEDDED:
            return url
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"must be 'embedded' or scheme://host[:port] (got {url!r})")
        url = url.rstrip("/")
        if url.endswith("/v1"):
            raise ValueError("leave out the /v1 path: the client adds it")
        return url


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


class JobConfig(_Section):
    input: InputConfig
    output: OutputConfig
    service: ServiceConfig = ServiceConfig()
    model: str
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

    def fingerprint(self) -> str:
        """A digest of what determines the answers: rerunning with another one must not mix."""
        parts = {
            "questions": question_dicts(self.parsed_questions),
            "model": self.model,
            "id_column": self.input.id_column,
            "state": list(self.state_columns)
            if isinstance(self.input.state, tuple)
            else self.input.state,
        }
        return hashlib.blake2b(canonical(parts), digest_size=16).hexdigest()


def _is_model(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, BaseModel)


def _suggest(loc: tuple[str | int, ...], model: type[BaseModel]) -> str:
    """'did you mean ...' for an unknown key, from the fields of the section it sits in."""
    section: Any = model
    for part in loc[:-1]:
        fields = section.model_fields if _is_model(section) else {}
        field = fields.get(str(part))
        if field is None or not isinstance(field.annotation, type):
            return ""
        section = field.annotation
    if not (isinstance(section, type) and issubclass(section, BaseModel)):
        return ""
    close = difflib.get_close_matches(str(loc[-1]), list(section.model_fields), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _config_error(exc: ValidationError) -> ConfigError:
    error = exc.errors(include_url=False)[0]
    loc = tuple(error["loc"])
    # Union members add their type names to the path; the user never wrote them.
    loc = tuple(p for p in loc if not (isinstance(p, str) and p.startswith(("str", "tuple["))))
    kind = error["type"]
    if kind == "extra_forbidden":
        message = "unknown key" + _suggest(loc, JobConfig)
    elif kind == "missing":
        message = "required key is missing"
    else:
        message = error["msg"].removeprefix("Value error, ")
    more = len(exc.errors()) - 1
    return ConfigError(f"{path_of(loc)}: {message}" + (f" (and {more} more)" if more else ""))


def parse_config(data: Any, source: str = "config") -> JobConfig:
    """Validate a config mapping; raises ConfigError naming the key path."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of keys (input, output, ...)")
    try:
        config = JobConfig.model_validate(data)
    except ValidationError as exc:
        raise _config_error(exc) from None
    try:
        config.parsed_questions  # noqa: B018 - validates the questions with the contract module
    except ContractError as exc:
        raise ConfigError(exc.message) from None
    return config


def parse_service(data: dict[str, Any]) -> ServiceConfig:
    """A `service` section on its own (for `evalpipe models --base-url ...`)."""
    try:
        return ServiceConfig.model_validate(data)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        message = error["msg"].removeprefix("Value error, ")
        raise ConfigError(f"service.{path_of(tuple(error['loc']))}: {message}") from None


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """`data` with each `KEY=VALUE` of `overrides` set, KEY a dotted path (`limits.headroom`)
    and VALUE parsed as YAML (`600` is a number, `[a, b]` a list). The result is validated like
    the file, so an unknown key gets the same message as one in the file."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        parts = key.split(".")
        if not sep or not all(parts):
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. output.path=out/today")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            raise ConfigError(f"--set {key}: the value is not valid YAML") from None
        node = data
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                section = ".".join(parts[: depth + 1])
                raise ConfigError(f"--set {key}: {section} is a value, not a section of keys")
            node = child
        node[parts[-1]] = value
    return data


def load_config(path: Path | str, overrides: Sequence[str] = ()) -> JobConfig:
    """Read a YAML job config, apply `--set` overrides, and validate the result."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{where}") from None
    if overrides and isinstance(data, dict):
        data = apply_overrides(data, overrides)
    return parse_config(data, str(path))
