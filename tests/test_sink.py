"""Sink: output schema, exact values, part commits, the journal and resume, on real files."""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from pipeline import sink as sink_module
from pipeline.contract import ChoiceAnswer, NoulAnswer, ScoreAnswer, validate_questions
from pipeline.errors import ConfigError, ResumeConflict
from pipeline.sink import (
    JOURNAL,
    MANIFEST,
    JournalWriter,
    RowResult,
    Sink,
    output_schema,
    read_journal,
    to_table,
)

QUESTIONS = validate_questions(
    {
        "helpful": {"type": "noul", "instructions": "Is it helpful?"},
        "sentiment": {
            "type": "choice",
            "instructions": "Which sentiment?",
            "criteria": {"positive": None, "negative": "unhappy", "mixed": None},
        },
        "quality": {"type": "score", "instructions": "Rate it.", "criteria": ["poor", "ok"]},
    }
)
SCHEMA = output_schema("review_id", pa.int64(), QUESTIONS)


def answers(p: float = 0.75) -> dict:
    """Answer dicts as the service returns them (extra fields like legend are ignored)."""
    return {
        "helpful": {"type": "noul", "noul": p},
        "sentiment": {
            "type": "choice",
            "choice": "positive",
            "probabilities": {"positive": p, "negative": (1 - p) / 2, "mixed": (1 - p) / 2},
            "confidence": p / 3,
        },
        "quality": {
            "type": "score",
            "score": 1 - p,
            "legend": {"0": "poor", "1": "ok"},
            "probabilities": {"0": p, "1": 1 - p},
            "confidence": p / 7,
        },
    }


def answered(row_id: int, p: float = 0.75) -> RowResult:
    return RowResult(row_id, answers(p), "model-1.13.0", 120)


def failed(row_id: int, error_type: str = "network") -> RowResult:
    return RowResult(row_id, None, None, None, error_type, f"{error_type} happened")


def table_of(out: Path) -> pl.DataFrame:
    return pl.scan_parquet(out / "part-*.parquet").collect().sort("review_id")


