"""The nightly Delta table kept: compaction, checkpoint and retention (real deltalake, polars).

The sink tests write nights through the Delta sink's real path (sinkdata's rows, four rows a
part) and keep them with `evalpipe.lake.maintain` / `evalpipe maintain`, then read the table
back with polars and deltalake: the same rows, each id once, the runs' history and their
application transactions (what a resume compares its journal with) untouched. The job tests run
`evalpipe run` for real: a night kept by its own run, another killed with SIGKILL while its run
keeps the table, then run again and restarted; and `evalpipe maintain` killed mid-compaction in a
process of its own. One test keeps a table on the loopback S3 server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import psutil
import pyarrow.fs as pafs
import pytest
import yaml
from click.testing import CliRunner

from conftest import API_KEY, cli_run, job_config
from evalpipe.cli.main import main
from evalpipe.config import parse_config
from evalpipe.output import Sink, output_lock
from evalpipe.output.delta import table as lake
from evalpipe.output.delta.table import app_id
from evalpipe.output.delta.upkeep import active_files, maintain
from evalpipe.output.outdir import journal_name
from evalpipe.service import EmbeddedService, ServiceSettings
from sinkdata import SCHEMA, answered
from test_resume import evalpipe_command, write_corpus

NIGHTS = ("2026-11-26", "2026-11-27", "2026-11-28")
ROWS = 20  # a night: five parts of four rows


def write_night(out: Path | str, night: str, rows: int = ROWS, **options: Any) -> Sink:
    """A night through the Delta sink (finished unless `options` say `finish=False`); the ids
    its resume found committed are `sink.found`."""
    finish = options.pop("finish", True)
    sink = Sink.open(
        out, SCHEMA, "fp", format="delta", run_id=f"run-{night}", partition={"dt": night},
        part_rows=4, write_seconds=0, provenance={"evalpipe_version": "test", "config_hash": "h"},
        **options,
    )  # fmt: skip
    sink.committed()
    done = set(sink.resume().ids.to_pylist())
    sink.found = done  # type: ignore[attr-defined]
    sink.append([answered(i) for i in range(rows) if i not in done])
    if finish:
        sink.finish({"rows": rows})
    return sink


def files(out: Path | str) -> dict[str, int]:
    return {k[0]: n for k, n in active_files(lake.load(out)).items()}


def frame(out: Path | str, key: str = "review_id", **options: Any) -> pl.DataFrame:
    return pl.read_delta(str(out), **options).sort("dt", key)


def assert_exact(out: Path | str, nights: tuple[str, ...], rows: int = ROWS, **opts: Any) -> None:
    """Every night: its ids once, all of them (polars' own Delta reader)."""
    read = frame(out, **opts)
    for night in nights:
        assert read.filter(pl.col("dt") == night)["review_id"].to_list() == list(range(rows))
    assert read.height == rows * len(nights)


def cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


# --------------------------------------------------------------------------- the table


def test_a_night_compacted_changes_no_row_and_keeps_what_a_resume_needs(tmp_path: Path) -> None:
    out = tmp_path / "table"
    for night in NIGHTS:
        write_night(out, night)
    assert files(out) == dict.fromkeys(NIGHTS, 5)
    before = frame(out)
    table = lake.load(out)
    apps = {n: app_id("fp", {"dt": n}) for n in NIGHTS}
    sequences = {n: table.transaction_version(a) for n, a in apps.items()}
    runs = lake.runs(table, out)

    done = maintain(out, [{"dt": NIGHTS[1]}], retention_hours=168)
    assert (done.files_before, done.files_after, done.nights, done.rewritten) == (15, 11, 1, 5)
    assert files(out) == {NIGHTS[0]: 5, NIGHTS[1]: 1, NIGHTS[2]: 5}
    assert frame(out).equals(before)  # the same rows, every column
    table = lake.load(out)
    assert {n: table.transaction_version(a) for n, a in apps.items()} == sequences
    assert lake.runs(table, out) == runs  # maintenance commits are not runs
    assert (out / "_delta_log" / f"{done.checkpoint:020d}.checkpoint.parquet").exists()

    # Within the retention, time travel to before the compaction still reads its files.
    old = runs[-1]["versions"][-1]
    assert pl.read_delta(str(out), version=old).height == 3 * ROWS

    # The night resumed after it: every id found committed, none committed twice.
    again = write_night(out, NIGHTS[1])
    assert again.found == set(range(ROWS))  # type: ignore[attr-defined]
    assert_exact(out, NIGHTS)


def test_every_night_kept_then_rerun_and_restarted_each_id_once(tmp_path: Path) -> None:
    """The command's maintenance (every night, full vacuum), a night restarted after it, and
    the retention: files compaction replaced go once they are older than it; a killed run's
    journal (a `_` name) and the lock file stay."""
    out = tmp_path / "table"
    for night in NIGHTS[:2]:
        write_night(out, night)
    killed = write_night(out, NIGHTS[2], rows=10, finish=False)
    killed.close()  # as kill -9 leaves it: batches committed, the rest in the journal
    journal = out / journal_name({"dt": NIGHTS[2]})
    assert journal.exists()
    (out / f"dt={NIGHTS[0]}" / "orphan.parquet").write_bytes(b"a killed writer's")

    kept = maintain(out, None, retention_hours=168, full=True)
    assert kept.nights == 3 and max(files(out).values()) == 1
    assert kept.vacuumed == 0  # everything replaced is younger than a week
    assert journal.exists() and (out / f"dt={NIGHTS[0]}" / "orphan.parquet").exists()

    write_night(out, NIGHTS[2])  # the killed night resumed: its journal committed once
    assert not journal.exists()
    write_night(out, NIGHTS[1], restart=True)  # a night rerun from scratch after maintenance
    assert_exact(out, NIGHTS)

    os.utime(out / f"dt={NIGHTS[0]}" / "orphan.parquet", (1, 1))  # a year old
    time.sleep(1.1)
    swept = maintain(out, None, retention_hours=0, full=True)
    assert max(files(out).values()) == 1 and swept.vacuumed >= 3 * 5
    assert not (out / f"dt={NIGHTS[0]}" / "orphan.parquet").exists()
    on_disk = sorted(p.parent.name for p in out.rglob("*.parquet") if "_delta_log" not in p.parts)
    assert on_disk == [f"dt={n}" for n in NIGHTS]  # one file a night, nothing else
    assert_exact(out, NIGHTS)
    table = lake.load(out)
    assert table.transaction_version(app_id("fp", {"dt": NIGHTS[2]})) is not None


def test_z_order_rewrites_a_night_by_the_columns_given(tmp_path: Path) -> None:
    out = tmp_path / "table"
    write_night(out, NIGHTS[0])
    done = maintain(out, [{"dt": NIGHTS[0]}], z_order=["helpful__p_true"])
    assert done.rewritten == 5 and files(out) == {NIGHTS[0]: 1}
    assert_exact(out, NIGHTS[:1])


def test_the_settings_and_the_command(tmp_path: Path) -> None:
    base = {
        "input": {"path": "in.parquet", "id_column": "id", "state": "text"},
        "service": {"base_url": "embedded"},
        "model": "model-1.13.0",
        "questions": {"q": {"type": "noul", "instructions": "Is it?"}},
    }
    output = parse_config({**base, "output": {"path": "o", "format": "delta"}}).output
    assert (output.maintain, output.retention_days, output.z_order) == (True, 7, ())
    with pytest.raises(Exception, match=r"output\.retention_days"):
        parse_config({**base, "output": {"path": "o", "retention_days": 0}})

    out = tmp_path / "table"
    for night in NIGHTS:
        write_night(out, night)
    result = cli("maintain", str(out), "--json")
    assert result.exit_code == 0, result.output
    figures = orjson.loads(result.stdout)
    assert (figures["files_before"], figures["files_after"]) == (15, 3)
    text = cli("maintain", str(out))
    assert text.exit_code == 0 and "3 -> 3 data files (0 nights compacted" in text.stdout

    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump({**base, "output": {"path": str(out), "format": "delta",
                                                         "retention_days": 2}}))  # fmt: skip
    kept = cli("maintain", "--config", str(config))
    assert kept.exit_code == 0 and "(older than 2 days and no longer needed)" in kept.stdout

    for args, says in [
        ((str(tmp_path),), "which evalpipe does not keep"),
        ((f"{out}/dt={NIGHTS[0]}",), "is not the root of a Delta table"),
        (("--config", str(config), str(out)), "name the table twice"),
        ((), "OUTPUT: name the Delta table"),
    ]:
        refused = cli("maintain", *args)
        assert refused.exit_code == 2 and says in refused.stderr, refused.output

    import fcntl

    with output_lock(out).open("a") as held:  # a run holds the table
        fcntl.flock(held, fcntl.LOCK_EX)
        refused = cli("maintain", str(out))
    assert refused.exit_code == 9 and "OutputLocked" in refused.stderr


