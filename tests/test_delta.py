"""`output.format: delta`: one Delta Lake table for every night, exactly once (real deltalake).

The sink tests drive a Delta `Sink` as the runner does (sinkdata's rows) and read the table back
with deltalake and polars; a kill is a sink closed without `finish` (its journal left as kill -9
leaves it), and a kill between a commit and the next journal is the old journal put back. The
job tests run `evalpipe run` for real: night 2 in a process of its own, killed with SIGKILL
mid-run and run again; then `--restart` of night 2 and a third night with one more question.
The S3 test does the same kill and resume on the loopback S3 server.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.fs as pafs
import pytest
import yaml

from conftest import API_KEY, QUESTIONS, cli_run, job_config
from evalpipe.config import load_config, parse_config
from evalpipe.config.load import apply_overrides
from evalpipe.errors import ConfigError, ResumeConflict
from evalpipe.output import Sink
from evalpipe.output.delta import table as lake
from evalpipe.output.delta.schema import arrow_schema
from evalpipe.output.journal import read_journal
from evalpipe.output.outdir import journal_name
from evalpipe.output.table import output_schema
from evalpipe.service import EmbeddedService, ServiceSettings
from evalpipe.stores.location import staging_dir
from sinkdata import QUESTIONS as SINK_QUESTIONS, SCHEMA, answered, failed
from test_resume import assert_answered, kill_9_joined, start, wait_for, write_corpus

NIGHTS = ("2026-11-26", "2026-11-27", "2026-11-28")


def open_night(out: Path | str, night: str, schema: pa.Schema = SCHEMA, **options: Any) -> Sink:
    return Sink.open(
        out, schema, "fp", format="delta", run_id=f"run-{night}", partition={"dt": night},
        part_rows=4, write_seconds=0, provenance={"evalpipe_version": "test", "config_hash": "h"},
        **options,
    )  # fmt: skip


def night_rows(out: Path | str, night: str) -> pl.DataFrame:
    """The night's rows as polars reads the table (its own Delta reader)."""
    frame = pl.read_delta(str(out)).filter(pl.col("dt") == night)
    return frame.sort("review_id")


def resume(sink: Sink) -> set[Any]:
    sink.committed()
    return set(sink.resume().ids.to_pylist())


# --------------------------------------------------------------------------- the sink


def test_each_batch_is_one_transaction_once_across_kills(tmp_path: Path) -> None:
    """Batches become transactions carrying (app id, sequence); a run closed without finish
    (kill -9) resumes from its journal; a journal whose batch was committed just before the
    kill (its sequence is in the table) is dropped, not committed twice."""
    out = tmp_path / "table"
    sink = open_night(out, NIGHTS[0])
    assert resume(sink) == set()
    sink.append([answered(i) for i in range(6)])  # one batch of 4 committed, 2 journaled
    journal = out / journal_name({"dt": NIGHTS[0]})
    before = journal.read_bytes()  # the journal of sequence 1, 2 rows
    sink.append([answered(i) for i in range(6, 8)])  # sequence 1 committed: a new journal
    sink.close()  # kill -9 here ...
    journal.write_bytes(before)  # ... between the commit and the new journal
    table = lake.load(out)
    assert table.transaction_version(sink.committer.app_id) == 1 and table.version() == 1

    again = open_night(out, NIGHTS[0])
    assert again.committed().num_rows == 8
    state = again.resume()
    assert set(state.ids.to_pylist()) == set(range(8)) and state.journal_duplicates == 2
    again.append([answered(8), failed(9, "rate_limited")])
    again.close()  # killed with two rows journaled (sequence 2)

    third = open_night(out, NIGHTS[0])
    state = third.resume()
    assert state.journal_rows == 2 and state.retry_rows == 1  # the 429 row is sent again
    third.append([answered(9)])
    third.finish({"rows": 10})
    rows = night_rows(out, NIGHTS[0])
    assert rows["review_id"].to_list() == list(range(10)) and rows["_error_type"].null_count() == 10
    table = lake.load(out)
    runs = lake.runs(table, out)
    assert [r["run_id"] for r in runs] == ["run-2026-11-26"]
    assert runs[0]["ended_how"] == "finished" and runs[0]["summary"] == {"rows": 10}
    assert runs[0]["evalpipe_version"] == "test" and runs[0]["config_hash"] == "h"
    assert not journal.exists()