class FakeClock:
    """Stands in for the `time` module in pipeline.sink: time moves when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


# --------------------------------------------------------------------------- schema


def test_output_schema_per_question_type() -> None:
    assert [(f.name, str(f.type)) for f in SCHEMA] == [
        ("review_id", "int64"),
        ("helpful__noul", "double"),
        ("sentiment__choice", "string"),
        ("sentiment__confidence", "double"),
        ("sentiment__p__positive", "double"),
        ("sentiment__p__negative", "double"),
        ("sentiment__p__mixed", "double"),
        ("quality__score", "double"),
        ("quality__confidence", "double"),
        ("quality__p__0", "double"),
        ("quality__p__1", "double"),
        ("_model", "string"),
        ("_input_tokens", "int64"),
        ("_error_type", "string"),
        ("_error", "string"),
    ]


def test_output_schema_takes_question_dicts_too() -> None:
    raw = {"q": {"type": "score", "instructions": "x", "criteria": ["a", "b", "c"]}}
    schema = output_schema("id", pa.string(), raw)
    assert schema.names[1:6] == ["q__score", "q__confidence", "q__p__0", "q__p__1", "q__p__2"]


def test_colliding_names_raise_config_error() -> None:
    clash = validate_questions(
        {
            "a__p": {"type": "noul", "instructions": "x"},
            "a": {"type": "choice", "instructions": "x", "criteria": {"noul": None}},
        }
    )
    with pytest.raises(ConfigError, match="output column 'a__p__noul' would be made twice"):
        output_schema("id", pa.int64(), clash)
    with pytest.raises(ConfigError, match="'_model'"):
        output_schema("_model", pa.int64(), QUESTIONS)


# --------------------------------------------------------------------------- table


def test_exact_floats_round_trip(tmp_path: Path) -> None:
    hard = [0.1 + 0.2, 1 / 3, 5e-324, 1 - 2**-53, 0.0, 1.0, 2.2250738585072014e-308]
    sink = Sink(tmp_path, SCHEMA, "fp")
    sink.write([answered(i, p) for i, p in enumerate(hard)])
    got = table_of(tmp_path)
    assert got["helpful__noul"].to_list() == hard
    assert got["sentiment__p__negative"].to_list() == [(1 - p) / 2 for p in hard]
    assert got["quality__score"].to_list() == [1 - p for p in hard]
    assert got["sentiment__confidence"].to_list() == [p / 3 for p in hard]


def test_models_and_dicts_give_the_same_table() -> None:
    def as_models(result: RowResult) -> RowResult:
        a = result.answers
        assert a is not None
        models = {
            "helpful": NoulAnswer(**a["helpful"]),
            "sentiment": ChoiceAnswer(**a["sentiment"]),
            "quality": ScoreAnswer(**a["quality"]),
        }
        return RowResult(result.id, models, result.model, result.input_tokens)

    results = [answered(1, 0.3), failed(2), answered(3, 0.9)]
    from_dicts = to_table(results, SCHEMA, QUESTIONS)
    from_models = to_table([as_models(r) if r.answers else r for r in results], SCHEMA)
    assert from_dicts.equals(from_models)
    row = from_dicts.slice(1, 1).to_pylist()[0]
    assert row["review_id"] == 2 and row["_error_type"] == "network"
    assert all(row[name] is None for name in SCHEMA.names[1:13])


def test_row_result_pickles() -> None:
    result = answered(5)
    assert pickle.loads(pickle.dumps(result)) == result


# --------------------------------------------------------------------------- parts


def test_error_only_part_same_schema_and_dir_reads_as_one_table(tmp_path: Path) -> None:
    sink = Sink(tmp_path, SCHEMA, "fp")
    first = sink.write([answered(1), answered(2)])
    second = sink.write([failed(3, "rejected"), failed(4, "context_limit")])
    assert sink.write([]) == ""
    schemas = [pq.read_schema(tmp_path / name) for name in (first, second)]
    assert all(s.equals(SCHEMA, check_metadata=False) for s in schemas)
    (tmp_path / ".part-99999-leftover.tmp").write_bytes(b"junk")  # readers must ignore it
    frame = table_of(tmp_path)
    assert frame["review_id"].to_list() == [1, 2, 3, 4]
    assert frame["_error_type"].to_list() == [None, None, "rejected", "context_limit"]
    dataset = ds.dataset(tmp_path, format="parquet")  # ignores '_' and '.' names by default
    assert sorted(dataset.to_table()["review_id"].to_pylist()) == [1, 2, 3, 4]
    assert sorted(Path(f).name for f in dataset.files) == sorted([first, second])


def test_manifest_lists_parts_and_summary(tmp_path: Path) -> None:
    sink = Sink(tmp_path, SCHEMA, "fp-1")
    name = sink.write([answered(1), failed(2)])
    sink.finish({"rows": 2, "errors": {"network": 1}})
    manifest = orjson.loads((tmp_path / MANIFEST).read_bytes())
    assert manifest["fingerprint"] == "fp-1"
    assert manifest["parts"] == [{"name": name, "rows": 2}]
    assert manifest["summary"] == {"rows": 2, "errors": {"network": 1}}
    assert manifest["schema"][0] == {"name": "review_id", "type": "int64"}
    assert manifest["finished"] is not None
    assert [p for p in os.listdir(tmp_path) if p.endswith(".tmp")] == []


# --------------------------------------------------------------------------- conflicts, restart


def test_other_fingerprint_is_a_resume_conflict(tmp_path: Path) -> None:
    Sink(tmp_path, SCHEMA, "fp-1").write([answered(1)])
    with pytest.raises(ResumeConflict) as info:
        Sink(tmp_path, SCHEMA, "fp-2")
    assert str(info.value) == (
        f"output dir '{tmp_path}' was written by a job with a different config (questions, "
        "model or state mapping); use --restart to start over or choose another output.path"
    )


def test_restart_removes_only_our_files(tmp_path: Path) -> None:
    Sink(tmp_path, SCHEMA, "fp-1").write([answered(1)])
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "._manifest.json.0123456789abcdef0123456789abcdef.tmp").write_text("{")
    sink = Sink(tmp_path, SCHEMA, "fp-2", restart=True)
    assert sorted(os.listdir(tmp_path)) == [MANIFEST, "notes.txt"]
    assert sink.committed() == (set(), 0)
    sink.write([answered(2)])
    assert table_of(tmp_path)["review_id"].to_list() == [2]


def test_foreign_parquet_is_refused(tmp_path: Path) -> None:
    pq.write_table(pa.table({"x": [1]}), tmp_path / "theirs.parquet")
    with pytest.raises(ConfigError, match=r"holds Parquet files this tool did not write \("):
        Sink(tmp_path, SCHEMA, "fp", restart=True)
    assert (tmp_path / "theirs.parquet").exists()


def test_output_path_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "out").write_text("")
    with pytest.raises(ConfigError, match="exists and is not a directory"):
        Sink(tmp_path / "out", SCHEMA, "fp")


def test_parts_without_manifest_are_refused(tmp_path: Path) -> None:
    Sink(tmp_path, SCHEMA, "fp").write([answered(1)])
    (tmp_path / MANIFEST).unlink()
    with pytest.raises(ResumeConflict, match=r"no _manifest\.json"):
        Sink(tmp_path, SCHEMA, "fp")


# --------------------------------------------------------------------------- resume


def test_resume_cuts_retryable_rows_and_rewrites_them_once(tmp_path: Path) -> None:
    sink = Sink(tmp_path, SCHEMA, "fp")
    sink.write([answered(1), failed(2, "rate_limited"), failed(3, "rejected")])
    sink.write([failed(4, "server_error"), failed(5, "overloaded")])  # all retryable
    sink.write([answered(6), failed(7, "invalid_state")])
    hexa = "0123456789abcdef" * 2
    leftover = tmp_path / f".part-00003-{hexa}.parquet.{hexa}.tmp"  # a kill mid-write
    leftover.write_bytes(b"half a part")
    not_ours = tmp_path / ".part-notes.tmp"
    not_ours.write_bytes(b"")

    resumed = Sink(tmp_path, SCHEMA, "fp")
    ids, rows = resumed.committed()
    assert ids == {1, 3, 6, 7}  # answered and non-retryable errors are final
    assert rows == 4
    state = resumed.prepare_resume()
    assert (state.retry_rows, state.temp_files_removed) == (3, 1)
    assert not leftover.exists() and not_ours.exists()
    assert table_of(tmp_path)["review_id"].to_list() == [1, 3, 6, 7]
    assert len(resumed.parts) == 2  # the all-retryable part is gone

    resumed.write([answered(i) for i in (2, 4, 5)])
    frame = table_of(tmp_path)
    assert frame["review_id"].to_list() == [1, 2, 3, 4, 5, 6, 7]
    assert frame.filter(pl.col("review_id").is_in([2, 4, 5]))["_error_type"].null_count() == 3
    assert Sink(tmp_path, SCHEMA, "fp").committed() == ({1, 2, 3, 4, 5, 6, 7}, 7)


def test_part_missing_from_manifest_still_counts(tmp_path: Path) -> None:
    sink = Sink(tmp_path, SCHEMA, "fp")
    sink.write([answered(1)])
    before = (tmp_path / MANIFEST).read_bytes()
    late = sink.write([answered(2)])
    # a kill between the part's rename and the manifest update: the old manifest remains
    (tmp_path / MANIFEST).write_bytes(before)
    resumed = Sink(tmp_path, SCHEMA, "fp")
    assert resumed.committed() == ({1, 2}, 2)
    manifest = orjson.loads((tmp_path / MANIFEST).read_bytes())
    assert late in [p["name"] for p in manifest["parts"]]


def test_new_parts_do_not_reuse_names_after_resume(tmp_path: Path) -> None:
    sink = Sink(tmp_path, SCHEMA, "fp")
    first = sink.write([answered(1)])
    second = Sink(tmp_path, SCHEMA, "fp").write([answered(2)])
    assert first.startswith("part-00000-") and second.startswith("part-00001-")


def test_a_moved_output_dir_resumes(tmp_path: Path) -> None:
    """Nothing in the manifest or parts depends on the dir's path; resuming twice is a no-op."""
    Sink(tmp_path / "out", SCHEMA, "fp").write([answered(1), failed(2)])
    moved = tmp_path / "moved"
    shutil.move(tmp_path / "out", moved)
    sink = Sink(moved, SCHEMA, "fp")
    assert sink.committed() == ({1}, 1)
    sink.write([answered(2)])
    assert Sink(moved, SCHEMA, "fp").prepare_resume().retry_rows == 0
    assert table_of(moved)["review_id"].to_list() == [1, 2]


