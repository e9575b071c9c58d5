"""Corpora and output tables on an object store, against a real S3 API.

The S3-compatible server is moto's (`moto[server]`), started on loopback once for the session
(`s3` in conftest.py); the job reaches it the way it reaches any S3-compatible store: the
standard AWS variables and `AWS_ENDPOINT_URL`, nothing in the job config. The whole path is
tested: a corpus on S3 read in bounded batches (one file, a folder with Hive partitions, a
prefix of names), the Sink uploading whole parts and keeping its journal in a local staging
folder, and `evalpipe run` with input and output on S3, killed with SIGKILL and run again, its
output read back from S3 row by row against the service's answers (and reported from there).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner

from conftest import API_KEY, QUESTIONS, cli_run
from evalpipe.cli import main
from evalpipe.config import load_config, parse_config
from evalpipe.errors import ConfigError, InputError, ResumeConflict
from evalpipe.input.source import Source, SourceSpec
from evalpipe.output.journal import read_journal
from evalpipe.output.lock import LOCK_NAME, output_lock
from evalpipe.output.manifest import MANIFEST
from evalpipe.output.outdir import JOURNAL
from evalpipe.output.sink import Sink
from evalpipe.output.table import output_schema
from evalpipe.service import EmbeddedService, ServiceSettings
from evalpipe.service.evaluator import answer_request, compile_questions
from evalpipe.stores.location import parse_location, staging_dir
from sinkdata import SCHEMA, answered, failed
from test_resume import assert_answered, assert_answers, kill_9_joined, start, wait_for


def put(fs: pafs.FileSystem, path: str, columns: dict[str, list[Any]]) -> None:
    pq.write_table(pa.table(columns), path, filesystem=fs)


def objects(fs: pafs.FileSystem, prefix: str) -> list[str]:
    infos = fs.get_file_info(pafs.FileSelector(prefix, allow_not_found=True))
    return sorted(i.base_name for i in infos if i.type == pafs.FileType.File)


def settled(service: EmbeddedService) -> int:
    """The requests the service accepted, once those in flight at a kill have arrived."""
    count = service.stats()["requests_accepted"]
    while True:
        time.sleep(0.3)  # requests take 0.1 s here: none is still on its way after this
        again = service.stats()["requests_accepted"]
        if again == count:
            return int(count)
        count = again


def committed_on_s3(fs: pafs.FileSystem, out: str, journal: Path, config: Path) -> set[Any]:
    """The ids a killed run left committed: in the parts on S3, and in its local journal."""
    loaded = load_config(config)
    schema = output_schema("id", pa.int64(), loaded.parsed_questions)
    parts = [f"{out[5:]}/{name}" for name in objects(fs, out[5:]) if name.startswith("part-")]
    found = set(pq.read_table(parts, filesystem=fs, columns=["id"])["id"].to_pylist())
    rows = read_journal(journal, schema, loaded.fingerprint())[0]
    return found | set(rows["id"].to_pylist())


def ids(source: Source) -> list[Any]:
    return [row.id for batch in source.batches() for row in batch]


# --------------------------------------------------------------------------- locations


def test_a_uri_stays_a_uri_and_each_output_has_a_staging_folder_of_its_own(
    tmp_path: Path,
) -> None:
    config = parse_config(
        {
            "input": {"path": "s3://corpora/docs/part-0.parquet", "id_column": "id", "state": "t"},
            "output": {"path": "s3://tables/scores/dt=2026-11-23/"},
            "service": {"base_url": "embedded"},
            "model": "model-1.13.0",
            "questions": QUESTIONS,
        }
    )
    assert config.input.path == "s3://corpora/docs/part-0.parquet"  # not 's3:/corpora/...'
    assert config.output.path == "s3://tables/scores/dt=2026-11-23"
    assert parse_location("data/in.parquet") == Path("data/in.parquet")
    assert parse_location("file:///srv/in.parquet") == Path("/srv/in.parquet")
    assert parse_location("GS://b/x") == "gs://b/x"

    uri = "s3://tables/scores"
    home = staging_dir(uri)
    assert home.parent == Path(os.environ["XDG_CACHE_HOME"]) / "evalpipe" / "staging"
    assert staging_dir(uri + "/") == home and staging_dir(uri + "2") != home
    assert staging_dir(uri, tmp_path) == tmp_path / home.name
    assert output_lock(uri) == home / LOCK_NAME  # the store has no locks: one on this disk
    assert output_lock(Path("out/x")) == Path("out/x") / LOCK_NAME
    with pytest.raises(InputError, match=r"^input.path 'memory://x': pyarrow knows no"):
        Source(SourceSpec("memory://x", "id", "t"))


# --------------------------------------------------------------------------- the corpus


def test_the_corpus_as_one_object_a_folder_with_hive_partitions_or_a_name_prefix(
    s3: pafs.FileSystem,
) -> None:
    put(s3, "corpora/docs/dt=2026-11-22/part-0.parquet", {"id": [0, 1, 2], "t": ["a", "b", "c"]})
    put(s3, "corpora/docs/dt=2026-11-23/part-0.parquet", {"id": [3, 4, 5], "t": ["d", "e", "f"]})
    put(s3, "corpora/docs/notes/other.parquet", {"x": [1]})  # not a partition: not read
    put(s3, "corpora/docs/.hidden.parquet", {"x": [1]})
    with s3.open_output_stream("corpora/docs/_SUCCESS"):
        pass

    one = Source(SourceSpec("s3://corpora/docs/dt=2026-11-23/part-0.parquet", "id", "t"))
    assert ids(one) == [3, 4, 5]
    folder = Source(SourceSpec("s3://corpora/docs/", "id", "t", batch_rows=4))
    assert folder.files == (
        "s3://corpora/docs/dt=2026-11-22/part-0.parquet",
        "s3://corpora/docs/dt=2026-11-23/part-0.parquet",
    )
    assert [len(batch) for batch in folder.batches()] == [4, 2]  # bounded across objects
    assert ids(folder) == [0, 1, 2, 3, 4, 5] and folder.num_rows == 6
    folder.check_unique_ids()

    put(s3, "corpora/flat/part-0.parquet", {"id": [7, 8], "t": ["g", "h"]})
    put(s3, "corpora/flat/part-1.parquet", {"id": [9, 7], "t": ["i", "j"]})
    put(s3, "corpora/flat/zzz.parquet", {"x": [1]})
    prefixed = Source(SourceSpec("s3://corpora/flat/part-", "id", "t"))
    assert ids(prefixed) == [7, 8, 9, 7]
    with pytest.raises(InputError, match=r"id_column 'id' is not unique: .*7 \(2 times\)"):
        prefixed.check_unique_ids()

    with pytest.raises(InputError, match=r"^input path 's3://corpora/nope' does not exist$"):
        Source(SourceSpec("s3://corpora/nope", "id", "t"))
    with pytest.raises(InputError) as info:
        Source(SourceSpec("s3://no-such-bucket/docs/", "id", "t"))
    assert "\n" not in str(info.value) and "s3://no-such-bucket/docs" in str(info.value)


# --------------------------------------------------------------------------- the output


def test_the_sink_uploads_whole_parts_keeps_its_journal_local_and_resumes(
    s3: pafs.FileSystem, tmp_path: Path
) -> None:
    uri, prefix, stage = "s3://tables/sink", "tables/sink", tmp_path / "stage"
    journal = staging_dir(uri, stage) / JOURNAL

    killed = Sink.open(uri, SCHEMA, "fp", run_id="run-1", staging=stage, part_rows=3)
    killed.resume()
    killed.append([answered(0), failed(1, "network"), answered(2), answered(3)])
    killed.close()  # as a kill leaves it: a part on the store, a row in the local journal
    assert [n for n in objects(s3, prefix) if n.startswith("part-")] != []
    assert JOURNAL not in objects(s3, prefix) and MANIFEST in objects(s3, prefix)
    assert read_journal(journal, SCHEMA, "fp")[0]["review_id"].to_pylist() == [3]
    (first,) = [n for n in objects(s3, prefix) if n.startswith("part-")]
    s3.copy_file(f"{prefix}/{first}", f"tables/aside/{first}")

    sink = Sink.open(uri, SCHEMA, "fp", run_id="run-2", staging=stage, part_rows=3)
    state = sink.resume()
    assert sorted(state.ids.to_pylist()) == [0, 2, 3]  # 1 had a retryable error: cut
    assert (state.retry_rows, state.journal_rows) == (1, 1)
    parts = [n for n in objects(s3, prefix) if n.startswith("part-")]
    assert first not in parts and len(parts) == 2  # the cut is a new object, the old is gone
    sink.append([answered(1)])
    sink.finish({"rows": 1})
    assert not journal.exists()

    # A kill between the cut's upload and the old part's deletion leaves both on the store.
    s3.copy_file(f"tables/aside/{first}", f"{prefix}/{first}")
    again = Sink.open(uri, SCHEMA, "fp", run_id="run-3", staging=stage)
    assert sorted(again.resume().ids.to_pylist()) == [0, 1, 2, 3]  # each once
    again.finish({})
    assert first not in objects(s3, prefix)  # the old part, with more rows, went
    manifest = orjson.loads(s3.open_input_stream(f"{prefix}/{MANIFEST}").read())
    table = pq.read_table(prefix, filesystem=s3)  # what a reader of the prefix sees
    assert (
        sorted(table["review_id"].to_pylist())
        == [0, 1, 2, 3]
        == sorted(
            pq.read_table([f"{prefix}/{p['name']}" for p in manifest["parts"]], filesystem=s3)[
                "review_id"
            ].to_pylist()
        )
    )
    assert [run["ended_how"] for run in manifest["runs"]] == ["interrupted", "finished", "finished"]

    with pytest.raises(ResumeConflict, match="different config"):
        Sink.open(uri, SCHEMA, "other", run_id="run-4", staging=stage)
    Sink.open(uri, SCHEMA, "other", run_id="run-4", staging=stage, restart=True)
    assert objects(s3, prefix) == [MANIFEST]
    with pytest.raises(ConfigError, match=r"output.path 's3://missing-bucket/x' cannot be"):
        Sink.open("s3://missing-bucket/x", SCHEMA, "fp", run_id="run-5", staging=stage)


# --------------------------------------------------------------------------- the job


def test_a_job_on_s3_killed_and_run_again_has_every_row_once(
    s3: pafs.FileSystem, ray_address: str, tmp_path: Path
) -> None:
    """S3 in -> Ray -> S3 out: `evalpipe run` with its corpus (Hive-partitioned) and its
    output on the S3 server, killed with SIGKILL once parts are uploaded and rows journaled;
    a second run meanwhile (in this process: another process than the first's) is refused by
    the lock; the same command then finishes, and the output, read back from S3, holds each
    row once with the service's answer. Both runs join the session's Ray; the kill takes the
    first run's workers there with it. (The rerun paces at the killed run's limit for its first
    seconds whatever it sets: the account's Budget outlives the kill and holds the killed job's
    limits until its keepalive has been silent for `limits.account.STALE_SECONDS`.)"""
    n = 300
    rows = [{"id": i, "text": f"Review {i}: the tent {'leaks' if i % 3 else 'holds'}."}
            for i in range(n)]  # fmt: skip
    for day, start_at in (("2026-11-22", 0), ("2026-11-23", n // 2)):
        part = rows[start_at : start_at + n // 2]
        put(s3, f"corpora/job/dt={day}/part-0.parquet", pa.Table.from_pylist(part).to_pydict())
    out = "s3://tables/scores/dt=2026-11-23"
    settings = ServiceSettings(api_key=API_KEY, rpm=30_000, tps=10_000_000, latency=0.1)
    with EmbeddedService(settings, mode="process") as service:
        url = service.base_url
        config = {
            "input": {"path": "s3://corpora/job", "id_column": "id", "state": "text"},
            "output": {"path": out, "part_rows": 60},
            "service": {"base_url": service.base_url, "api_key_env": "EVAL_API_KEY"},
            "model": "model-1.13.0",
            "limits": {"requests_per_minute": 6000, "tokens_per_second": 10_000_000},
            "concurrency": {"actors": 1, "max_in_flight": 16},
            "questions": QUESTIONS,
        }
        path = tmp_path / "job.yaml"
        path.write_text(yaml.safe_dump(config))
        journal = staging_dir(out) / JOURNAL
        log = tmp_path / "runs.log"

        def mid_run() -> bool:  # parts uploaded and rows journaled
            uploaded = [p for p in objects(s3, out[5:]) if p.startswith("part-")]
            return len(uploaded) >= 2 and journal.exists() and journal.stat().st_size > 4096

        first = start(path, log, "--ray-address", ray_address)
        lock = output_lock(out)
        wait_for(lambda: lock.exists() and lock.stat().st_size > 0, first, log, timeout=90)
        second = CliRunner().invoke(main, ["run", str(path)])
        assert second.exit_code == 9 and "OutputLocked: " + out in second.stderr
        wait_for(mid_run, first, log, timeout=90)
        kill_9_joined(first)
        paid_before = settled(service)
        committed = committed_on_s3(s3, out, journal, path)
        assert journal.exists() and committed

        again = cli_run(path)  # the same command, in this process on the session's Ray
        paid = service.stats()["requests_accepted"]
        skipped = int(again.stdout.split(" in error")[1].split(",")[1].split()[0])
        table = pq.read_table(out[5:], filesystem=s3).to_pylist()
        assert sorted(row["id"] for row in table) == list(range(n))  # each row once
        # Every row holds the service's answer: its evaluator's, run here, for each row, and
        # the service's own over HTTP for a dozen (which ties the two together; 0.1 s each).
        compiled = compile_questions(QUESTIONS)
        for row in table:
            assert_answers(row, answer_request(rows[row["id"]]["text"], QUESTIONS, compiled))
        with ThreadPoolExecutor(12) as pool, httpx.Client() as client:

            def check(row: dict[str, Any]) -> None:
                assert_answered(url, rows[row["id"]]["text"], row, client)

            list(pool.map(check, table[:: len(table) // 12]))
    # The rerun sent none of the rows committed before the kill (parts on S3, the journal):
    # only what the kill lost may be paid again (less, where the answer cache has it). What it
    # lost is what was in flight (16, one actor) and what came back in the run's last
    # moments before the driver journaled it: a sanity bound, loose for a loaded machine.
    lost = paid_before - len(committed)
    assert skipped == len(committed), (skipped, len(committed))
    assert paid_before < n and 0 <= paid - n <= lost <= 16 + 60, (paid, paid_before, lost)
    assert not journal.exists()

    # The analyst's view of it, from the store: the night's report, and the series's trend.
    for where in (out, "s3://tables/scores"):
        reported = CliRunner().invoke(main, ["report", where])
        assert reported.exit_code == 0, reported.output
        assert reported.stdout.strip() == f"{where}/_report.html"
    html = s3.open_input_stream(f"{out[5:]}/_report.html").read().decode()
    assert "evalpipe report: dt=2026-11-23" in html and "Every row of the output" in html
    trend = s3.open_input_stream("tables/scores/_report.html").read().decode()
    assert "nightly series" in trend and "2026-11-23" in trend


def test_describe_and_diff_read_outputs_on_the_store(s3: pafs.FileSystem, tmp_path: Path) -> None:
    """`evalpipe describe` and `diff` take object-store URIs as they take directories."""
    for name, p in (("before", 0.8), ("after", 0.3)):
        sink = Sink.open(f"s3://tables/{name}", SCHEMA, "fp", run_id=name, staging=tmp_path)
        sink.resume()
        sink.append([answered(i, p if i % 2 else 0.8) for i in range(6)])
        sink.finish({})
    described = CliRunner().invoke(main, ["describe", "s3://tables/after", "--json"])
    assert described.exit_code == 0, described.output
    columns = orjson.loads(described.output)["columns"]
    assert [c["column"] for c in columns] == SCHEMA.names and all(c["description"] for c in columns)
    diffed = CliRunner().invoke(main, ["diff", "s3://tables/before", "s3://tables/after", "--json"])
    assert diffed.exit_code == 0, diffed.output
    helpful = orjson.loads(diffed.output)["questions"][0]
    assert [r["id"] for r in helpful["flips"]["rows"]] == [1, 3, 5]
