"""The job config: YAML in, typed and validated objects out, before anything is sent.

Every error is a ConfigError whose one-line message starts with the key path that is wrong
(`limits.requests_per_minute: must be greater than 0`); an unknown key suggests the likely one.
The questions are validated by the contract module, so a question the service would refuse
with 422 is refused here first. Paths in the config are relative to the working directory;
`input.path` and `output.path` may also be object-store URIs (`evalpipe.stores.location`).
"""

from __future__ import annotations

import hashlib
import re
from datetime import date, datetime
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from evalpipe.config.endpoints import MetricsConfig, ServiceConfig
from evalpipe.config.guards import parse_deadline, parse_duration
from evalpipe.config.retry import RetryPolicy
from evalpipe.config.section import ConfigSection, Positive, PositiveInt
from evalpipe.config.shared import SharedConfig
from evalpipe.config.trust import CalibrationConfig, CanaryConfig, trust_fingerprint
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
from evalpipe.stores import Location, parse_location, refusal

MODEL_ALIASES = ("model-latest", "model-preview")
ParsedQuestion = NoulQuestion | ChoiceQuestion | ScoreQuestion


def _place(value: Any) -> Location:
    """A local path, or a URI such as s3://bucket/prefix kept as written; a URI holding
    credentials is refused (they belong in the store's variables: `evalpipe.stores.urls`)."""
    location = parse_location(value)
    refused = refusal(location) if isinstance(location, str) else None
    if refused is not None:
        raise ValueError(refused)
    return location


Place = Annotated[Location, BeforeValidator(_place)]


class InputConfig(ConfigSection):
    path: Place
    """A Parquet file, a directory of them (`.parquet`, `.parq`, `.pq`; not recursive; names
    starting with `_` or `.` are skipped), or an object-store URI (`s3://`, `gs://`, `abfs://`,
    `hdfs://`). Every file must have the columns used, with the same types."""
    id_column: str
    """The column that identifies a row: unique, never null, and of a scalar type (integer
    or string). Checked before anything is sent."""
    state: str | tuple[str, ...]
    """One column name: its text is the state. A list of column names: the state is an object
    `{column: value}`, and questions can point at its fields by name in backticks."""
    batch_rows: PositiveInt = 8192
    """Rows read from the corpus at a time: memory follows this, not the corpus size."""

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


# The formats a job may write, as `output.format` names them, and those that keep a run's
# `output.partition` inside the table: each is one module behind `evalpipe.output`'s door, which
# chooses among them (tests/test_formats.py checks that these agree with the door's registry).
OutputFormat = Literal["parquet", "delta", "iceberg"]
PARTITIONED_FORMATS: tuple[OutputFormat, ...] = ("delta", "iceberg")
_PARTITION_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A partition's value names a folder (`dt=2026-11-27`): one plain path segment, never `..`, a
# `/` or a character a store's key or a shell would read otherwise; a timestamp's `:` and `+` are
# fine. Checked before anything is sent (it may come from a scheduler's run configuration).
_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+-]{0,127}")


def partition_refusal(key: str, value: str) -> str | None:
    """Why `value` may not be partition `key`'s (None: it may): a value that is not one plain
    path segment would move the output's folder elsewhere."""
    if _SEGMENT.fullmatch(value) and ".." not in value:
        return None
    return (
        f"partition value of {key!r} must be one plain path segment (letters, digits and "
        "._:+- , not starting with a dot, no '..', at most 128 characters), such as 2026-11-27"
    )


def _partition_values(value: Any) -> Any:
    """`{column: value}`; YAML reads `2026-11-27` as a date: it is kept as the ISO text."""
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        if not isinstance(key, str) or not _PARTITION_KEY.match(key) or key.startswith("_"):
            raise ValueError(f"partition column {key!r} must be a name like dt or night")
        if isinstance(item, date | datetime):
            item = item.isoformat()
        elif isinstance(item, int) and not isinstance(item, bool):
            item = str(item)
        if not isinstance(item, str) or not item:
            raise ValueError(f"partition value of {key!r} must be text, such as 2026-11-27")
        why = partition_refusal(key, item)
        if why is not None:
            raise ValueError(why)
        out[key] = item
    return out