def test_nights_restart_and_schema_evolution(tmp_path: Path) -> None:
    """Two nights in one partitioned table; a restart of night 2 replaces it alone, in one
    transaction; night 3 with one more question adds its columns (nights 1 and 2 null there),
    described in the Delta schema (`comment`); a changed question type is refused."""
    out = tmp_path / "table"
    for night, ids in ((NIGHTS[0], range(5)), (NIGHTS[1], range(5, 12))):
        sink = open_night(out, night)
        resume(sink)
        sink.append([answered(i) for i in ids])
        sink.finish({})
    first = night_rows(out, NIGHTS[0])

    killed = open_night(out, NIGHTS[1], restart=True)  # a restart killed before its first
    resume(killed)  # commit: its journal says the night is to be replaced
    killed.append([answered(200), answered(201)])
    killed.close()
    again = open_night(out, NIGHTS[1])
    assert again.committed()["review_id"].to_pylist() == [200, 201]
    assert again.resume().journal_rows == 2
    again.finish({})
    assert night_rows(out, NIGHTS[1])["review_id"].to_list() == [200, 201]
    assert night_rows(out, NIGHTS[0]).equals(first)
    version = lake.load(out).version()

    sink = open_night(out, NIGHTS[1], restart=True)
    assert resume(sink) == set()  # the night is to be replaced: everything is sent again
    sink.append([answered(i, p=0.25) for i in range(100, 103)])
    sink.finish({})
    table = lake.load(out)
    last = table.history(1)[0]  # the newest commit: one overwrite of the night
    assert last["operationParameters"]["mode"] == "Overwrite"
    assert "2026-11-27" in last["operationParameters"]["predicate"]
    assert table.version() == version + 1  # 3 rows, under part_rows: one transaction
    assert night_rows(out, NIGHTS[1])["review_id"].to_list() == [100, 101, 102]
    assert night_rows(out, NIGHTS[0]).equals(first)  # night 1 untouched

    more = {**{k: v.model_dump() for k, v in SINK_QUESTIONS.items()},
            "urgent": {"type": "noul", "instructions": "Is it urgent?"}}  # fmt: skip
    wider = output_schema("review_id", pa.int64(), more)
    sink = Sink.open(out, wider, "fp3", format="delta", run_id="run-3", partition={"dt": NIGHTS[2]})
    resume(sink)
    sink.append([answered(i) for i in range(3)])
    sink.finish({})
    frame = pl.read_delta(str(out))
    assert frame.filter(pl.col("dt") != NIGHTS[2])["urgent__p_true"].null_count() == 5 + 3
    schema = arrow_schema(lake.load(out))
    comment = (schema.field("urgent__p_true").metadata or {})[b"comment"].decode()
    assert comment.startswith("Question 'urgent' (yes/no: Is it urgent?)")
    assert all(b"comment" in (f.metadata or {}) for f in schema)
    con = duckdb.connect()  # DuckDB, through Arrow from deltalake
    con.register("scores", lake.query(lake.load(out), out, None, {}))
    nights = con.sql("SELECT dt, count(*) FROM scores GROUP BY dt ORDER BY dt").fetchall()
    assert nights == [(NIGHTS[0], 5), (NIGHTS[1], 3), (NIGHTS[2], 3)]
    changed = {
        **more,
        "urgent": {"type": "choice", "instructions": "?", "criteria": {"y": None, "n": None}},
    }
    with pytest.raises(
        ConfigError, match=r"^questions.urgent: is a choice question here but a noul"
    ):
        Sink.open(
            out, output_schema("review_id", pa.int64(), changed), "fp4", format="delta",
            run_id="r", partition={"dt": "2026-11-29"},
        )  # fmt: skip
    with pytest.raises(ResumeConflict, match=r"dt=2026-11-27 was written by a job with a diff"):
        Sink.open(out, wider, "fp3", format="delta", run_id="r", partition={"dt": NIGHTS[1]})
    Sink.open(
        out, wider, "fp3", format="delta", run_id="r", partition={"dt": NIGHTS[1]}, restart=True
    )
    with pytest.raises(ConfigError, match="partitioned by dt"):
        Sink.open(out, SCHEMA, "fp", format="delta", run_id="r")
    with pytest.raises(
        ConfigError, match=r"holds a Delta table \(output.format: delta\); set output.format: delta"
    ):
        Sink.open(out, SCHEMA, "fp", run_id="r")
    parquet = Sink.open(tmp_path / "parquet", SCHEMA, "fp", run_id="r")
    parquet.resume()
    parquet.append([answered(1)])
    parquet.finish({})
    with pytest.raises(ConfigError, match=r"holds a Parquet output \(output.format: parquet\)"):
        Sink.open(tmp_path / "parquet", SCHEMA, "fp", format="delta", run_id="r")


