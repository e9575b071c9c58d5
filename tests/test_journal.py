"""The journal: rows handed to the Sink survive kill -9 and torn writes, on real files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from evalpipe.errors import ResumeConflict
from evalpipe.output import sink as sink_module
from evalpipe.output.journal import JournalWriter, read_journal
from evalpipe.output.outdir import JOURNAL
from evalpipe.output.resume import ResumeState
from evalpipe.output.sink import Sink
from sinkdata import SCHEMA, answered, failed, part_files, run, table_of

TESTS = str(Path(__file__).resolve().parent)
ROOT = str(Path(__file__).resolve().parents[1])
SOURCES = str(Path(ROOT) / "pipeline")  # this tree's evalpipe, not the one the venv installed


class FakeClock:
    """Stands in for the `time` module in evalpipe.output.sink: time moves when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def opened(out: Path, run_id: str = "run-1", **settings: Any) -> Sink:
    """A Sink ready for rows, as the runner opens it."""
    sink = Sink.open(out, SCHEMA, "fp", run_id=run_id, **settings)
    sink.resume()
    return sink


def resumed(out: Path, run_id: str) -> ResumeState:
    """What the next run's resume finds."""
    return Sink.open(out, SCHEMA, "fp", run_id=run_id).resume()


def journaled(out: Path) -> list[int]:
    ids: list[int] = read_journal(out / JOURNAL, SCHEMA, "fp")[0]["review_id"].to_pylist()
    return ids


def test_appended_rows_wait_in_the_journal_then_become_parts(tmp_path: Path) -> None:
    sink = opened(tmp_path, part_rows=10, write_seconds=0)
    sink.append([answered(i) for i in range(7)])
    assert part_files(tmp_path) == [] and journaled(tmp_path) == list(range(7))
    sink.append([answered(i) for i in range(7, 25)])  # fills a part, then another
    assert len(part_files(tmp_path)) == 2 and journaled(tmp_path) == list(range(20, 25))
    # readers never see the journal: a glob of parts, or the directory as a dataset
    assert table_of(tmp_path)["review_id"].to_list() == list(range(20))
    sink.finish({"rows": 25})
    assert not (tmp_path / JOURNAL).exists()
    assert len(part_files(tmp_path)) == 3
    assert table_of(tmp_path)["review_id"].to_list() == list(range(25))


