"""One exception tree for evalpipe, so every failure has a type, an exit code and a safe message.

Exceptions here cross Ray actor boundaries, so each carries plain data only (strings, numbers)
and pickles by re-calling its constructor (`__reduce__`). Lower-layer errors (httpx, aiohttp,
pyarrow, yaml, pydantic, OS errors) are mapped to this tree where they arise, with
`raise Mapped(msg) from None` or `from exc`; a call's failures in one place, the client's
`failures` module. No message ever contains an API key.

    EvalpipeError                      exit 1 unless a subclass says otherwise
    ├── UsageError                     exit 2: found before any request is sent
    │   ├── ConfigError                a bad config key or value (names the key path)
    │   ├── InputError                 a bad input path, file, column or id
    │   ├── ContractError              a request that breaks the service contract (names the path)
    │   ├── MissingKeyError            the API-key variable is not set
    │   ├── ServiceUnreachable         the service cannot be reached at start-up
    │   │   ├── HostNotFound           its host name does not resolve
    │   │   ├── CertificateError       its certificate is not trusted, expired or for another name
    │   │   ├── SchemeMismatch         http:// to a service that speaks https, or the reverse
    │   │   └── ProxyError             the proxy cannot be reached or refused the tunnel
    │   ├── ResumeConflict             output written by a job with another config
    │   └── OutputLocked               exit 9: another run holds the output (a retry waits it out)
    ├── AuthError                      exit 3: the service refused the key
    ├── TooManyErrors                  exit 4: more rows in error than --max-error-rate allows
    ├── BudgetLost                     the account's budget actor died and was not replaced
    ├── OutputError                    the output directory cannot be written mid-run
    │   ├── OutputFull                 exit 5: its file system is full (names the space needed)
    │   └── LeaseLost                  exit 9: the output's lease lapsed unconfirmed or was taken
    ├── CostCapReached                 exit 6: the next request would pass --max-cost
    ├── DeadlineReached                exit 7: --max-duration or --deadline came
    ├── CanaryFailed                   exit 8: the canary's answers moved; no corpus row was sent
    └── CallError                      one request failed: in a job, a row error, never fatal
        ├── RejectedError              422 and other refusals retrying cannot mend (400, 413...)
        │   ├── ContextLengthError     422 for length: over the service's context limit
        │   └── TooManyQuestionsError  422 naming `questions`: more per request than accepted
        ├── RateLimitedError           429 until the attempts ran out
        ├── OverloadedError            529 until the attempts ran out
        ├── ServerError                408 / 5xx until the attempts ran out
        ├── NetworkError               timeouts, refused or dropped connections
        └── InvalidResponseError       a body that breaks the contract or is not JSON
"""

from __future__ import annotations

from typing import Any, ClassVar

# Row error types that are not call failures: decided before sending (a `context_limit` may
# also come from the service).
INVALID_STATE = "invalid_state"
CONTEXT_LIMIT = "context_limit"


def one_line(text: str, limit: int | None = None) -> str:
    """`text` as one line, whitespace runs made single spaces; if `limit` is given, at most
    that many characters (a longer text ends in "..."). The one way messages are flattened."""
    flat = " ".join(text.split())
    if limit is None or len(flat) <= limit:
        return flat
    return flat[: max(0, limit - 3)] + "..."


def first_line(exc: BaseException) -> str:
    """A lower layer's error as a fragment of a one-line message: its first line (an OS
    error's own text), at most 300 characters."""
    text = getattr(exc, "strerror", None) or str(exc).strip()
    return one_line(text.splitlines()[0], 300) if text else type(exc).__name__


class EvalpipeError(Exception):
    """Base of every evalpipe error; `str(exc)` is one line for the user."""

    exit_code: ClassVar[int] = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.__class__, (self.message,))

    def __str__(self) -> str:
        return self.message

    def one_line(self) -> str:
        """The stderr form: `ErrorType: what went wrong and what to do`."""
        return f"{self.__class__.__name__}: {one_line(self.message)}"


class UsageError(EvalpipeError):
    """Something the user can fix, found before any evaluate request is sent."""

    exit_code = 2


class ConfigError(UsageError):
    """A config key is missing, unknown or has a bad value."""


class InputError(UsageError):
    """The input path, file, columns or ids are unusable."""


class MissingKeyError(UsageError):
    """The environment variable that should hold the API key is not set."""


class ServiceUnreachable(UsageError):
    """The service did not answer at start-up within the bounded wait."""


class HostNotFound(ServiceUnreachable):
    """The host name of `service.base_url` (or of the proxy) does not resolve: a typo, or a
    name only the company's DNS knows. No retry is made: waiting does not mend a name."""


class CertificateError(ServiceUnreachable):
    """The service answered, but its TLS certificate is not trusted (signed by a CA this
    machine does not know: point SSL_CERT_FILE or SSL_CERT_DIR at the company's CA), has
    expired, or names another host."""


