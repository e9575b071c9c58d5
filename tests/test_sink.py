"""Sink: parts, the manifest and its runs, conflicts, resume and stale rows, on real files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import orjson
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from evalpipe.errors import ConfigError, ResumeConflict
from evalpipe.output.manifest import MANIFEST
from evalpipe.output.outdir import JOURNAL
from evalpipe.output.sink import Sink
from evalpipe.output.table import LAYOUT_KEY, stale_ids, state_hashes
from sinkdata import (
    SCHEMA,
    answered,
    digest,
    failed,
    manifest_of,
    part_files,
    run,
    table_of,
)

HEX = "0123456789abcdef" * 2


def inodes(out: Path) -> dict[str, int]:
    return {name: (out / name).stat().st_ino for name in part_files(out)}


def by_sequence(names: list[str] | dict[str, int]) -> dict[str, str]:
    """Part names by their sequence number (`part-00003`)."""
    return {name[:10]: name for name in names}


# --------------------------------------------------------------------------- parts


def test_every_part_has_one_schema_even_a_part_of_error_rows(tmp_path: Path) -> None:
    """DESIGN "Output table": same types in every part, so the dir reads as one table."""
    run(tmp_path, [answered(1), answered(2)])
    run(tmp_path, [failed(3, "rejected"), failed(4, "invalid_state")], run_id="run-2")
    parts = part_files(tmp_path)
    assert len(parts) == 2
    for name in parts:
        schema = pq.read_schema(tmp_path / name)
        assert schema.equals(SCHEMA, check_metadata=False)
        assert schema.metadata[LAYOUT_KEY] == SCHEMA.metadata[LAYOUT_KEY]
    (tmp_path / f".part-99999-{HEX}.parquet.{HEX}.tmp").write_bytes(b"junk")  # readers skip it
    frame = table_of(tmp_path)
    assert frame.schema["sentiment__choice"] == pl.String
    assert frame.schema["quality__p__ok"] == pl.Float64
    assert frame.schema["_input_tokens"] == frame.schema["_row"] == pl.Int64
    assert frame.schema["_cached"] == pl.Boolean
    assert frame.schema["_scored_at"] == pl.Datetime("ms", "UTC")
    assert frame.schema["_reused"] == pl.Boolean
    assert frame["_error_type"].to_list() == [None, None, "rejected", "invalid_state"]
    assert frame["_run_id"].to_list() == ["run-1", "run-1", "run-2", "run-2"]
    assert frame["_state_hash"].to_list()[2:] == [digest(3).hex(), None]
    assert frame["_cached"].to_list() == [False] * 4 and frame["_reused"].to_list() == [False] * 4
    assert frame.filter(pl.col("review_id") > 2)["helpful__p_true"].null_count() == 2
    dataset = ds.dataset(tmp_path, format="parquet")  # ignores '_' and '.' names by default
    assert sorted(dataset.to_table()["review_id"].to_pylist()) == [1, 2, 3, 4]
    assert sorted(Path(f).name for f in dataset.files) == parts


def test_manifest_lists_parts_and_summary(tmp_path: Path) -> None:
    run(tmp_path, [answered(1), failed(2, "rejected")], fingerprint="fp-1")
    manifest = manifest_of(tmp_path)
    assert manifest["fingerprint"] == "fp-1"
    assert manifest["parts"] == [{"name": part_files(tmp_path)[0], "rows": 2}]
    assert manifest["rows"] == 2 and manifest["summary"] == {"rows": 2}
    assert manifest["schema"][0] == {"name": "review_id", "type": "int64"}
    assert manifest["finished"] is not None
    assert [p for p in os.listdir(tmp_path) if p.endswith(".tmp")] == []


def test_manifest_keeps_the_history_of_runs(tmp_path: Path) -> None:
    killed = Sink.open(tmp_path, SCHEMA, "fp", run_id="run-1", write_seconds=0)
    killed.resume()
    killed.append([answered(1)])  # then killed: it never records its end
    assert [r["ended_how"] for r in manifest_of(tmp_path)["runs"]] == [None]

    run(tmp_path, [answered(2)], run_id="run-2", ended_how="stopped")
    manifest = manifest_of(tmp_path)
    first, second = manifest["runs"]
    assert (first["run_id"], first["ended_how"], first["ended"]) == ("run-1", "interrupted", None)
    assert (second["run_id"], second["ended_how"]) == ("run-2", "stopped")
    assert second["started"] <= second["ended"] and second["summary"] == {"rows": 1}
    assert manifest["summary"] == {"rows": 1} and manifest["finished"] is None

    run(tmp_path, [answered(3)], run_id="run-3")
    manifest = manifest_of(tmp_path)
    assert [r["ended_how"] for r in manifest["runs"]] == ["interrupted", "stopped", "finished"]
    assert manifest["finished"] == manifest["runs"][-1]["ended"]
    assert table_of(tmp_path)["review_id"].to_list() == [1, 2, 3]


@pytest.mark.parametrize("ended_how", ["stopped", "failed"])
def test_a_stopped_or_failed_run_folds_its_journal_into_parts(
    tmp_path: Path, ended_how: str
) -> None:
    sink = Sink.open(tmp_path, SCHEMA, "fp", run_id="run-1", write_seconds=60)
    sink.resume()
    sink.append([answered(1), failed(2, "network")])
    sink.close()
    sink.finish({"rows_answered": 1}, ended_how)  # type: ignore[arg-type]
    assert not (tmp_path / JOURNAL).exists()
    assert table_of(tmp_path)["review_id"].to_list() == [1, 2]
    assert manifest_of(tmp_path)["runs"][0]["ended_how"] == ended_how


def test_a_run_that_fails_before_its_resume_leaves_the_rows_alone(tmp_path: Path) -> None:
    sink = Sink.open(tmp_path, SCHEMA, "fp", run_id="run-1", write_seconds=0)
    sink.resume()
    sink.append([answered(1), failed(2, "overloaded")])
    sink.close()  # killed: its rows are in the journal
    early = Sink.open(tmp_path, SCHEMA, "fp", run_id="run-2")
    with pytest.raises(RuntimeError, match="before resume"):
        early.append([answered(3)])
    early.finish({}, "failed")  # e.g. the service refused the key
    assert (tmp_path / JOURNAL).exists() and part_files(tmp_path) == []
    runs = manifest_of(tmp_path)["runs"]
    assert [r["ended_how"] for r in runs] == ["interrupted", "failed"]
    assert run(tmp_path, [], run_id="run-3").ids.to_pylist() == [1]


def test_resume_and_committed_run_once_in_order(tmp_path: Path) -> None:
    sink = Sink.open(tmp_path, SCHEMA, "fp", run_id="run-1")
    sink.resume()
    with pytest.raises(RuntimeError, match="runs once"):
        sink.resume()
    with pytest.raises(RuntimeError, match="call it before"):
        sink.committed()
    sink.finish({})
    with pytest.raises(RuntimeError, match="twice"):
        sink.finish({})


# --------------------------------------------------------------------------- conflicts, restart


def test_other_fingerprint_is_a_resume_conflict(tmp_path: Path) -> None:
    run(tmp_path, [answered(1)], fingerprint="fp-1")
    with pytest.raises(ResumeConflict) as info:
        Sink.open(tmp_path, SCHEMA, "fp-2", run_id="run-2")
    assert str(info.value) == (
        f"output dir '{tmp_path}' was written by a job with a different config (questions, "
        "model or state mapping); use --restart to start over or choose another output.path"
    )


def test_restart_removes_only_our_files(tmp_path: Path) -> None:
    run(tmp_path, [answered(1)], fingerprint="fp-1")
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / f"._manifest.json.{HEX}.tmp").write_text("{")
    sink = Sink.open(tmp_path, SCHEMA, "fp-2", run_id="run-2", restart=True)
    assert sorted(os.listdir(tmp_path)) == [MANIFEST, "notes.txt"]
    assert [r["run_id"] for r in manifest_of(tmp_path)["runs"]] == ["run-2"]
    assert sink.resume().rows == 0
    sink.append([answered(2)])
    sink.finish({})
    assert table_of(tmp_path)["review_id"].to_list() == [2]


def test_a_manifest_that_cannot_be_used(tmp_path: Path) -> None:
    run(tmp_path, [answered(1)])
    (tmp_path / MANIFEST).write_text("{not json")
    with pytest.raises(ResumeConflict, match=r"unreadable _manifest\.json"):
        Sink.open(tmp_path, SCHEMA, "fp", run_id="run-2")
    Sink.open(tmp_path, SCHEMA, "fp", run_id="run-2", restart=True)  # --restart still works
    (tmp_path / MANIFEST).write_bytes(orjson.dumps({**manifest_of(tmp_path), "format": 99}))
    with pytest.raises(ResumeConflict, match="written by a newer evalpipe"):
        Sink.open(tmp_path, SCHEMA, "fp", run_id="run-3")


def test_a_part_of_another_schema_or_unreadable_is_a_resume_conflict(tmp_path: Path) -> None:
    run(tmp_path, [answered(1), answered(2)])
    (part,) = part_files(tmp_path)
    pq.write_table(pa.table({"review_id": [1, 2]}), tmp_path / part)
    with pytest.raises(ResumeConflict, match="has another schema than this job's"):
        Sink.open(tmp_path, SCHEMA, "fp", run_id="run-2").resume()
    (tmp_path / part).write_bytes(b"PAR1 not a footer")
    with pytest.raises(ResumeConflict, match=r"cannot be read \(.+\); use --restart"):
        Sink.open(tmp_path, SCHEMA, "fp", run_id="run-3").resume()


def test_foreign_parquet_is_refused(tmp_path: Path) -> None:
    pq.write_table(pa.table({"x": [1]}), tmp_path / "theirs.parquet")
    with pytest.raises(ConfigError, match=r"holds Parquet files this tool did not write \("):
        Sink.open(tmp_path, SCHEMA, "fp", run_id="run-1", restart=True)
    assert (tmp_path / "theirs.parquet").exists()


def test_output_path_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "out").write_text("")
    with pytest.raises(ConfigError, match="exists and is not a directory"):
        Sink.open(tmp_path / "out", SCHEMA, "fp", run_id="run-1")


def test_parts_without_manifest_are_refused(tmp_path: Path) -> None:
    run(tmp_path, [answered(1)])
    (tmp_path / MANIFEST).unlink()
    with pytest.raises(ResumeConflict, match=r"no _manifest\.json"):
        Sink.open(tmp_path, SCHEMA, "fp", run_id="run-2")


# --------------------------------------------------------------------------- resume


def test_resume_cuts_retryable_rows_and_rewrites_each_part_once(tmp_path: Path) -> None:
    rows = [answered(1), failed(2, "rate_limited"), failed(4, "server_error")]
    rows += [failed(5, "overloaded"), answered(3), answered(6), failed(7, "invalid_state")]
    sink = Sink.open(tmp_path, SCHEMA, "fp", run_id="run-1", part_rows=2, write_seconds=0)
    sink.resume()
    for start in range(0, len(rows), 2):  # parts: {1, 2r}, {4r, 5r}, {3, 6}, {7}
        sink.append(rows[start : start + 2])
    sink.close()
    sink.finish({})
    before = inodes(tmp_path)
    leftover = tmp_path / f".part-00009-{HEX}.parquet.{HEX}.tmp"  # a kill mid-write
    leftover.write_bytes(b"half a part")
    not_ours = tmp_path / ".part-notes.tmp"
    not_ours.write_bytes(b"")

    state = run(tmp_path, [answered(i) for i in (2, 4, 5)], run_id="run-2")
    assert sorted(state.ids.to_pylist()) == [1, 3, 6, 7]  # answered and final errors
    assert (state.rows, state.retry_rows, state.temp_files_removed) == (4, 3, 1)
    assert not leftover.exists() and not_ours.exists()
    after = inodes(tmp_path)
    names = sorted(before)
    assert names[1] not in after  # the all-retryable part is gone
    # the cut part is a new file of the same sequence number; the old one is gone
    cut = by_sequence(after)[names[0][:10]]
    assert cut != names[0] and names[0] not in after
    assert after[names[2]] == before[names[2]] and after[names[3]] == before[names[3]]
    assert len(after) == 4  # the three left, and run-2's part
    frame = table_of(tmp_path)
    assert frame["review_id"].to_list() == [1, 2, 3, 4, 5, 6, 7]
    assert frame.filter(pl.col("review_id").is_in([2, 4, 5]))["_error_type"].null_count() == 3
    assert run(tmp_path, [], run_id="run-3").rows == 7


def test_part_missing_from_manifest_still_counts(tmp_path: Path) -> None:
    run(tmp_path, [answered(1)])
    before = (tmp_path / MANIFEST).read_bytes()
    run(tmp_path, [answered(2)], run_id="run-2")
    # a kill between the part's rename and the manifest update: the old manifest remains
    (tmp_path / MANIFEST).write_bytes(before)
    assert sorted(run(tmp_path, [], run_id="run-3").ids.to_pylist()) == [1, 2]
    assert [p["name"] for p in manifest_of(tmp_path)["parts"]] == part_files(tmp_path)


def test_new_parts_do_not_reuse_names_after_resume(tmp_path: Path) -> None:
    run(tmp_path, [answered(1)])
    run(tmp_path, [answered(2)], run_id="run-2")
    first, second = part_files(tmp_path)
    assert first.startswith("part-00000-") and second.startswith("part-00001-")


def test_a_moved_output_dir_resumes(tmp_path: Path) -> None:
    """Nothing in the manifest or parts depends on the dir's path; resuming twice is a no-op."""
    run(tmp_path / "out", [answered(1), failed(2)])
    moved = tmp_path / "moved"
    shutil.move(tmp_path / "out", moved)
    assert run(moved, [answered(2)], run_id="run-2").ids.to_pylist() == [1]
    assert run(moved, [], run_id="run-3").retry_rows == 0
    assert table_of(moved)["review_id"].to_list() == [1, 2]