WRITER = """
import sys
sys.path.insert(0, {root!r})
from pathlib import Path
from tests.test_sink import SCHEMA, answered, failed
from pipeline.sink import Sink
sink = Sink(Path({out!r}), SCHEMA, "fp")
for start in range(0, 10**6, 50):
    sink.write([answered(i) if i % 3 else failed(i) for i in range(start, start + 50)])
"""


def test_kill_9_mid_run_loses_no_committed_row(tmp_path: Path) -> None:
    root = str(Path(__file__).resolve().parents[1])
    script = WRITER.format(root=root, out=str(tmp_path))
    writer = subprocess.Popen([sys.executable, "-c", script], cwd=root)
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("part-*.parquet"))) < 5 and time.monotonic() < deadline:
            assert writer.poll() is None, "the writer died on its own"
            time.sleep(0.02)
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    on_disk = sorted(p.name for p in tmp_path.glob("part-*.parquet"))
    assert len(on_disk) >= 5
    resumed = Sink(tmp_path, SCHEMA, "fp")
    ids, rows = resumed.committed()
    frame = table_of(tmp_path)  # every part is whole: a kill leaves at most a hidden temp file
    assert frame["review_id"].is_unique().all()
    assert set(frame["review_id"].to_list()) == ids and rows == len(ids) == frame.height
    assert all(i % 3 for i in ids)  # the network errors were cut out, to be retried
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