def test_a_question_reworded_between_nights_describes_the_table_anew(tmp_path: Path) -> None:
    """Night 2 rewords a question and reorders a choice's options (same keys, same kinds):
    delta-rs merges no field metadata that differs, so the table's columns are described anew
    first; they then say night 2's question (the comment engines show, the fingerprint
    `evalpipe calibrate` checks). Night 1 resumed with its own questions cuts a row to send
    again, in a table described otherwise meanwhile."""
    from evalpipe.calibration import Calibration

    out = tmp_path / "table"
    raw = {k: v.model_dump() for k, v in SINK_QUESTIONS.items()}
    reworded = {
        **raw,
        "helpful": {**raw["helpful"], "instructions": "Does it help a shopper decide?"},
        "sentiment": {**raw["sentiment"],
                      "criteria": dict(reversed(list(raw["sentiment"]["criteria"].items())))},
    }  # fmt: skip
    sink = open_night(out, NIGHTS[0])
    resume(sink)
    sink.append([answered(i) for i in range(3)] + [failed(3, "rate_limited")])
    sink.close()  # one batch committed, its 429 row among it
    second = output_schema("review_id", pa.int64(), reworded)
    sink = Sink.open(out, second, "fp2", format="delta", run_id="r2", partition={"dt": NIGHTS[1]})
    resume(sink)
    sink.append([answered(i) for i in range(10, 13)])
    sink.finish({})
    schema = arrow_schema(lake.load(out))
    comment = (schema.field("helpful__p_true").metadata or {})[b"comment"].decode()
    assert "Does it help a shopper decide?" in comment
    assert Calibration.fingerprints_of(schema) == Calibration.fingerprints_of(second)

    again = open_night(out, NIGHTS[0])
    again.committed()
    assert again.resume().retry_rows == 1  # the 429 row, cut from the night
    again.append([answered(3)])
    again.finish({})
    assert night_rows(out, NIGHTS[0])["_error_type"].null_count() == 4
    assert night_rows(out, NIGHTS[1])["review_id"].to_list() == [10, 11, 12]
    schema = arrow_schema(lake.load(out))
    assert Calibration.fingerprints_of(schema) == Calibration.fingerprints_of(SCHEMA)


