"""An interrupt mid-call, as a data scientist makes one: a real SIGINT to a script that runs
`ep.score` (from a script, and from inside a running asyncio loop, as in a notebook), and one
that awaits `ep.ascore` under `asyncio.run` (which answers Ctrl-C by cancelling it).

The service runs in a process of its own: half its answers come at once, the other half only
after `SLOW` seconds, so once the fast ones are answered every request in flight waits on a slow
one, and the service's own counters tell what it answered (billed) and when. The script joins
the session's Ray (RAY_ADDRESS). What must hold: the call raises KeyboardInterrupt; the service
answers nothing after the interrupt (the requests in flight were cancelled, not left to finish);
no actor of the call is left alive; the same call again works, and over both calls every row
is billed exactly once (the answers paid before the interrupt came from the cache).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import API_KEY
from evalpipe.service import EmbeddedService, ServiceSettings

ROWS = 300
SLOW = 8.0  # seconds a slow answer takes: far longer than a cancelled call may take to stop
SCRIPT = Path(__file__).with_name("interrupted_call.py")


def settled(service: EmbeddedService, process: subprocess.Popen[str]) -> int:
    """Wait until the fast answers are all in (the count of 200s holds still while requests
    wait in flight on slow answers); returns that count."""
    deadline = time.monotonic() + 120  # a guard against a hang, not a speed requirement
    last, since = -1, time.monotonic()
    while True:
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        assert time.monotonic() < deadline, "the call never reached a steady state"
        stats = service.stats()
        now = int(stats["requests_answered"])
        if now != last:
            last, since = now, time.monotonic()
        elif now > 0 and stats["inflight"] > 0 and time.monotonic() - since > 1.0:
            return now
        time.sleep(0.1)


def events(out: str) -> dict[str, dict[str, Any]]:
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {line["event"]: line for line in lines}


@pytest.mark.subprocess
@pytest.mark.parametrize("how", ["script", "loop", "ascore"])
def test_an_interrupt_cancels_what_is_in_flight_and_leaves_no_actor(
    how: str, ray_address: str, tmp_path: Path
) -> None:
    settings = ServiceSettings(
        api_key=API_KEY, rpm=10_000_000, tps=10_000_000_000, fault_slow=0.5,
        slow_seconds=SLOW, fault_seed=3,
    )  # fmt: skip
    signalled = tmp_path / "signalled"
    env = {**os.environ, "EVAL_API_KEY": API_KEY, "RAY_ADDRESS": ray_address,
           "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONUNBUFFERED": "1"}  # fmt: skip
    with EmbeddedService(settings, mode="process") as service:
        command = [sys.executable, str(SCRIPT), service.base_url, str(ROWS), how, str(signalled)]
        call = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            before = settled(service, call)
            signalled.write_text(repr(time.time()))
            call.send_signal(signal.SIGINT)
            # The next call's answers come at once: it need not wait out SLOW seconds. Those in
            # flight were drawn slow already, so only their cancelling keeps them unanswered.
            service.set_faults(fault_slow=0.0)
            out, err = call.communicate(timeout=180)
        finally:
            call.kill()
        seen = events(out)
        assert call.returncode == 0, err[-3000:]
        assert "interrupted" in seen, (out, err[-3000:])
        interrupted = seen["interrupted"]
        assert interrupted["left"] == {}  # no actor of the call alive after the interrupt
        again = seen["again"]
        assert again["rows"] == ROWS and again["answered"] == ROWS  # the next call works
        final = service.stats()
    print(f"{how}: KeyboardInterrupt {interrupted['seconds']} s after SIGINT; "
          f"{before} rows answered before it; next call {again['seconds']} s")  # fmt: skip
    # Every row billed exactly once over both calls: nothing answered after the interrupt was
    # lost (it would be billed again), and nothing paid before it was paid again (the cache).
    assert 0 < before < ROWS
    assert final["requests_answered"] == ROWS, final
    assert final["inflight"] == 0
    assert "Traceback" not in err, err[-3000:]
    assert "worker processes have been started" not in out + err