# --------------------------------------------------------------------------- the journal


def journal_of(out: Path) -> Path:
    return out / JOURNAL


def test_appended_rows_wait_in_the_journal_then_become_parts(tmp_path: Path) -> None:
    sink = Sink(tmp_path, SCHEMA, "fp", part_rows=10, write_seconds=0)
    sink.committed()
    sink.append([answered(i) for i in range(7)])
    assert sink.parts == {} and sink.journal_rows == 7
    assert journal_of(tmp_path).stat().st_size > 0
    sink.append([answered(i) for i in range(7, 25)])  # fills a part, then another
    assert sorted(sink.parts.values()) == [10, 10] and sink.journal_rows == 5
    # readers never see the journal: a glob of parts, or the directory as a dataset
    assert table_of(tmp_path)["review_id"].to_list() == list(range(20))
    assert ds.dataset(tmp_path, format="parquet").count_rows() == 20
    sink.finish({"rows": 25})
    assert not journal_of(tmp_path).exists()
    assert sorted(sink.parts.values()) == [5, 10, 10]
    assert table_of(tmp_path)["review_id"].to_list() == list(range(25))
    manifest = orjson.loads((tmp_path / MANIFEST).read_bytes())
    assert manifest["rows"] == 25 and len(manifest["parts"]) == 3


def test_append_is_cheap_and_writes_when_due(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    monkeypatch.setattr(sink_module, "time", clock)
    sink = Sink(tmp_path, SCHEMA, "fp", write_seconds=0.1, sync_seconds=0.5)
    sink.committed()
    for i in range(50):  # one row per finished job, as the runner hands them over
        sink.append([answered(i)])
    assert sink.journal_rows == 0  # not yet due: nothing written
    clock.now += 0.1
    sink.tick()
    assert sink.journal_rows == 50  # one record for all of them
    assert read_journal(journal_of(tmp_path), SCHEMA, "fp")[0].num_rows == 50


def test_group_commit_one_sync_for_many_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    monkeypatch.setattr(sink_module, "time", clock)
    syncs: list[int] = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (syncs.append(fd), real(fd))[1])
    sink = Sink(tmp_path, SCHEMA, "fp", write_seconds=0, sync_seconds=0.5)
    sink.committed()
    for i in range(40):
        clock.now += 0.01
        sink.append([answered(i)])  # a record per call (write_seconds=0)
    journal = sink._journal
    assert journal is not None and journal.records == 40
    assert syncs == []  # 0.4 s: not yet due
    clock.now += 0.2
    sink.tick()
    assert len(syncs) == 1 and not journal.unsynced  # one fdatasync covered all 40 records
    sink.tick()
    assert len(syncs) == 1  # nothing new, no sync
    sink.close()
    assert Sink(tmp_path, SCHEMA, "fp").committed() == (set(range(40)), 40)