def test_append_is_cheap_and_writes_when_due(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    monkeypatch.setattr(sink_module, "time", clock)
    sink = opened(tmp_path, write_seconds=0.1, flush_seconds=0.5)
    for i in range(50):  # one row per finished job, as the runner hands them over
        sink.append([answered(i)])
    assert not (tmp_path / JOURNAL).exists()  # not yet due: nothing written
    clock.now += 0.1
    sink.tick()
    journal = read_journal(tmp_path / JOURNAL, SCHEMA, "fp")[0]
    assert journal.num_rows == 50 and len(journal.to_batches()) == 1  # one record for all


def test_group_commit_one_sync_for_many_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    monkeypatch.setattr(sink_module, "time", clock)
    syncs: list[int] = []
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        syncs.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    sink = opened(tmp_path, write_seconds=0, flush_seconds=0.5)
    for i in range(40):
        clock.now += 0.01
        sink.append([answered(i)])  # a record per call (write_seconds=0)
    assert len(read_journal(tmp_path / JOURNAL, SCHEMA, "fp")[0].to_batches()) == 40
    assert syncs == []  # 0.4 s: not yet due
    clock.now += 0.2
    sink.tick()
    assert len(syncs) == 1  # one fdatasync covered all 40 records
    sink.tick()
    assert len(syncs) == 1  # nothing new, no sync
    sink.close()
    assert set(resumed(tmp_path, "run-2").ids.to_pylist()) == set(range(40))


@pytest.mark.parametrize("damage", ["cut", "garbage", "zeros", "bad_crc"])
def test_a_torn_journal_tail_is_dropped(tmp_path: Path, damage: str) -> None:
    sink = opened(tmp_path, write_seconds=0)
    sink.append([answered(i) for i in range(0, 5)])
    sink.append([failed(i, "rejected") for i in range(5, 8)])
    intact = (tmp_path / JOURNAL).stat().st_size
    sink.append([answered(i) for i in range(8, 12)])  # the record a kill tears
    path = tmp_path / JOURNAL
    data = path.read_bytes()
    if damage == "cut":
        data = data[: intact + (len(data) - intact) // 2]
    elif damage == "garbage":
        data = data[:intact] + os.urandom(len(data) - intact)
    elif damage == "zeros":  # a machine crash can leave a hole of zeros at the end
        data = data[:intact] + bytes(64)
    else:
        data = data[:-1] + bytes([data[-1] ^ 1])
    path.write_bytes(data)

    sink = Sink.open(tmp_path, SCHEMA, "fp", run_id="run-2", write_seconds=0)
    state = sink.resume()
    assert state.ids.to_pylist() == list(range(8))
    assert state.journal_rows == 8 and state.journal_torn_bytes == len(data) - intact
    assert not path.exists()  # recovered into a part, then deleted
    frame = table_of(tmp_path)
    assert frame["review_id"].to_list() == list(range(8))
    assert frame["_error_type"].to_list()[5:] == ["rejected"] * 3
    assert set(frame["_run_id"]) == {"run-1"}  # recovered rows keep the run that scored them
    sink.append([answered(i) for i in range(8, 12)])
    sink.finish({})
    assert table_of(tmp_path)["review_id"].to_list() == list(range(12))


def test_kill_between_part_rename_and_journal_reset_no_duplicates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Killed(BaseException):
        pass

    def die(self: JournalWriter) -> None:
        raise Killed

    sink = opened(tmp_path, part_rows=6, write_seconds=0)
    sink.append([answered(1), failed(2, "network"), answered(3)])
    monkeypatch.setattr(JournalWriter, "reset", die)
    with pytest.raises(Killed):
        sink.append([answered(4), failed(5, "rejected"), answered(6)])  # the part lands
    monkeypatch.undo()
    assert len(part_files(tmp_path)) == 1
    assert len(journaled(tmp_path)) == 6  # still whole

    state = resumed(tmp_path, "run-2")
    assert state.ids.to_pylist() == [1, 3, 4, 5, 6]
    assert state.journal_duplicates == 6 and state.journal_rows == 0
    assert state.retry_rows == 1  # row 2 (network) is cut from the part, to be retried
    assert not (tmp_path / JOURNAL).exists()
    assert table_of(tmp_path)["review_id"].to_list() == [1, 3, 4, 5, 6]


def test_a_kill_during_recovery_is_repaired_by_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal's part lands, then the kill comes before the journal is deleted."""
    sink = opened(tmp_path, write_seconds=0)
    sink.append([answered(1), failed(2, "overloaded"), answered(3)])
    sink.close()
    real_unlink = Path.unlink

    def die(self: Path, missing_ok: bool = False) -> None:
        if self.name == JOURNAL:
            raise KeyboardInterrupt
        real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", die)
    with pytest.raises(KeyboardInterrupt):
        resumed(tmp_path, "run-2")
    monkeypatch.undo()
    assert (tmp_path / JOURNAL).exists()
    state = resumed(tmp_path, "run-3")
    assert state.ids.to_pylist() == [1, 3]
    assert state.journal_duplicates == 2 and state.retry_rows == 1
    assert table_of(tmp_path)["review_id"].to_list() == [1, 3]


def test_resume_retries_retryable_journal_rows_and_restart_drops_the_journal(
    tmp_path: Path,
) -> None:
    sink = opened(tmp_path, write_seconds=0)
    sink.append([answered(1), failed(2, "server_error"), failed(3, "context_limit")])
    sink.close()
    state = resumed(tmp_path, "run-2")
    assert (state.ids.to_pylist(), state.retry_rows, state.journal_rows) == ([1, 3], 1, 2)

    again = opened(tmp_path, "run-3", write_seconds=0)
    again.append([answered(2)])
    again.close()
    with pytest.raises(ResumeConflict, match="different config"):
        Sink.open(tmp_path, SCHEMA, "fp-2", run_id="run-4")
    fresh = Sink.open(tmp_path, SCHEMA, "fp-2", run_id="run-4", restart=True)
    assert not (tmp_path / JOURNAL).exists()
    assert fresh.committed().num_rows == 0 and fresh.resume().rows == 0


def test_close_keeps_the_rows_and_finish_may_follow(tmp_path: Path) -> None:
    sink = opened(tmp_path, write_seconds=60)  # never due on its own
    sink.append([answered(1), answered(2)])
    sink.close()  # e.g. the job failed: the rows are journaled, synced
    assert journaled(tmp_path) == [1, 2]
    with pytest.raises(RuntimeError, match="after finish or close"):
        sink.append([answered(3)])
    sink.finish({"rows": 2})
    assert table_of(tmp_path)["review_id"].to_list() == [1, 2]
    assert not (tmp_path / JOURNAL).exists()


JOURNAL_WRITER = """
import sys, time
sys.path[:0] = [{root!r}, {tests!r}]
from pathlib import Path
from sinkdata import SCHEMA, answered, failed
from evalpipe.output.sink import Sink
sink = Sink.open(Path({out!r}), SCHEMA, "fp", run_id="run-1", part_rows=500, write_seconds=0,
                 flush_seconds=0.2)
sink.resume()
for start in range(0, 10**6, 20):
    sink.append([answered(i) if i % 3 else failed(i) for i in range(start, start + 20)])
    print(start + 19, flush=True)  # every row up to here has been appended
    time.sleep(0.002)
"""


@pytest.mark.subprocess
def test_kill_9_loses_no_appended_row(tmp_path: Path) -> None:
    script = JOURNAL_WRITER.format(root=SOURCES, tests=TESTS, out=str(tmp_path))
    writer = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert writer.stdout is not None
    last = -1
    try:
        while last < 1250:  # two parts of 500, and about 250 rows in the journal
            last = int(writer.stdout.readline())
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    rest = writer.stdout.read().split()
    last = int(rest[-1]) if rest else last  # lines printed before the kill
    assert len(part_files(tmp_path)) >= 2
    assert journaled(tmp_path)
    state = resumed(tmp_path, "run-2")
    assert state.journal_rows > 0  # the kill found rows in the journal, and they were kept
    frame = table_of(tmp_path)  # every part is whole: a kill leaves at most a hidden temp file
    ids = frame["review_id"].to_list()
    assert frame["review_id"].is_unique().all() and set(ids) == set(state.ids.to_pylist())
    assert {i for i in range(last + 1) if i % 3} <= set(ids)  # every row appended is there
    assert all(i % 3 for i in ids)  # the network errors were cut out, to be retried
    assert max(ids) <= last + 20  # at most the record being written when the kill came
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


FULL_DISK = """
import resource, signal, sys
from pathlib import Path
from sinkdata import SCHEMA, answered
from evalpipe.errors import OutputError
from evalpipe.output.sink import Sink

out = Path(sys.argv[1])
sink = Sink.open(out, SCHEMA, "fp", run_id="run-1", part_rows=100_000, write_seconds=0)
sink.resume()
sink.append([answered(i) for i in range(10)])  # journaled before the disk fills
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
size = (out / "_journal.bin").stat().st_size
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 1000, size + 1000))
try:
    sink.append([answered(i) for i in range(10, 5000)])
except OutputError as exc:
    print(exc.one_line())
"""


@pytest.mark.subprocess
def test_a_full_disk_is_one_output_error_and_keeps_the_journal(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SOURCES, TESTS])}
    done = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(out)],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip()
    assert line.startswith("OutputError: output.path ") and "File too large" in line, line
    assert "\n" not in line and "Traceback" not in done.stderr
    # The torn write was cut back: the rows journaled before it are still readable.
    assert journaled(out) == list(range(10))
    assert run(out, [], run_id="run-2").ids.to_pylist() == list(range(10))
