"""The guard rails' values: a duration (`90s`, `30m`, `6h`, `1h30m`), a deadline (`06:00`, the
next such local time, or an ISO date and time) and the cost cap's need of a price.

They are parsed here, once, for the config keys (`limits.max_duration`, `limits.deadline`,
`limits.max_cost_usd`) and the flags that set them (`--max-duration`, `--deadline`, `--max-cost`),
so a bad value is the same one-line error whichever way it came. A deadline is kept as written
and becomes an instant when the run starts (`deadline_at`): `06:00` is the next 06:00 from then.
"""

from __future__ import annotations

import re
from datetime import date, datetime, time, timedelta
from typing import Any, NoReturn

_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(d|h|m|s)", re.IGNORECASE)
_WHOLE = re.compile(r"(?:\s*(?:\d+(?:\.\d*)?|\.\d+)\s*[dhms]\s*)+", re.IGNORECASE)
_CLOCK = re.compile(r"([01]?\d|2[0-3]):([0-5]\d)(?::([0-5]\d))?")
_UNIT_SECONDS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
DURATION_FORMS = "a number of seconds, or a duration such as 90s, 30m, 6h or 1h30m"
DEADLINE_FORMS = "a local time HH:MM (the next such time) or an ISO date and time"


def parse_duration(value: Any) -> Any:
    """Seconds of a duration: a number of seconds, or `90s`, `30m`, `6h`, `2d`, `1h30m`.
    None stays None; anything else is a ValueError saying the forms."""
    if value is None or isinstance(value, bool):
        return value if value is None else _bad_duration(value)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    if not isinstance(value, str):
        _bad_duration(value)
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    if not _WHOLE.fullmatch(text):
        _bad_duration(value)
    return float(sum(float(n) * _UNIT_SECONDS[u.lower()] for n, u in _PART.findall(text)))


def _bad_duration(value: Any) -> NoReturn:
    raise ValueError(f"{value!r} is not a duration: give {DURATION_FORMS}")


def parse_deadline(value: Any) -> Any:
    """A deadline as the config keeps it: `HH:MM` (or `HH:MM:SS`), or an ISO date and time
    (a string, or the datetime YAML makes of one). None stays None."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, int) and not isinstance(value, bool):
        # YAML 1.1 reads an unquoted 06:00 as the sexagesimal number 360.
        raise ValueError(
            f"{value!r} is a number: quote the time ('06:00'), which YAML otherwise reads as "
            "minutes in base 60"
        )
    if isinstance(value, str):
        text = value.strip()
        if _CLOCK.fullmatch(text):
            return text
        try:
            datetime.fromisoformat(text)
        except ValueError:
            pass
        else:
            return text
    raise ValueError(f"{value!r} is not a deadline: give {DEADLINE_FORMS}")


def deadline_at(value: str, now: datetime | None = None) -> datetime:
    """The instant (timezone-aware) a deadline as kept by `parse_deadline` names, from `now`
    (aware; default: the local now): `HH:MM` is the next such local time after `now`; an ISO
    time without a zone is local."""
    now = now or datetime.now().astimezone()
    clock = _CLOCK.fullmatch(value)
    if clock is None:
        found = datetime.fromisoformat(value)
        return found if found.tzinfo is not None else found.astimezone()
    hour, minute, second = int(clock[1]), int(clock[2]), int(clock[3] or 0)
    local = now.astimezone()
    at = _local(local.date(), time(hour, minute, second))
    if at <= local:
        at = _local(local.date() + timedelta(days=1), time(hour, minute, second))
    return at


def _local(day: date, clock: time) -> datetime:
    """`clock` on `day` in the local time zone (its offset that day, daylight saving too)."""
    return datetime.combine(day, clock).astimezone()


def describe_duration(seconds: float) -> str:
    """`45 s`, `12.5 min`, `6.0 h`: a duration as the plan and the messages print it."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7_200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3_600:.1f} h"