@pytest.mark.subprocess
def test_a_table_on_s3_kept(s3: pafs.FileSystem, tmp_path: Path) -> None:
    """`evalpipe maintain` of a table on the loopback S3 server, in a process of its own as a
    scheduler runs it: every night one file, the same rows."""
    out = "s3://tables/kept-nightly"
    for night in NIGHTS:
        write_night(out, night, staging=tmp_path / "stage")
    options = {"storage_options": lake.storage_options(out)}
    before = frame(out, **options)
    command = [*evalpipe_command(), "maintain", out, "--json"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    figures = orjson.loads(done.stdout)
    assert (figures["files_before"], figures["files_after"]) == (15, 3)
    assert frame(out, **options).equals(before)
    assert_exact(out, NIGHTS, **options)


# --------------------------------------------------------------------------- kill -9


def _new_files(night_dir: Path, before: set[str]) -> bool:
    return bool({p.name for p in night_dir.iterdir()} - before) if night_dir.exists() else False


@pytest.mark.subprocess
def test_evalpipe_maintain_killed_mid_compaction_then_run_again(tmp_path: Path) -> None:
    """`evalpipe maintain` in a process of its own, SIGKILLed as soon as the first compacted
    file appears (before the compaction's commit, or just after it) while nights are still to
    be compacted: every night exact either way; the same command again leaves one file a night
    and every id once.

    Ten nights of two files each: compaction goes a night at a time, one commit each (about
    20 ms a night here), and the kill lands within a night or so of the first file (so even
    on a loaded machine), most nights not yet compacted; larger nights would only make the
    table slower to write."""
    out = tmp_path / "table"
    nights = [f"2026-10-{d:02d}" for d in range(1, 11)]
    rows = 8  # two parts of four rows: a night to compact
    for night in nights:
        write_night(out, night, rows=rows)
    before = {n: {p.name for p in (out / f"dt={n}").iterdir()} for n in nights}
    command = [*evalpipe_command(), "maintain", str(out)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not any(_new_files(out / f"dt={n}", before[n]) for n in nights):
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        assert time.monotonic() < deadline
        time.sleep(0.001)
    os.kill(process.pid, signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL  # killed, not ended
    assert max(files(out).values()) == 2  # nights still to compact at the kill
    assert_exact(out, tuple(nights), rows=rows)

    again = cli("maintain", str(out))  # the same command (here, the rerun's output checked)
    assert again.exit_code == 0, again.output
    assert max(files(out).values()) == 1
    assert_exact(out, tuple(nights), rows=rows)
    for night in nights[:2]:  # a night resumed after it: nothing committed twice
        write_night(out, night, rows=rows)
    assert_exact(out, tuple(nights), rows=rows)


def _night_config(tmp: Path, url: str, out: str, night: str, **more: Any) -> Path:
    config = job_config(
        tmp, url, output={"path": out, "format": "delta", "partition": {"dt": night},
                          "part_rows": 20}, cache={"enabled": False},
        concurrency={"actors": 1}, **more,
    )  # fmt: skip
    path = tmp / f"job-{night}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.subprocess
def test_a_run_keeps_its_night_and_a_kill_while_it_keeps_it_loses_nothing(
    ray_address: str, tmp_path: Path
) -> None:
    """Night 1 through `evalpipe run`: one file after its run, the summary says so. Night 2 in a
    process of its own, SIGKILLed once it says it keeps the table (its rows committed); the same
    command again sends nothing and keeps the night; `--restart` of it leaves each id once."""
    n = 100
    write_corpus(tmp_path / "in.parquet", n)
    out = str(tmp_path / "table")
    settings = ServiceSettings(api_key=API_KEY, rpm=60_000, tps=10_000_000)
    with EmbeddedService(settings) as service:
        first = cli_run(_night_config(tmp_path, service.base_url, out, NIGHTS[0]),
                        "--ray-address", ray_address)  # fmt: skip
        assert "table kept    5 -> 1 data files" in first.stdout
        assert files(out) == {NIGHTS[0]: 1}

        second = _night_config(tmp_path, service.base_url, out, NIGHTS[1])
        log = tmp_path / "night2.log"
        env = {**os.environ, "EVAL_API_KEY": API_KEY}
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [*evalpipe_command(), "run", str(second), "--ray-address", ray_address,
                 "--log-format", "json"],
                stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 120
        while b'"event":"maintain"' not in log.read_bytes():
            assert process.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.005)
        # Held at once where it said it keeps the table, then killed: stopped, not ended, and
        # its summary (written once the upkeep is done) not yet in its log, so the kill lands
        # while it keeps the night however late this process saw the event.
        os.killpg(process.pid, signal.SIGSTOP)
        held = psutil.Process(process.pid)
        while held.status() not in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE):
            time.sleep(0.001)  # the signal is taken at its next turn on a core
        assert held.status() == psutil.STATUS_STOPPED, log.read_text()[-2000:]
        assert b'"event":"summary"' not in log.read_bytes(), log.read_text()[-2000:]
        os.killpg(process.pid, signal.SIGKILL)
        assert process.wait() == -signal.SIGKILL
        night = frame(out, "id").filter(pl.col("dt") == NIGHTS[1])["id"].to_list()
        assert night == list(range(n))

        again = cli_run(second)
        assert f"{n} committed by an earlier run" in again.stdout
        assert files(out) == {NIGHTS[0]: 1, NIGHTS[1]: 1}
        cli_run(second, "--restart")
        read = frame(out, "id")
        for night in NIGHTS[:2]:
            assert read.filter(pl.col("dt") == night)["id"].to_list() == list(range(n))
        assert files(out) == {NIGHTS[0]: 1, NIGHTS[1]: 1}