class SchemeMismatch(ServiceUnreachable):
    """`service.base_url` says http:// to a service that speaks https, or https:// to one that
    speaks plain http."""


class ProxyError(ServiceUnreachable):
    """The proxy from HTTPS_PROXY (or HTTP_PROXY, ALL_PROXY) cannot be reached, or refused or
    failed the tunnel to the service (its status is named; its credentials never are)."""


class ResumeConflict(UsageError):
    """The output directory holds rows from a job with a different config."""


class ContractError(UsageError):
    """A request that breaks the service contract; `issues` holds (path, message, type)."""

    def __init__(self, message: str, issues: tuple[tuple[str, str, str], ...] = ()) -> None:
        super().__init__(message)
        self.issues = tuple(issues)

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.__class__, (self.message, self.issues))


class OutputLocked(UsageError):
    """Another run holds the output (one run per output at a time): found before anything is
    sent, like a usage error, but not the user's to fix: a scheduler's retry resumes once the
    other run lets go, so it has an exit code of its own, which no scheduler list refuses."""

    exit_code = 9


class TooManyErrors(EvalpipeError):
    """The job finished and wrote everything, but more of its rows ended in error than
    `--max-error-rate` allows: a scheduler should raise an alert."""

    exit_code = 4


class AuthError(EvalpipeError):
    """The service answered 401: the key is missing, wrong or revoked."""

    exit_code = 3


class BudgetLost(EvalpipeError):
    """The account's budget actor died and no replacement came in time; rows are kept."""


class OutputError(EvalpipeError):
    """Writing the output failed mid-run (permissions, a store that went away); committed
    rows are kept."""


class OutputFull(OutputError):
    """The output's file system (or the local journal's) is full: the run stopped at once
    with the rows it finished journaled; free the space named and run the same command."""

    exit_code = 5


class LeaseLost(OutputError):
    """With a shared tier, the run lost the output's lease mid-run: it could not confirm it
    before it lapsed (the tier or this host stalled), or another run took it. The run stopped
    sending and committed nothing more (what was in flight is journaled on this host); a
    scheduler's retry resumes once the output is free, as after `OutputLocked`."""

    exit_code = OutputLocked.exit_code


class CostCapReached(EvalpipeError):
    """The run stopped at its cost cap (`--max-cost`, `limits.max_cost_usd`): the next request
    would have passed it. The requests in flight ended and were kept; the message says what was
    spent and what the rest would cost. The same command with a higher cap, or none, resumes."""

    exit_code = 6


class DeadlineReached(EvalpipeError):
    """The run stopped when its time ran out (`--max-duration`, `--deadline`): it took no more
    rows, and the requests in flight ended and were kept. The same command resumes."""

    exit_code = 7


class CanaryFailed(EvalpipeError):
    """The canary (`canary.labels`, `--canary`), asked fresh before the corpus, agreed with
    its labels, or with the last run's answers on the same model, less than sampling noise
    allows: the run stopped before sending any corpus row. The message names the questions and
    the figures. Check what changed behind the model ID; once the new answers are accepted,
    run with `--set canary.compare_last=false` (they become the canary's new answers)."""

    exit_code = 8


class CallError(EvalpipeError):
    """One request failed for good: its rows get the subclass's `_error_type` and the message
    in `_error`, and the job goes on. Rows of the retryable types are sent again when the same
    command runs again (the job resumes)."""

    error_type: ClassVar[str] = "network"

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.__class__, (self.message, self.status))


class RejectedError(CallError):
    """The service refused the request as it is (422, or 400, 403, 404, 413 and the like):
    retrying cannot mend it, so it is not retried, nor sent again on resume. The row's `_error`
    quotes the service: fix the state or the question it names, then run with `--restart` (the
    answer cache keeps the other rows from being paid again)."""

    error_type = "rejected"


class ContextLengthError(RejectedError):
    """The service refused a request as over its context limit (by its own token count): the
    job sends the row's questions again in smaller groups; a single question refused ends the
    row as `context_limit`. Shorten that row's state (or the question's instructions);
    `evalpipe plan --calibrate N` measures the service's count, so the plan sees it coming."""

    error_type = CONTEXT_LIMIT


class TooManyQuestionsError(RejectedError):
    """The service refused a request for the number of its questions (a 422 whose detail names
    `questions`): a job packing rows sends the pack again as two halves, and packs fewer
    questions from then on; a row alone refused so is `rejected`: check the service's limits, or
    ask fewer questions per row."""


class RateLimitedError(CallError):
    """The service answered 429 (over the account's rate limits) on every attempt. Check that
    `limits` holds the account's figures, not more, and whether another program sends on the
    same key; run the same command again to send these rows again."""

    error_type = "rate_limited"