# --------------------------------------------------------------------------- stale rows


def test_stale_rows_are_cut_once_and_scored_again(tmp_path: Path) -> None:
    rows = [answered(i) for i in range(9)] + [failed(9, "invalid_state")]
    rows[5] = failed(5, "network")
    run(tmp_path, rows, part_rows=4)  # parts: 0-3, 4-7, 8-9
    before = inodes(tmp_path)

    sink = Sink.open(tmp_path, SCHEMA, "fp", run_id="run-2", write_seconds=0)
    committed = sink.committed()
    assert committed.schema.names == ["review_id", "_state_hash"]
    assert committed.schema.types == [pa.int64(), pa.string()]
    pairs = dict(zip(*committed.to_pydict().values(), strict=True))
    assert pairs == {i: None if i == 9 else digest(i).hex() for i in range(10) if i != 5}
    now = {i: digest(i, version=1 if i == 6 else 0) for i in range(10)}  # 6 edited, 9 valid now
    current = pa.table({"review_id": list(now), "_state_hash": state_hashes(list(now.values()))})
    stale = stale_ids(committed, current)
    assert sorted(stale.to_pylist()) == [6, 9]

    state = sink.resume(stale)
    assert (state.stale_rows, state.retry_rows) == (2, 1)
    assert sorted(state.ids.to_pylist()) == [0, 1, 2, 3, 4, 7, 8]
    after = inodes(tmp_path)
    assert by_sequence(after).keys() == by_sequence(before).keys()  # one part per sequence
    first = min(before)
    assert after[first] == before[first]  # no cut, no new file
    assert all(n not in after for n in before if n != first)  # cut: new files
    assert table_of(tmp_path)["review_id"].to_list() == [0, 1, 2, 3, 4, 7, 8]

    sink.append([answered(5), answered(6, version=1), answered(9)])
    sink.finish({})
    frame = table_of(tmp_path)
    assert frame["review_id"].to_list() == list(range(10))  # each id once
    assert frame["_state_hash"].to_list() == [h.hex() for h in now.values()]
    changed = frame.filter(pl.col("_run_id") == "run-2")["review_id"].to_list()
    assert changed == [5, 6, 9]


