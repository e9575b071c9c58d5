"""An interrupt mid-call, as a data scientist makes one: a real SIGINT to a script that runs
`ep.score` (from a script, and from inside a running asyncio loop, as in a notebook), and one
that awaits `ep.ascore` under `asyncio.run` (which answers Ctrl-C by cancelling it).

One script process (tests/interrupted_call.py) is interrupted once for each front end in turn,
each on rows of its own; the test sends each SIGINT and reads what followed, and a test per
front end checks its part. A process per front end would cost each its imports and a Ray
connection, and each call Ray actors the script's earlier calls had left idle: these, taken up
by the next front end's call, must end at its interrupt as new ones would.

The service is the module's own (in this process): half its answers come at once, the other
half only after `SLOW` seconds, so once the fast ones are answered every request in flight
waits on a slow one, and the service's own counters tell what it answered (billed) and when.
The script joins the session's Ray (RAY_ADDRESS). What must hold, for each front end: the call
raises KeyboardInterrupt; the service answers nothing after the interrupt (the requests in
flight were cancelled, not left to finish); no actor of the script is left alive; the same call
again works, and over both calls every row is billed exactly once (the answers paid before the
interrupt came from the cache).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from conftest import API_KEY
from evalpipe.service import EmbeddedService, ServiceSettings

ROWS = 100  # half answered at once, half still in flight at the interrupt
SLOW = 8.0  # seconds a slow answer takes: far longer than a cancelled call may take to stop
SCRIPT = Path(__file__).with_name("interrupted_call.py")
FRONT_ENDS = ("script", "loop", "ascore")


def settled(service: EmbeddedService, process: subprocess.Popen[str], log: Path, start: int) -> int:
    """Wait until the fast answers are all in (the count of 200s holds still, above `start`,
    while requests wait in flight on slow answers); returns that count."""
    deadline = time.monotonic() + 120  # a guard against a hang, not a speed requirement
    last, since = -1, time.monotonic()
    while True:
        assert process.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "the call never reached a steady state"
        stats = service.stats()
        now = int(stats["requests_answered"])
        if now != last:
            last, since = now, time.monotonic()
        elif now > start and stats["inflight"] > 0 and time.monotonic() - since > 1.0:
            return now
        time.sleep(0.1)


def next_event(out: IO[str], log: Path, other: list[str]) -> dict[str, Any]:
    """The script's next JSON line on stdout (an error with its stderr if it ended first);
    the lines before it that are not events go to `other`."""
    while line := out.readline():
        if line.startswith("{"):
            return dict(json.loads(line))
        other.append(line)
    raise AssertionError(f"the script ended: {log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def interrupts(
    ray_address: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, dict[str, Any]]]:
    """Each front end's call interrupted in one script, then called again: what the script
    said and what the service counted, by front end; and the script's stderr."""
    tmp = tmp_path_factory.mktemp("interrupt")
    settings = ServiceSettings(
        api_key=API_KEY, rpm=10_000_000, tps=10_000_000_000, fault_slow=0.5,
        slow_seconds=SLOW, fault_seed=3,
    )  # fmt: skip
    env = {**os.environ, "EVAL_API_KEY": API_KEY, "RAY_ADDRESS": ray_address,
           "XDG_CACHE_HOME": str(tmp / "cache"), "PYTHONUNBUFFERED": "1"}  # fmt: skip
    log = tmp / "stderr"
    seen: dict[str, dict[str, Any]] = {}
    printed: list[str] = []
    with EmbeddedService(settings) as service, log.open("w") as err:
        command = [sys.executable, str(SCRIPT), service.base_url, str(ROWS), str(tmp)]
        call = subprocess.Popen(
            command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
            text=True,
        )  # fmt: skip
        assert call.stdin is not None and call.stdout is not None
        try:
            for how in FRONT_ENDS:
                service.set_faults(fault_slow=0.5)  # half the answers slow again
                start = int(service.stats()["requests_answered"])
                call.stdin.write(f"{how}\n")
                call.stdin.flush()
                assert next_event(call.stdout, log, printed)["event"] == "calling"
                before = settled(service, call, log, start) - start
                (tmp / how).write_text(repr(time.time()))
                call.send_signal(signal.SIGINT)
                # The next call's answers come at once: it need not wait out SLOW seconds.
                # Those in flight were drawn slow already, so only their cancelling keeps them
                # unanswered.
                service.set_faults(fault_slow=0.0)
                events = [next_event(call.stdout, log, printed)]
                if events[0]["event"] == "interrupted":
                    events.append(next_event(call.stdout, log, printed))
                stats = service.stats()
                seen[how] = {
                    "before": before, **{e["event"]: e for e in events},
                    "answered": int(stats["requests_answered"]) - start,
                    "inflight": stats["inflight"],
                }  # fmt: skip
            call.stdin.close()
            assert call.wait(timeout=60) == 0, log.read_text()[-3000:]
        finally:
            call.kill()
    seen["printed"] = {"stdout": "".join(printed), "stderr": log.read_text()}
    yield seen


@pytest.mark.subprocess
@pytest.mark.parametrize("how", FRONT_ENDS)
def test_an_interrupt_cancels_what_is_in_flight_and_leaves_no_actor(
    how: str, interrupts: dict[str, dict[str, Any]]
) -> None:
    seen = interrupts[how]
    assert "interrupted" in seen, seen
    interrupted = seen["interrupted"]
    assert interrupted["left"] == {}  # no actor of the script alive after the interrupt
    again = seen["again"]
    assert again["rows"] == ROWS and again["answered"] == ROWS  # the next call works
    print(f"{how}: KeyboardInterrupt {interrupted['seconds']} s after SIGINT; "
          f"{seen['before']} rows answered before it; next call {again['seconds']} s")  # fmt: skip
    # Every row billed exactly once over both calls: nothing answered after the interrupt was
    # lost (it would be billed again), and nothing paid before it was paid again (the cache).
    assert 0 < seen["before"] < ROWS
    assert seen["answered"] == ROWS, seen
    assert seen["inflight"] == 0
    out, err = interrupts["printed"]["stdout"], interrupts["printed"]["stderr"]
    assert "Traceback" not in err, err[-3000:]
    assert "worker processes have been started" not in out + err