_SECRET_PROPERTY = re.compile(r"secret|password|token|credential|access-key|session", re.I)


def _catalog(value: Any) -> Any:
    """`output.catalog`: text properties, none of them a secret (they belong in variables)."""
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        if _SECRET_PROPERTY.search(str(key)):
            raise ValueError(
                f"'{key}' is a secret: set it in PYICEBERG_CATALOG__<NAME>__"
                f"{str(key).upper().replace('.', '_').replace('-', '_')} (or the store's own "
                "variables), never in the config"
            )
        text = str(item).lower() if isinstance(item, bool) else str(item)
        refused = refusal(text, "the catalog's variables (PGPASSWORD, PYICEBERG_CATALOG__*)")
        if "://" in text and refused is not None:
            raise ValueError(f"'{key}' {refused}")
        out[str(key)] = text
    return out


class OutputConfig(ConfigSection):
    path: Place
    """The output directory (created if needed), or an object-store URI. It must not hold
    Parquet files that evalpipe did not write."""
    staging: Path | None = None  # default: the cache folder (evalpipe.stores.location.staging_dir)
    """Object-store outputs only: the local folder under which each output keeps its journal
    and lock. Unset: `$XDG_CACHE_HOME/evalpipe/staging` (else `~/.cache/evalpipe/staging`)."""
    part_rows: PositiveInt = 5000  # rows per part file at most
    """Rows per part file at most. Finished rows gather in the journal until there are this
    many, then become one part; the last part of a run may hold fewer."""
    flush_seconds: Positive = 0.5  # finished rows are fsynced to the journal at least this often
    """How often, at most, finished rows are fsynced to the journal. Rows reach the journal
    within about 0.1 s, so they survive `kill -9` of the job at once; the fsync protects them
    from a machine crash too."""
    format: OutputFormat = "parquet"
    """`parquet`: a directory of Parquet part files. `delta`: a Delta Lake table (written
    with `deltalake`), one transaction per committed batch, exactly once across kill -9 and
    resume; `output.path` is then the table's root, and many nights can share it
    (`output.partition`)."""
    partition: Annotated[dict[str, str], BeforeValidator(_partition_values)] = Field(
        default_factory=dict
    )
    """`delta` only: partition values this run's rows carry, e.g. `{dt: 2026-11-27}` (or
    `--set output.partition.dt=2026-11-27`): a column per key on every row, the table
    partitioned by them; `--restart` replaces this partition only, a resume continues it."""

    table: str | None = None
    """`iceberg` only: the table's identifier in the catalog, `namespace.table` (created, with
    its namespace, by the first run; default `evalpipe.scores`); `output.path` is its location."""
    catalog: Annotated[dict[str, str], BeforeValidator(_catalog)] = Field(default_factory=dict)
    """`iceberg` only: the catalog, as pyiceberg's properties: `name` (default `evalpipe`),
    `type` (`sql`, `rest`, `glue`, ...), `uri` (`sqlite:///catalog.db`,
    `postgresql+psycopg2://user@host/db`, a REST URL), `warehouse`, and any other property of
    that catalog, passed through. Secrets never go here: pyiceberg reads
    `PYICEBERG_CATALOG__<NAME>__<PROPERTY>` variables, PostgreSQL `PGPASSWORD`, S3 the AWS chain.
    Empty, for a local output: a SQLite catalog in the output's folder (`_catalog.db`)."""
    maintain: bool = True
    """After a run that finished, its output kept by its format: a Delta table's night compacted
    into one file (per 100 MB), the table checkpointed and the retention applied (`evalpipe
    maintain` does the same for every night, from a scheduler). `false`: leave the table as
    the run wrote it."""
    retention_days: Positive = 7
    """`delta` only: how long files that no current version needs (those compaction replaced)
    are kept, so time travel to a version that old still reads; Delta's default, a week."""
    z_order: tuple[str, ...] = ()
    """`delta` only: columns to order each night's compacted file by (`optimize.z_order`), for
    readers that filter on them within a night; empty (the default): plain compaction."""

    @model_validator(mode="after")
    def _partitioned_table(self) -> OutputConfig:
        if self.partition and self.format not in PARTITIONED_FORMATS:
            takes = " or ".join(PARTITIONED_FORMATS)
            raise ValueError(f"output.partition needs output.format: {takes}")
        return self