@pytest.mark.parametrize("damage", ["cut", "garbage", "zeros", "bad_crc"])
def test_a_torn_journal_tail_is_dropped(tmp_path: Path, damage: str) -> None:
    sink = Sink(tmp_path, SCHEMA, "fp", write_seconds=0)
    sink.committed()
    sink.append([answered(i) for i in range(0, 5)])
    sink.append([failed(i, "rejected") for i in range(5, 8)])
    intact = journal_of(tmp_path).stat().st_size
    sink.append([answered(i) for i in range(8, 12)])  # the record a kill tears
    path = journal_of(tmp_path)
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

    resumed = Sink(tmp_path, SCHEMA, "fp")
    state = resumed.prepare_resume()
    assert state.ids == set(range(8)) and state.rows == 8
    assert state.journal_rows == 8 and state.journal_torn_bytes == len(data) - intact
    assert not path.exists()  # recovered into a part, then deleted
    frame = table_of(tmp_path)
    assert frame["review_id"].to_list() == list(range(8))
    assert frame["_error_type"].to_list()[5:] == ["rejected"] * 3
    resumed.append([answered(i) for i in range(8, 12)])
    resumed.finish({})
    assert table_of(tmp_path)["review_id"].to_list() == list(range(12))


def test_kill_between_part_rename_and_journal_reset_no_duplicates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Killed(BaseException):
        pass

    def die(self: JournalWriter) -> None:
        raise Killed

    sink = Sink(tmp_path, SCHEMA, "fp", part_rows=6, write_seconds=0)
    sink.committed()
    sink.append([answered(1), failed(2, "network"), answered(3)])
    monkeypatch.setattr(JournalWriter, "reset", die)
    with pytest.raises(Killed):
        sink.append([answered(4), failed(5, "rejected"), answered(6)])  # the part lands
    monkeypatch.undo()
    assert len(list(tmp_path.glob("part-*.parquet"))) == 1
    assert read_journal(journal_of(tmp_path), SCHEMA, "fp")[0].num_rows == 6  # still whole

    resumed = Sink(tmp_path, SCHEMA, "fp")
    state = resumed.prepare_resume()
    assert state.ids == {1, 3, 4, 5, 6} and state.rows == 5
    assert state.journal_duplicates == 6 and state.journal_rows == 0
    assert state.retry_rows == 1  # row 2 (network) is cut from the part, to be retried
    assert not journal_of(tmp_path).exists()
    assert table_of(tmp_path)["review_id"].to_list() == [1, 3, 4, 5, 6]


def test_a_kill_during_recovery_is_repaired_by_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal's part lands, then the kill comes before the journal is deleted."""
    sink = Sink(tmp_path, SCHEMA, "fp", write_seconds=0)
    sink.committed()
    sink.append([answered(1), failed(2, "overloaded"), answered(3)])
    real_unlink = Path.unlink

    def die(self: Path, missing_ok: bool = False) -> None:
        if self.name == JOURNAL:
            raise KeyboardInterrupt
        real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", die)
    with pytest.raises(KeyboardInterrupt):
        Sink(tmp_path, SCHEMA, "fp").prepare_resume()
    monkeypatch.undo()
    assert journal_of(tmp_path).exists()
    state = Sink(tmp_path, SCHEMA, "fp").prepare_resume()
    assert state.ids == {1, 3} and state.journal_duplicates == 2 and state.retry_rows == 1
    assert table_of(tmp_path)["review_id"].to_list() == [1, 3]