def test_partition_config() -> None:
    """`output.partition` takes a YAML date as its ISO text, and needs the delta format."""
    base = {
        "input": {"path": "in.parquet", "id_column": "id", "state": "text"},
        "service": {"base_url": "embedded"},
        "model": "model-1.13.0",
        "questions": QUESTIONS,
    }
    text = "output: {path: out, format: delta, partition: {dt: 2026-11-27}}"
    config = parse_config({**base, **yaml.safe_load(text)})
    assert config.output.partition == {"dt": "2026-11-27"}
    night = apply_overrides(yaml.safe_load(text), ["output.partition.dt=2026-11-28"])
    assert parse_config({**base, **night}).output.partition == {"dt": "2026-11-28"}
    with pytest.raises(ConfigError, match="partition column '_x' must be a name"):
        parse_config({**base, "output": {"path": "o", "format": "delta", "partition": {"_x": 1}}})
    with pytest.raises(ConfigError, match=r"output.partition needs output.format: delta"):
        parse_config({**base, "output": {"path": "out", "partition": {"dt": "x"}}})


# --------------------------------------------------------------------------- the job


PART = 30  # rows a commit


def _night_config(
    tmp: Path, url: str, out: str, night: str, in_flight: int = 8, **more: Any
) -> Path:
    config = job_config(
        tmp, url, output={"path": out, "format": "delta", "partition": {"dt": night},
                          "part_rows": PART}, concurrency={"actors": 1, "max_in_flight": in_flight},
        cache={"enabled": False}, **more,
    )  # fmt: skip
    path = tmp / f"job-{night}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _versions(out: str) -> int:
    """How many commits the table's log lists: a look at the log, not a read of the table
    (the run writing it meanwhile)."""
    fs, root = pafs.FileSystem.from_uri(out if "://" in out else f"file://{out}")
    found = fs.get_file_info(pafs.FileSelector(f"{root}/_delta_log", allow_not_found=True))
    return sum(1 for info in found if info.base_name.endswith(".json"))


def _journal_reader(config: Path) -> Callable[[Path], set[Any]]:
    """The ids in a journal's valid prefix (none while it is being replaced), for the job of
    `config` (loaded once: the kill point looks at the journal every 20 ms)."""
    loaded = load_config(config)
    schema = output_schema("id", pa.int64(), loaded.parsed_questions, loaded.service.identity)
    fingerprint = loaded.fingerprint()

    def ids(journal: Path) -> set[Any]:
        try:
            return set(read_journal(journal, schema, fingerprint)[0]["id"].to_pylist())
        except (FileNotFoundError, ResumeConflict):  # gone, or its header not yet in place
            return set()

    return ids


def _kill_and_resume(
    tmp: Path, out: str, journal: Path, config: Path, ray_address: str, n: int
) -> None:
    """`evalpipe run` of night 2, killed with SIGKILL once batches are committed and rows
    journaled, then the same command to its end (in this process; not slowed as the first run
    was, for the kill), which sends none of the rows the table or the journal held at the
    kill."""
    log = tmp / "runs.log"
    before = _versions(out)
    journal_ids = _journal_reader(config)
    first = start(config, log, "--ray-address", ray_address)

    def mid_run() -> bool:  # two batches of the night committed, rows journaled: the kill
        # lands before the next commit (30 rows a batch; a look at S3 can take a while on a
        # loaded machine, so the window is most of a batch)
        return _versions(out) >= before + 2 and 3 <= len(journal_ids(journal)) <= PART - 6

    wait_for(mid_run, first, log, timeout=120)
    kill_9_joined(first)
    night = set(lake.query(lake.load(out), out, ["id"], {"dt": NIGHTS[1]})["id"].to_pylist())
    journaled = journal_ids(journal)
    assert journal.exists() and 2 * PART <= len(night) < n
    again = cli_run(config, "--set", "concurrency.max_in_flight=8")
    skipped = int(again.stdout.split(" in error")[1].split(",")[1].split()[0])
    assert skipped == len(night | journaled), (skipped, len(night), len(journaled))
    assert not journal.exists()