def test_stale_rows_in_a_killed_runs_journal_are_cut_too(tmp_path: Path) -> None:
    killed = Sink.open(tmp_path, SCHEMA, "fp", run_id="run-1", write_seconds=0)
    killed.resume()
    killed.append([answered(i) for i in range(4)])
    killed.close()
    sink = Sink.open(tmp_path, SCHEMA, "fp", run_id="run-2")
    assert sorted(sink.committed()["review_id"].to_pylist()) == [0, 1, 2, 3]
    state = sink.resume(pa.array([1, 42]))  # an id that is nowhere is no matter
    assert (state.stale_rows, state.journal_rows) == (1, 3)
    assert not (tmp_path / JOURNAL).exists()
    assert table_of(tmp_path)["review_id"].to_list() == [0, 2, 3]


def test_a_cut_killed_before_it_deleted_the_old_part_leaves_no_duplicate(tmp_path: Path) -> None:
    """A resume writes the rows a part keeps as a new part of the same sequence number, then
    deletes the old part; killed in between, both are there and the next resume keeps the
    smaller (the cut), so each row is there once."""
    run(tmp_path, [answered(1), failed(2), answered(3)], part_rows=3)
    (old,) = part_files(tmp_path)
    kept = pq.read_table(tmp_path / old).filter(pa.array([True, False, True]))
    cut = f"{old[:11]}{HEX}.parquet"
    pq.write_table(kept.replace_schema_metadata(SCHEMA.metadata), tmp_path / cut)
    sink = Sink.open(tmp_path, SCHEMA, "fp", run_id="run-2")
    assert sorted(sink.committed()["review_id"].to_pylist()) == [1, 3]  # the old part is out
    state = sink.resume()
    assert (sorted(state.ids.to_pylist()), state.retry_rows) == ([1, 3], 0)
    assert part_files(tmp_path) == [cut]
    sink.append([answered(2)])
    sink.finish({})
    assert table_of(tmp_path)["review_id"].to_list() == [1, 2, 3]


def test_an_id_committed_twice_is_cut_everywhere_and_sent_once_more(tmp_path: Path) -> None:
    """Two hosts wrote one output (one after its lease lapsed): a part of each with rows 3-5.
    The resume leaves no id twice: every copy goes, and the ids are sent again, once."""
    from sinkdata import answered, part_files, run, table_of

    out = tmp_path / "out"
    run(out, [answered(i) for i in range(6)], part_rows=3)  # parts 0-2 and 3-5
    second = out / part_files(out)[1]
    shutil.copy(second, out / "part-00009-0123456789abcdef0123456789abcdef.parquet")
    assert table_of(out)["review_id"].to_list() == [0, 1, 2, 3, 3, 4, 4, 5, 5]
    state = run(out, [], run_id="run-2", part_rows=3)
    assert sorted(state.ids.to_pylist()) == [0, 1, 2]  # 3-5 are to be sent again
    assert table_of(out)["review_id"].to_list() == [0, 1, 2]
    run(out, [answered(i) for i in range(3, 6)], run_id="run-3", part_rows=3)
    assert table_of(out)["review_id"].to_list() == list(range(6))
