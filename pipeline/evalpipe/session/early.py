"""A shared tier that refuses us, said before `evalpipe run` loads its engine.

Why a module of its own: a scheduler that starts a pod with the wrong tier password should hear
so at once (exit 2 within a couple of seconds, nothing sent), but `evalpipe.session.launch`
imports the whole engine (Ray's driver side, pyarrow, the client), seconds of CPU on a small
pod, before it reads the config. This module loads the config and asks the tier with nothing
heavier than the config's model and redis-py; the run then finds the tier open
(`evalpipe.tier.Tier.of`) and does not ask again. A config that cannot be loaded is left to
the run, which says why as always.
"""

from __future__ import annotations

from pathlib import Path

from evalpipe.config import load_config
from evalpipe.engine import EventLog, LogFormat
from evalpipe.errors import EvalpipeError
from evalpipe.tier import Tier, job_address


def tier_refuses(path: Path, overrides: tuple[str, ...], fmt: LogFormat) -> int | None:
    """The exit code when the job's shared tier refuses us (said on stderr, in `fmt`); None
    when it takes us, when there is none, or when the config itself is the problem."""
    try:
        address = job_address(load_config(path, overrides))
    except EvalpipeError:
        return None
    if address is None:
        return None
    try:
        Tier.of(address)
    except EvalpipeError as exc:
        EventLog(fmt).error(exc)
        return exc.exit_code
    return None