class OverloadedError(CallError):
    """The service answered 529 (overloaded) on every attempt. It is the service's load, not
    the job's: run the same command again later to send these rows again."""

    error_type = "overloaded"


class ServerError(CallError):
    """The service answered 408 or 5xx on every attempt. Run the same command again later to
    send these rows again; if it persists, `_error` quotes the service for its operators."""

    error_type = "server_error"


class NetworkError(CallError):
    """Every attempt timed out or lost its connection (refused, reset, dropped). Check that
    `service.base_url` is reachable from this machine (and any proxy in `HTTPS_PROXY`); a slow
    service may need a longer `retries.attempt_timeout`. Run the same command again to send
    these rows again.

    `cause` names what a connection error was, when it is known (a name that does not
    resolve, a certificate, a scheme, a proxy: `evalpipe.send.diagnosis.CAUSES`); the summary
    counts rows by it."""

    error_type = "network"

    def __init__(self, message: str, status: int | None = None, cause: str | None = None) -> None:
        super().__init__(message, status)
        self.cause = cause

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.__class__, (self.message, self.status, self.cause))


class InvalidResponseError(CallError):
    """Every attempt got an answer that is not JSON or breaks the service's contract (an answer
    missing, probabilities that do not sum to 1, ...), or one answer was larger than
    `service.max_response_mb` (not read further, not retried). Check that `service.base_url`
    is the evaluation service itself, not a proxy's or a login page; run the same command again
    to send these rows again."""

    error_type = "invalid_response"


# Error types worth another try when a job is resumed.
RETRYABLE_ERROR_TYPES: frozenset[str] = frozenset(
    {"rate_limited", "overloaded", "server_error", "network", "invalid_response"}
)


# Exit codes of a stop by signal (`evalpipe.engine.stopping` maps the signals to them).
SIGNAL_EXIT_CODES: dict[str, int] = {"SIGINT": 130, "SIGTERM": 143}

# The exit codes a scheduler's retry does not mend, so that its task or Job fails at once:
# bad config or input (2) and a refused key (3) fail again, a retry after the cost cap (6)
# would spend the cap again, and after too many rows in error (4) everything is written: the
# failure is the alert. Any other end is retried, and the retry resumes: the deadline (7), a
# stop by signal, a full disk once freed (5), anything else (1). `evalpipe.airflow`,
# `evalpipe.dagster` and the CronJob's `podFailurePolicy` (docs/how-to/schedulers.md) use it.
# The canary (8): the judge moved behind its model ID; a retry would ask it again and stop again.
# A held output or a lost lease (9) is retried: the other run lets go, and the retry resumes.
NO_RETRY_EXIT_CODES: frozenset[int] = frozenset({2, 3, 4, 6, CanaryFailed.exit_code})


def retry_mends(exit_code: int, error: EvalpipeError | None = None) -> bool:
    """Whether a scheduler should retry a run that ended with `exit_code` (`error`, if one
    ended it, is for callers that know it; the code alone decides): never after 0 or a code of
    `NO_RETRY_EXIT_CODES`. A held output or a lost lease (exit 9) is retried: the other run
    lets go of it, and the retry resumes."""
    return exit_code != 0 and exit_code not in NO_RETRY_EXIT_CODES


def exit_codes() -> list[tuple[str, str]]:
    """Every exit code of `evalpipe run` with what it means, in one table: the one source of
    `--help`'s epilog and of the reference's table (`docs/hooks/reference.py`)."""
    return [
        ("0", "the job finished (rows in error are counted in the summary, not fatal)"),
        (str(UsageError.exit_code), "bad config or input: found before any request was sent"),
        (str(AuthError.exit_code), "the service refused the key"),
        (str(TooManyErrors.exit_code), "more rows in error than --max-error-rate allows "
         "(everything was written)"),
        (str(OutputFull.exit_code), "the output's disk is full (free the space named, then "
         "the same command resumes)"),
        (str(CostCapReached.exit_code), "the cost cap was reached (--max-cost, "
         "limits.max_cost_usd): committed rows are kept; a higher cap, or none, resumes"),
        (str(DeadlineReached.exit_code), "the deadline came (--max-duration, --deadline): "
         "committed rows are kept; the same command resumes"),
        (str(CanaryFailed.exit_code), "the canary's answers moved beyond sampling noise "
         "(canary.labels, --canary): no corpus row was sent"),
        (str(OutputLocked.exit_code), "the output is held by another run, or (with a shared "
         "tier) its lease lapsed unconfirmed or was taken mid-run: nothing more was committed; "
         "a retry resumes once the other run lets go"),
        *((str(code), f"stopped by {name}: committed rows are kept; the same command resumes")
          for name, code in SIGNAL_EXIT_CODES.items()),
        (str(EvalpipeError.exit_code), "anything else fatal"),
    ]  # fmt: skip
