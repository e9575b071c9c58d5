"""The embedded service's settings: one dataclass for every `serve` flag but host and port.

The click command, the thread-mode server and the process-mode launcher all start from a
`ServiceSettings`, so a flag exists in one place; `to_args` turns settings back into the flags
of a child process (the key excepted: it travels in the environment, never on a command line).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields

from evalpipe.contract import REQUESTS_PER_MINUTE, TOKENS_PER_SECOND
from evalpipe.errors import ConfigError
from evalpipe.service.counting import TOKEN_RULES, TokenRule
from evalpipe.service.faults import FaultRates
from evalpipe.service.ratelimit import check_limits
from evalpipe.service.rehearsal import Rehearsal

DEFAULT_RPM = REQUESTS_PER_MINUTE  # the real service's limits, unless told otherwise
DEFAULT_TPS = TOKENS_PER_SECOND
DEFAULT_MAX_INFLIGHT = 1024
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
DEFAULT_SLOW_SECONDS = 5.0
KEY_ENV = "EVAL_API_KEY"


@dataclass(frozen=True)
class LimitStep:
    """At `at` seconds after start, set the limits given (None leaves one as it is)."""

    at: float
    rpm: float | None = None
    tps: float | None = None


_STEP = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*:\s*(.+?)\s*$")


def parse_schedule(text: str) -> tuple[LimitStep, ...]:
    """`"30:rpm=600,tps=100000;60:rpm=1200"` as steps sorted by time; ConfigError if malformed."""
    steps = []
    for part in filter(str.strip, text.split(";")):
        match = _STEP.match(part)
        if not match:
            raise ConfigError(f"limit schedule: {part.strip()!r} is not SECONDS:rpm=N,tps=N")
        limits: dict[str, float] = {}
        for assignment in match.group(2).split(","):
            name, _, value = (s.strip() for s in assignment.partition("="))
            if name not in ("rpm", "tps") or name in limits:
                raise ConfigError(f"limit schedule: {assignment.strip()!r}: set rpm or tps once")
            try:
                limits[name] = float(value)
            except ValueError:
                raise ConfigError(f"limit schedule: {assignment.strip()!r}: not a number") from None
        check_limits(limits.get("rpm"), limits.get("tps"))
        steps.append(LimitStep(float(match.group(1)), limits.get("rpm"), limits.get("tps")))
    return tuple(sorted(steps, key=lambda step: step.at))


# What `POST /_admin/faults` (and `EmbeddedService.set_faults`) may change at run time.
FAULT_FIELDS = ("fault_529", "fault_500", "fault_drop", "fault_truncate", "fault_slow",
                "fault_hang", "slow_seconds", "overconfidence", "drift", "drift_seed")  # fmt: skip


@dataclass(frozen=True)
class ServiceSettings:
    """Everything the embedded service is started with; defaults match `evalpipe serve`."""

    api_key: str = field(repr=False)  # never shown: not in repr, logs or command lines
    rpm: float = DEFAULT_RPM
    tps: float = DEFAULT_TPS
    limit_schedule: str = ""  # "SECONDS:rpm=N,tps=N;..." after start
    max_inflight: int = DEFAULT_MAX_INFLIGHT
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    latency: float = 0.0  # median seconds per request
    fault_529: float = 0.0
    fault_500: float = 0.0
    fault_drop: float = 0.0
    fault_truncate: float = 0.0
    fault_slow: float = 0.0
    fault_hang: float = 0.0
    slow_seconds: float = DEFAULT_SLOW_SECONDS
    fault_seed: int = 0
    log_requests: bool = False
    token_rule: TokenRule = "words"  # how it counts tokens (`evalpipe.service.counting`)
    token_factor: float = 1.0  # ... and a factor on every count
    # Packed requests (`evalpipe.service.evaluator`: questions pointing at a field of the state):
    pack_sway: float = 0.0  # share of pointed answers the rest of the state sways
    bill_per_question: bool = False  # bill the state once per question, not once per request
    max_questions: int = 0  # 422 naming `questions` beyond this many per request (0: no cap)
    # A judge not to trust as it is (`evalpipe.service.rehearsal`): a known miscalibration, and
    # a share of states answered anew under the same model ID.
    overconfidence: float = 1.0
    drift: float = 0.0
    drift_seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.api_key, str) or not self.api_key.strip():
            raise ConfigError(f"api_key: the service needs a key (set {KEY_ENV} or --api-key)")
        check_limits(self.rpm, self.tps)
        for name in ("max_inflight", "max_body_bytes", "fault_seed", "max_questions", "drift_seed"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"{name}: must be a whole number (got {value!r})")
            if value < 1 and name not in ("fault_seed", "max_questions", "drift_seed"):
                raise ConfigError(f"{name}: must be at least 1 (got {value})")
        for name in ("latency", "slow_seconds"):
            value = getattr(self, name)
            if not (_is_number(value) and math.isfinite(value) and value >= 0):
                raise ConfigError(f"{name}: must be 0 or more seconds (got {value!r})")
        if not (_is_number(self.drift) and 0 <= self.drift <= 1):
            raise ConfigError(f"drift: must be a share from 0 to 1 (got {self.drift!r})")
        if not (_is_number(self.overconfidence) and 0 < self.overconfidence < math.inf):
            raise ConfigError(f"overconfidence: must be above 0 (got {self.overconfidence!r})")
        if not (_is_number(self.pack_sway) and 0 <= self.pack_sway <= 1):
            raise ConfigError(f"pack_sway: must be a share from 0 to 1 (got {self.pack_sway!r})")
        if self.max_questions < 0:
            raise ConfigError(
                f"max_questions: must be 0 (no cap) or more (got {self.max_questions})"
            )
        if self.token_rule not in TOKEN_RULES:
            raise ConfigError(f"token_rule: must be one of {', '.join(TOKEN_RULES)}")
        if not (_is_number(self.token_factor) and 0 < self.token_factor < math.inf):
            raise ConfigError(f"token_factor: must be a number above 0 (got {self.token_factor!r})")
        self.fault_rates()
        self.schedule()

    def rehearsal(self) -> Rehearsal:
        return Rehearsal(float(self.overconfidence), float(self.drift), self.drift_seed)

    def fault_rates(self) -> FaultRates:
        return FaultRates(
            overloaded=self.fault_529,
            server_error=self.fault_500,
            drop=self.fault_drop,
            truncate=self.fault_truncate,
            slow=self.fault_slow,
            hang=self.fault_hang,
        )

    def schedule(self) -> tuple[LimitStep, ...]:
        return parse_schedule(self.limit_schedule)

    def to_args(self) -> list[str]:
        """The `serve` flags for these settings, without the key."""
        args: list[str] = []
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name == "api_key" or value == item.default:
                continue
            flag = "--" + item.name.replace("_", "-")
            if isinstance(value, bool):
                args.append(flag)
            else:
                args += [flag, _number(value)]
        return args


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