def test_resume_retries_retryable_journal_rows_and_restart_drops_the_journal(
    tmp_path: Path,
) -> None:
    sink = Sink(tmp_path, SCHEMA, "fp", write_seconds=0)
    sink.committed()
    sink.append([answered(1), failed(2, "server_error"), failed(3, "context_limit")])
    sink.close()
    state = Sink(tmp_path, SCHEMA, "fp").prepare_resume()
    assert (state.ids, state.retry_rows, state.journal_rows) == ({1, 3}, 1, 2)

    again = Sink(tmp_path, SCHEMA, "fp", write_seconds=0)
    again.committed()
    again.append([answered(2)])
    again.close()
    with pytest.raises(ResumeConflict, match="different config"):
        Sink(tmp_path, SCHEMA, "fp-2")
    fresh = Sink(tmp_path, SCHEMA, "fp-2", restart=True)
    assert not journal_of(tmp_path).exists() and fresh.committed() == (set(), 0)


def test_close_keeps_the_rows_and_finish_may_follow(tmp_path: Path) -> None:
    sink = Sink(tmp_path, SCHEMA, "fp", write_seconds=60)  # never due on its own
    sink.committed()
    sink.append([answered(1), answered(2)])
    sink.close()  # e.g. the job failed: the rows are journaled, synced
    assert read_journal(journal_of(tmp_path), SCHEMA, "fp")[0].num_rows == 2
    with pytest.raises(RuntimeError, match="after finish or close"):
        sink.append([answered(3)])
    sink.finish({"rows": 2})
    assert table_of(tmp_path)["review_id"].to_list() == [1, 2]
    assert not journal_of(tmp_path).exists()


JOURNAL_WRITER = """
import sys
sys.path.insert(0, {root!r})
import time
from pathlib import Path
from tests.test_sink import SCHEMA, answered, failed
from pipeline.sink import Sink
sink = Sink(Path({out!r}), SCHEMA, "fp", part_rows=500, write_seconds=0, sync_seconds=0.2)
sink.committed()
for start in range(0, 10**6, 20):
    sink.append([answered(i) if i % 3 else failed(i) for i in range(start, start + 20)])
    print(start + 19, flush=True)  # every row up to here has been appended
    time.sleep(0.002)
"""


def test_kill_9_loses_no_appended_row(tmp_path: Path) -> None:
    root = str(Path(__file__).resolve().parents[1])
    script = JOURNAL_WRITER.format(root=root, out=str(tmp_path))
    writer = subprocess.Popen(
        [sys.executable, "-c", script], cwd=root, stdout=subprocess.PIPE, text=True
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
    assert len(list(tmp_path.glob("part-*.parquet"))) >= 2
    assert read_journal(journal_of(tmp_path), SCHEMA, "fp")[0].num_rows > 0
    resumed = Sink(tmp_path, SCHEMA, "fp")
    state = resumed.prepare_resume()
    assert state.journal_rows > 0  # the kill found rows in the journal, and they were kept
    frame = table_of(tmp_path)
    ids = frame["review_id"].to_list()
    assert frame["review_id"].is_unique().all() and set(ids) == state.ids
    appended = {i for i in range(last + 1) if i % 3}
    assert appended <= state.ids  # every row appended before the kill is there
    assert all(i % 3 for i in ids)  # the network errors were cut out, to be retried
    assert max(ids) <= last + 20  # at most the record being written when the kill came


FULL_DISK = """
import resource, signal, sys
from pathlib import Path
from tests.test_sink import SCHEMA, answered
from pipeline.errors import OutputError
from pipeline.sink import Sink

out = Path(sys.argv[1])
sink = Sink(out, SCHEMA, "fp", part_rows=100_000, write_seconds=0)
sink.committed()
sink.append([answered(i) for i in range(10)])  # journaled before the disk fills
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
size = (out / "_journal.bin").stat().st_size
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 1000, size + 1000))
try:
    sink.append([answered(i) for i in range(10, 5000)])
except OutputError as exc:
    print(exc.one_line())
"""


def test_a_full_disk_is_one_output_error_and_keeps_the_journal(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(out)],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip()
    assert line.startswith("OutputError: output.path ") and "File too large" in line, line
    assert "\n" not in line and "Traceback" not in done.stderr
    # The torn write was cut back: the rows journaled before it are still readable.
    kept = read_journal(out / JOURNAL, SCHEMA, "fp")[0]
    assert kept["review_id"].to_pylist() == list(range(10))
