"""The live progress line: what a nightly log shows while a job runs."""

from __future__ import annotations

import io
import json
import time

from evalpipe.engine.events import EventLog
from evalpipe.engine.progress import Counters, Progress


def test_eta_is_unknown_until_an_answer_came_back() -> None:
    # Rows refused before sending (blank states) finish at once; they say nothing of the pace.
    c = Counters(rows_total=1000, rows_done=20, started=time.monotonic() - 5)
    assert c.eta() is None
    c.first_request = time.monotonic()
    assert c.eta() is None
    assert "ETA ?" in Progress(c, EventLog(stream=io.StringIO())).line()


def test_eta_follows_the_pace_since_the_first_request_not_start_up() -> None:
    now = time.monotonic()
    c = Counters(rows_total=1000, rows_skipped=100, started=now - 60)
    c.first_request = now - 10  # 50 s of start-up, then 10 s of sending
    c.requests = c.rows_done = 300
    eta = c.eta()
    assert eta is not None
    # 600 rows left at 30 rows/s: 20 s (start-up would have made it 120 s).
    assert 19 <= eta <= 21


def test_plain_line_counts_committed_rows_and_errors() -> None:
    c = Counters(rows_total=50, rows_skipped=10, rows_done=5)
    c.errors["invalid_state"] = 2
    stream = io.StringIO()
    Progress(c, EventLog(stream=stream), interval=0).update()
    line = stream.getvalue()
    assert line.startswith("15/50 rows")
    assert "errors 2" in line


def test_a_json_log_has_one_progress_object_per_line() -> None:
    c = Counters(rows_total=50, rows_skipped=10, rows_done=5)
    c.errors["rejected"] = 1
    stream = io.StringIO()
    progress = Progress(c, EventLog("json", run_id="r1", stream=stream), interval=0)
    progress.update()
    progress.update()
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [e["event"] for e in events] == ["progress", "progress"]
    assert events[0]["run_id"] == "r1" and events[0]["time"].endswith("Z")
    assert events[0]["rows_done"] == 15 and events[0]["rows_in_error"] == 1