class LimitsConfig(ConfigSection):
    requests_per_minute: Positive = REQUESTS_PER_MINUTE  # the account's default limit
    """The account's request limit, per minute. The whole job paces itself below it, however
    many workers send; with `embedded`, the reference service enforces the same limit."""
    tokens_per_second: Positive = TOKENS_PER_SECOND
    """The account's input-token limit, per second, paced the same way."""
    headroom: Annotated[float, Field(gt=0, le=1)] = 0.995  # pace at this share of the limits
    """Pace at this share of both limits. The slack absorbs network jitter, so no 429s are
    earned."""
    max_cost_usd: Positive | None = None
    """The run's cost cap in dollars (`--max-cost`): it never sends a request whose estimated
    cost, added to what it was billed and what is in flight, would pass the cap; it then stops
    as after SIGTERM and exits 6. Needs a price (`pricing`). The cap is per run: the same
    command resumes with a cap of its own (or none). `plan` says when the corpus costs more."""
    max_duration: Annotated[Positive | None, BeforeValidator(parse_duration)] = None
    """The longest the run may take (`--max-duration`): seconds, or `90s`, `30m`, `6h`,
    `1h30m`. When it is over, the run stops as after SIGTERM (requests in flight end and are
    kept) and exits 7; the same command resumes. `plan` says whether the corpus fits."""
    deadline: Annotated[str | None, BeforeValidator(parse_deadline)] = None
    """When the run must stop (`--deadline`): a local time `HH:MM`, quoted (the next such time
    after the run starts), or an ISO date and time. As `max_duration`, exit 7; with both, the
    earlier counts."""


class RetriesConfig(ConfigSection):
    """The client's patience; the defaults are RetryPolicy's (evalpipe.config.retry)."""

    max_attempts: PositiveInt = RetryPolicy.max_attempts
    """Attempts per request, the first included, before its rows get an error type. The
    defaults add up to about 5 minutes of backoff: patient, but bounded."""
    base_delay: Positive = RetryPolicy.base_delay
    """Seconds. Before retry *n* the client sleeps a random time up to
    `min(max_delay, base_delay * 2**n)`; a `retry-after-ms` or `retry-after` header on a 429 or
    529 replaces the draw."""
    max_delay: Positive = RetryPolicy.max_delay
    """Seconds: the cap of one backoff sleep, and of a service's retry-after."""
    attempt_timeout: Positive = RetryPolicy.attempt_timeout
    """Seconds one attempt may take before it counts as a `network` failure."""

    def policy(self) -> RetryPolicy:
        return RetryPolicy(self.max_attempts, self.base_delay, self.max_delay, self.attempt_timeout)


class ConcurrencyConfig(ConfigSection):
    actors: PositiveInt = 2
    """Ray actors that send requests, each with an asyncio loop and one HTTP client. On a
    cluster, give at least one per node."""
    max_in_flight: PositiveInt | None = None  # per actor; default covers rate x latency
    """Requests in flight per actor. Unset: enough to cover 4 s of latency at the actor's share
    of the rate (between 32 and 512)."""


class CacheConfig(ConfigSection):
    enabled: bool = True  # used only when the model is a versioned ID (never for an alias)
    """Use the answer cache: what earlier runs paid for is not paid again. Only with a
    versioned model, never with an alias."""
    path: Path | None = None  # a directory or a .sqlite3 file; None: the default
    """The cache's directory (it holds `answers.sqlite3`), or a file ending `.sqlite3`,
    `.sqlite` or `.db`. Unset: `$XDG_CACHE_HOME/evalpipe`, else `~/.cache/evalpipe`. Keep it on
    a local disk."""
    max_age_days: Positive | None = None  # older answers are not used, and are pruned
    """Answers older than this many days are not used, and are pruned at the end of a run.
    Unset: kept until `evalpipe cache prune`; with a shared tier (`shared.url`), 30 days, the
    answers' time to live in it (a shared Redis must not fill)."""