@pytest.mark.subprocess
def test_two_nights_one_killed_then_restart_and_a_new_question(
    ray_address: str, tmp_path: Path
) -> None:
    """The issue's scenario on a local table: night 1, night 2 killed with -9 mid-run and
    resumed: every (night, id) once with the service's own answers, the descriptions in the
    Delta schema, polars reading the same rows as deltalake; `--restart` of night 2 leaves
    night 1 untouched; night 3 with one more question evolves the schema."""
    n = 120
    rows = write_corpus(tmp_path / "in.parquet", n)
    out = str(tmp_path / "table")
    settings = ServiceSettings(api_key=API_KEY, rpm=30_000, tps=10_000_000, latency=0.05)
    with EmbeddedService(settings) as service:
        url = service.base_url
        cli_run(_night_config(tmp_path, url, out, NIGHTS[0]), "--ray-address", ray_address)
        second = _night_config(tmp_path, url, out, NIGHTS[1], in_flight=4)  # a slow night
        journal = Path(out) / journal_name({"dt": NIGHTS[1]})
        _kill_and_resume(tmp_path, out, journal, second, ray_address, n)

        frame = pl.read_delta(out).sort("dt", "id")
        table = lake.load(out)
        arrow = lake.query(table, out, None, {})
        assert frame.height == arrow.num_rows == 2 * n
        assert frame.group_by("dt").agg(pl.col("id").n_unique())["id"].to_list() == [n, n]
        assert frame["_error_type"].null_count() == 2 * n
        by_id = {r["id"]: r for r in frame.filter(pl.col("dt") == NIGHTS[1]).to_dicts()}
        for row in rows[:: n // 10]:
            assert_answered(url, row["text"], by_id[row["id"]])
        schema = arrow_schema(table)
        assert (schema.field("quality__score").metadata or {})[b"comment"].startswith(
            b"Question 'quality'"
        )
        runs = lake.runs(table, out)
        assert [r["partition"]["dt"] for r in runs] == [NIGHTS[0], NIGHTS[1], NIGHTS[1]]
        assert [r["ended_how"] for r in runs] == ["finished", "interrupted", "finished"]

        night_1 = frame.filter(pl.col("dt") == NIGHTS[0])
        cli_run(second, "--restart", "--set", "concurrency.max_in_flight=8")
        after = pl.read_delta(out).sort("dt", "id")
        assert after.filter(pl.col("dt") == NIGHTS[0]).equals(night_1)
        assert after.filter(pl.col("dt") == NIGHTS[1])["id"].to_list() == list(range(n))

        questions = {**QUESTIONS, "urgent": {"type": "noul", "instructions": "Is it urgent?"}}
        third = _night_config(tmp_path, url, out, NIGHTS[2], questions=questions)
        cli_run(third)
    frame = pl.read_delta(out)
    assert frame.filter(pl.col("dt") != NIGHTS[2])["urgent__p_true"].null_count() == 2 * n
    assert frame.filter(pl.col("dt") == NIGHTS[2])["urgent__p_true"].null_count() == 0

    _readers(out, n, tmp_path)


def cli(*args: str) -> str:
    """An `evalpipe` command in this process (click's runner), which must exit 0: its stdout."""
    from click.testing import CliRunner

    from evalpipe.cli.main import main

    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return str(result.stdout)


def agree_and_report(out: str, night: str, last: str, tmp: Path) -> None:
    """`agree` reads labels of `night` (a table's `OUT/dt=...`); `report` draws the night, and
    the nightly trend of `out` up to the `last` night."""
    import orjson

    labels = tmp / "labels.csv"
    labels.write_text(
        "id,helpful\n" + "".join(f"{i},{'yes' if i % 2 else 'no'}\n" for i in range(20))
    )
    assert orjson.loads(cli("agree", night, "--labels", str(labels), "--json"))["questions"]
    page = tmp / "night.html"
    cli("report", night, "--html", str(page))
    assert "Every row of the output" in page.read_text()
    trend = tmp / "trend.html"
    cli("report", out, "--html", str(trend))
    assert "nightly series" in trend.read_text() and last in trend.read_text()


def _readers(out: str, n: int, tmp: Path) -> None:
    """Everything that reads an output reads the table: ep.read (a night, a version),
    describe, diff (two nights; two versions), agree, report (one night; the nightly trend)."""
    import orjson

    import evalpipe as ep

    night_2 = f"{out}/dt={NIGHTS[1]}"
    read = ep.read(night_2).collect()
    assert read["id"].to_list() == list(range(n)) and read["dt"].unique().to_list() == [NIGHTS[1]]
    assert ep.read(f"{out}@0").collect()["id"].n_unique() == PART  # version 0: the first batch
    described = orjson.loads(cli("describe", out, "--json"))
    comments = {c["column"]: c["description"] for c in described["columns"]}
    assert comments["urgent__p_true"].startswith("Question 'urgent'")
    assert described["rows"] == 3 * n
    diff = orjson.loads(cli("diff", f"{out}/dt={NIGHTS[0]}", night_2, "--json"))
    assert diff["shared_ids"] == n and diff["a"]["rows"] == diff["b"]["rows"] == n
    version = lake.load(out).version()
    assert orjson.loads(cli("diff", f"{out}@{version - 1}", f"{out}@{version}", "--json"))
    agree_and_report(out, night_2, NIGHTS[2], tmp)


@pytest.mark.subprocess
def test_a_table_on_s3_killed_and_resumed(
    s3: pafs.FileSystem, ray_address: str, tmp_path: Path
) -> None:
    """The same kill and resume on the loopback S3 server: delta-rs commits each version with
    a conditional PUT (no lock service, no unsafe rename); every id once."""
    n = 120
    rows = write_corpus(tmp_path / "in.parquet", n)
    s3.create_dir("tables")
    out = "s3://tables/delta-scores"
    settings = ServiceSettings(api_key=API_KEY, rpm=30_000, tps=10_000_000, latency=0.05)
    with EmbeddedService(settings) as service:
        url = service.base_url
        cli_run(_night_config(tmp_path, url, out, NIGHTS[0]), "--ray-address", ray_address)
        second = _night_config(tmp_path, url, out, NIGHTS[1], in_flight=4)  # a slow night
        journal = staging_dir(out) / journal_name({"dt": NIGHTS[1]})
        _kill_and_resume(tmp_path, out, journal, second, ray_address, n)
        frame = pl.read_delta(out, storage_options=lake.storage_options(out)).sort("dt", "id")
        assert frame.height == 2 * n
        for night in NIGHTS[:2]:
            assert frame.filter(pl.col("dt") == night)["id"].to_list() == list(range(n))
        by_id = {r["id"]: r for r in frame.filter(pl.col("dt") == NIGHTS[1]).to_dicts()}
        for row in rows[:: n // 8]:
            assert_answered(url, row["text"], by_id[row["id"]])
    runs = lake.runs(lake.load(out), out)  # the commit info, read from the store
    assert [r["ended_how"] for r in runs] == ["finished", "interrupted", "finished"]

    # Two writers from one version: the second one's PUT of that version is refused
    # (If-None-Match) and it commits the next; neither overwrites the other's commit.
    from deltalake import write_deltalake

    assert "AWS_S3_ALLOW_UNSAFE_RENAME" not in os.environ
    one, other = lake.load(out), lake.load(out)
    version = one.version()
    extra = frame.head(2).with_columns(pl.lit("2026-12-01").alias("dt"))
    for table, row in ((one, extra[0]), (other, extra[1])):
        write_deltalake(table, row.to_arrow(), mode="append", schema_mode="merge")
    assert lake.load(out).version() == version + 2
    latest = lake.query(lake.load(out), out, ["id"], {"dt": "2026-12-01"})
    assert sorted(latest["id"].to_pylist()) == extra["id"].to_list()
