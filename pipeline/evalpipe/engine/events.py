"""What a run says on stderr, for a person (text, the default) or for a program (JSON lines).

A scheduler reads a job's log with a program. With `--log-format json` (or
`EVALPIPE_LOG_FORMAT=json`) every line the job writes to stderr is one JSON object:

    {"event": "start", "time": "2026-11-23T02:00:01.123Z", "run_id": "...", ...}

with `event` one of `start`, `progress`, `warning`, `error`, `stopped`, `summary` (and `metrics`,
with the `url` of the run's Prometheus metrics, when `--metrics-port` serves them; `canary`, the
canary's result, when the job has one; `round`, each round of `evalpipe estimate`; `maintain`,
when a finished run starts keeping its table), the time in
ISO 8601 UTC, the run's id, and that event's figures; nothing else is printed, on stderr or
stdout. In text form the same events are the lines a person reads: warnings and errors as one
line each (`Warning: ...`, `ErrorType: ...`), progress lines (or a bar on a terminal, drawn by
`evalpipe.engine.progress`), and the summary on stdout. Every line passes
`evalpipe.stores.scrubbed` on its way out: no URL in it keeps a user or password, and no
proxy's password is in it in any form.
"""

from __future__ import annotations

import io
import os
import sys
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

import orjson

from evalpipe.errors import EvalpipeError
from evalpipe.stores import scrubbed

LogFormat = Literal["text", "json"]
FORMATS: tuple[LogFormat, ...] = ("text", "json")
FORMAT_ENV = "EVALPIPE_LOG_FORMAT"


def default_format() -> LogFormat:
    """The format `EVALPIPE_LOG_FORMAT` names (text when unset or unknown)."""
    value = os.environ.get(FORMAT_ENV, "text").strip().lower()
    return "json" if value == "json" else "text"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class EventLog:
    """The run's voice on stderr; see the module docstring."""

    def __init__(
        self, fmt: LogFormat = "text", run_id: str = "", stream: TextIO | None = None
    ) -> None:
        self.format = fmt
        self.run_id = run_id
        self._stream = stream
        self.quiet = False  # drop what libraries print (set once the run is stopping)
        self._unguarded: TextIO | None = None

    def guard_stderr(self) -> None:
        """From now on, what anything else writes to `sys.stderr` (Ray's messages, Python
        warnings) goes through `foreign`: a `warning` event in JSON form, so that every line
        stays one JSON object. The log itself keeps writing to the real stderr."""
        if self._stream is None:
            self._stream = sys.stderr
        self._unguarded = sys.stderr
        sys.stderr = _Guard(self, self._stream)

    def release_stderr(self) -> None:
        """`sys.stderr` as it was before `guard_stderr`."""
        if self._unguarded is not None:
            sys.stderr, self._unguarded = self._unguarded, None

    def foreign(self, line: str) -> None:
        """A line another library wrote to stderr."""
        if self.quiet or not line.strip():
            return
        if self.is_json:
            self.emit("warning", message=line.strip(), source="library")
        else:
            print(scrubbed(line), file=self.stream, flush=True)

    @property
    def stream(self) -> TextIO:
        return self._stream or sys.stderr  # looked up late: test runners swap sys.stderr

    @property
    def is_json(self) -> bool:
        return self.format == "json"

    def emit(self, event: str, text: str | None = None, **figures: Any) -> None:
        """One event: a JSON line, or `text` (nothing when it is None) in text form."""
        if self.is_json:
            record = {"event": event, "time": _now(), "run_id": self.run_id, **figures}
            line = orjson.dumps(record, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
        elif text is None:
            return
        else:
            line = text
        print(scrubbed(line), file=self.stream, flush=True)

    def warning(self, message: str) -> None:
        self.emit("warning", f"Warning: {message}", message=message)

    def error(self, exc: EvalpipeError) -> None:
        self.emit(
            "error",
            exc.one_line(),
            error_type=type(exc).__name__,
            message=str(exc),
            exit_code=exc.exit_code,
        )

    def summary(self, figures: dict[str, Any], text: str) -> None:
        """The summary: a `summary` event, or `text` on stdout for a person."""
        if self.is_json:
            self.emit("summary", **figures)
        else:
            print(scrubbed(text), flush=True)


class _Guard(io.TextIOBase):
    """`sys.stderr` while a run is on: complete lines go to `EventLog.foreign`."""

    def __init__(self, log: EventLog, real: TextIO) -> None:
        self._log = log
        self._real = real
        self._partial = ""

    def write(self, text: str) -> int:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            self._log.foreign(line)
        return len(text)

    def flush(self) -> None:
        self._real.flush()

    def fileno(self) -> int:
        return self._real.fileno()

    def isatty(self) -> bool:
        return False