class PricingConfig(ConfigSection):
    """Dollars per million input tokens, by versioned model; `default` for a model not listed.
    Without a price the plan and the summary give tokens and say the cost is unknown."""

    default: Positive | None = None
    """Dollars per million input tokens for a model not under `pricing.models`. Unset, and the
    model not listed: plans and summaries give tokens and say the cost is unknown."""
    models: dict[str, Positive] = Field(default_factory=dict)
    """Dollars per million input tokens, by versioned model ID. `plan` says which key the
    price came from."""


class PackingConfig(ConfigSection):
    """Rows per request: several short rows share one request as fields of an object state,
    each asked its questions by name (`evalpipe.planning.packing`), so a corpus of short rows
    is paced by the token limit, not the request limit."""

    rows: Annotated[int, Field(ge=1)] | Literal["auto"] = 1
    """`1`: one row per request. A number N: up to N rows per request, within the context
    limits and the most questions per request the service accepts (learned from its 422s).
    `auto`: measure first, on a sample of the corpus asked alone and packed, and pack at the
    largest number of rows whose answers agree with the rows' answers alone and whose cost
    per row stays within `max_cost_ratio`; else one row per request, saying why."""
    min_agreement: Annotated[float, Field(gt=0, le=1)] = 0.9
    """`auto`: the lower bound of the 95% interval of every question's agreement (packed
    against alone: the yes/no decision, the choice, the most probable level) must reach this."""
    max_cost_ratio: Positive = 1.25
    """`auto`: billed input tokens per row packed, at most this many times alone."""
    sample_rows: Annotated[int, Field(ge=2)] = 200
    """`auto`: rows of the corpus asked both alone and packed before the run packs (they keep
    their answers alone)."""


class JobConfig(ConfigSection):
    input: InputConfig
    """Where the corpus is, and which columns make a row's id and state."""
    output: OutputConfig
    """Where the output table is written, and how its rows are kept safe."""
    service: ServiceConfig
    """The evaluation service, and the variable that holds its key."""
    model: str
    """The model ID sent with every request. Pin a versioned ID (`model-1.13.0`) for scheduled
    jobs: an alias (`model-latest`, `model-preview`) works but prints a warning, because its
    answers change when it moves, and it never uses the answer cache."""
    pricing: PricingConfig = PricingConfig()
    """What the model's input tokens cost, for the plan's estimate and the run's summary."""
    limits: LimitsConfig = LimitsConfig()
    """The account's rate limits, which the whole job paces below."""
    retries: RetriesConfig = RetriesConfig()
    """How patient the client is with a request that fails."""
    concurrency: ConcurrencyConfig = ConcurrencyConfig()
    """How many workers send, and how many requests each keeps in flight."""
    cache: CacheConfig = CacheConfig()
    """The answer cache across runs, shared by the jobs of one machine."""
    questions: dict[str, Any]
    """The API's questions map: each key names a question of type `noul`, `choice` or
    `score`, with its `instructions` and `criteria`. It is validated as the service validates
    it, so a question the service would refuse with 422 is refused before the run, with its key
    path. A score question with fewer than 2 levels gets a warning."""
    metrics: MetricsConfig = MetricsConfig()
    """Prometheus metrics while the run lasts: served on a port, pushed to a Pushgateway."""
    name: str | None = None
    """The job's name: the Pushgateway's `job` group and OpenLineage's job name. Unset: the
    config file's name without its extension (`nightly` for `configs/nightly.yaml`), else
    `evalpipe`."""
    packing: PackingConfig = PackingConfig()
    """How many rows share one request (`rows`: 1, N or auto)."""
    shared: SharedConfig = SharedConfig()
    """The shared tier (Redis) that hosts on one account share; unset, nothing is shared."""
    calibration: CalibrationConfig = CalibrationConfig()
    """Calibrated columns from `evalpipe calibrate`'s file, and abstention with a promise."""
    canary: CanaryConfig = CanaryConfig()
    """Labelled rows asked fresh before the corpus: the run stops when the judge moved."""

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
            "state": state if isinstance(state := self.input.state, str) else list(state),
            **trust_fingerprint(self.calibration),
        }
        return hashlib.blake2b(canonical(parts), digest_size=16).hexdigest()
