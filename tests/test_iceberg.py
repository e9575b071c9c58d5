"""`output.format: iceberg`: one Iceberg table for every night, exactly once (real pyiceberg).

The sink tests drive an Iceberg `Sink` as the runner does (sinkdata's rows) on pyiceberg's SQL
catalog, on SQLite and on Debian's PostgreSQL (tests/conftest.py starts it), with the warehouse
on a local disk and on moto's S3 server; a kill is a sink closed without `finish` (its journal
left as kill -9 leaves it), and a kill between a commit and the next journal is the old journal
put back. The job test runs `evalpipe run` for real: night 2 in a process of its own, killed with
SIGKILL mid-run and run again. Every read is pyiceberg's own (a catalog loaded here, outside
evalpipe), and polars' `scan_iceberg`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.fs as pafs
import pytest
import yaml

from conftest import API_KEY, QUESTIONS, cli_run, job_config
from evalpipe.config import parse_config
from evalpipe.errors import ConfigError, ResumeConflict
from evalpipe.output import Sink, output_schema
from evalpipe.output.outdir import journal_name
from evalpipe.service import EmbeddedService, ServiceSettings
from evalpipe.stores.location import staging_dir
from sinkdata import QUESTIONS as SINK_QUESTIONS, SCHEMA, answered, failed
from test_delta import agree_and_report, cli
from test_resume import assert_answered, kill_9_joined, start, wait_for, write_corpus

# pyiceberg's SQL catalog configures SQLAlchemy's mappers on first use: in a process where Airflow
# was imported (the schedulers' tests), Airflow's mapper hooks then start a process.
pytestmark = pytest.mark.subprocess

NIGHTS = ("2026-11-26", "2026-11-27", "2026-11-28")
TABLE = "evals.reviews"


def sqlite(tmp: Path) -> dict[str, str]:
    return {"type": "sql", "uri": f"sqlite:///{tmp / 'catalog.db'}"}


def open_night(
    out: Path | str, catalog: dict[str, str], night: str, schema: pa.Schema = SCHEMA,
    fingerprint: str = "fp", **options: Any,
) -> Sink:  # fmt: skip
    return Sink.open(
        out, schema, fingerprint, format="iceberg", run_id=f"run-{night}",
        partition={"dt": night}, part_rows=4, write_seconds=0,
        settings={"catalog": catalog, "table": TABLE},
        provenance={"evalpipe_version": "test", "config_hash": "h"}, **options,
    )  # fmt: skip


def write(sink: Sink, ids: Any, finish: bool = True) -> set[Any]:
    sink.committed()
    done = set(sink.resume().ids.to_pylist())
    sink.append([answered(i) for i in ids if i not in done])
    if finish:
        sink.finish({"rows": len(list(ids))})
    else:
        sink.close()
    return done


def read(catalog: dict[str, str]) -> pl.DataFrame:
    """The table as pyiceberg reads it, with a catalog of its own (outside evalpipe)."""
    from pyiceberg.catalog import load_catalog

    table = load_catalog("evalpipe", **catalog).load_table(TABLE)
    frame = pl.from_arrow(table.scan().to_arrow())
    assert isinstance(frame, pl.DataFrame)
    with pytest.MonkeyPatch.context() as patch:  # polars plans the scan with pyiceberg
        patch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")
        assert pl.scan_iceberg(table).collect().height == frame.height
    return frame


def moto() -> dict[str, str]:
    """pyiceberg's own S3 properties for a reader of ours: moto's endpoint and the region
    (without one pyiceberg asks AWS for the bucket's)."""
    return {"s3.endpoint": os.environ["AWS_ENDPOINT_URL"],
            "s3.region": os.environ["AWS_DEFAULT_REGION"]}  # fmt: skip


def ids(frame: pl.DataFrame, night: str, column: str = "review_id") -> list[Any]:
    return sorted(frame.filter(pl.col("dt") == night)[column].to_list())


# --------------------------------------------------------------------------- the config


def test_the_config_names_a_catalog_and_a_table_and_no_secret() -> None:
    base = {
        "input": {"path": "in.parquet", "id_column": "id", "state": "text"},
        "service": {"base_url": "embedded"},
        "model": "model-1.13.0",
        "questions": QUESTIONS,
    }
    catalog = {"type": "sql", "uri": "sqlite:///catalog.db", "warehouse": "s3://lake/wh"}
    output = {"path": "s3://lake/wh/evals/reviews", "format": "iceberg", "table": TABLE,
              "catalog": catalog, "partition": {"dt": "2026-11-27"}}  # fmt: skip
    parsed = parse_config({**base, "output": output}).output
    assert parsed.catalog == catalog and parsed.table == TABLE
    for change, says in [
        ({"catalog": {**catalog, "s3.secret-access-key": "x"}}, r"PYICEBERG_CATALOG__<NAME>__S3"),
        ({"catalog": {**catalog, "uri": "postgresql://u:hunter2@db/c"}}, r"holds a user or pass"),
    ]:
        with pytest.raises(ConfigError, match=says) as refused:
            parse_config({**base, "output": {**output, **change}})
        assert "hunter2" not in str(refused.value)


def test_the_catalog_takes_the_region_and_endpoint_from_the_aws_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyiceberg's S3 file IO reads neither variable: without a region it asks AWS for the
    bucket's (seconds where AWS is out of reach, and the wrong place for an S3-compatible
    store), so the catalog is given them unless its properties name them."""
    from evalpipe.output.iceberg.table import catalog

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-3")
    monkeypatch.delenv("AWS_REGION", raising=False)
    props = sqlite(tmp_path)
    found = catalog(props).properties
    assert (found["s3.region"], found["s3.endpoint"]) == ("eu-west-3", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_REGION", "ap-south-1")
    assert catalog(props).properties["s3.region"] == "ap-south-1"
    for given in ({"s3.region": "us-west-2"}, {"client.region": "us-west-2"}):
        assert catalog({**props, **given}).properties.get("s3.region", "us-west-2") == "us-west-2"


# --------------------------------------------------------------------------- the sink


def test_a_table_needs_a_catalog_on_a_store_and_a_namespace(tmp_path: Path) -> None:
    """A local output without a catalog gets a SQLite one in its folder (on an object store a
    catalog must be named: the S3 test); a table's identifier is namespace.table."""
    sink = Sink.open(tmp_path / "plain", SCHEMA, "fp", format="iceberg", run_id="r",
                     partition={"dt": NIGHTS[0]})  # fmt: skip
    write(sink, range(3))
    assert (tmp_path / "plain" / "_catalog.db").exists()
    from pyiceberg.catalog import load_catalog

    local = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'plain' / '_catalog.db'}"}
    assert load_catalog("evalpipe", **local).load_table("evalpipe.scores").scan().to_arrow(
        ).num_rows == 3  # fmt: skip
    with pytest.raises(ConfigError, match=r"^output.table: 'reviews' is not namespace.table"):
        Sink.open(tmp_path / "other", SCHEMA, "fp", format="iceberg", run_id="r",
                  settings={"table": "reviews"})  # fmt: skip


def test_each_batch_is_one_commit_once_across_kills(tmp_path: Path) -> None:
    """Batches become catalog commits that set the job's sequence for the night; a run closed
    without finish (kill -9) resumes from its journal; a journal whose batch was committed just
    before the kill is dropped, not committed twice."""
    catalog, out = sqlite(tmp_path), tmp_path / "table"
    sink = open_night(out, catalog, NIGHTS[0])
    sink.committed()
    assert set(sink.resume().ids.to_pylist()) == set()
    sink.append([answered(i) for i in range(6)])  # one batch of 4 committed, 2 journaled
    journal = out / journal_name({"dt": NIGHTS[0]})
    before = journal.read_bytes()  # the journal of sequence 1, 2 rows
    sink.append([answered(i) for i in range(6, 8)])  # sequence 1 committed: a new journal
    sink.close()  # kill -9 here ...
    journal.write_bytes(before)  # ... between the commit and the new journal
    assert ids(read(catalog), NIGHTS[0]) == list(range(8))

    again = open_night(out, catalog, NIGHTS[0])
    assert again.committed().num_rows == 8
    state = again.resume()
    assert set(state.ids.to_pylist()) == set(range(8)) and state.journal_duplicates == 2
    again.append([answered(8), failed(9, "rate_limited")])
    again.close()  # killed with two rows journaled (sequence 2)

    third = open_night(out, catalog, NIGHTS[0])
    state = third.resume()
    assert state.journal_rows == 2 and state.retry_rows == 1  # the 429 row is sent again
    third.append([answered(9)])
    third.finish({"rows": 10})
    frame = read(catalog)
    assert ids(frame, NIGHTS[0]) == list(range(10)) and frame["_error_type"].null_count() == 10
    assert not journal.exists()


def test_a_commit_from_an_older_holder_is_refused_by_the_table(tmp_path: Path) -> None:
    """With a shared tier every commit carries the output lease's fencing token (the tier's
    tests take real ones from Redis; here the sinks are handed them as their leases would).
    Host a stalls after a batch; host b takes the night with a larger token and commits; a
    wakes and its next commit is refused by what the catalog holds: LeaseLost, nothing of it
    in the table. An opening with a token older than the table's is refused at once."""
    from evalpipe.errors import LeaseLost

    catalog, out = sqlite(tmp_path), tmp_path / "table"
    a = open_night(out, catalog, NIGHTS[0])
    a.committed()
    a.resume()
    a.committer.hold(1)
    a.append([answered(i) for i in range(4)])  # one batch, committed with a's token
    assert a.broken is None
    b = open_night(out, catalog, NIGHTS[0])
    b.committed()
    assert set(b.resume().ids.to_pylist()) == set(range(4))
    b.committer.hold(2)
    b.append([answered(i) for i in range(4, 8)])
    a.append([answered(i) for i in range(8, 12)])  # a wakes: its lease still reads as its own
    assert isinstance(a.broken, LeaseLost) and "fencing token 2, ours 1" in str(a.broken)
    b.finish({"rows": 8})
    assert ids(read(catalog), NIGHTS[0]) == list(range(8))
    late = open_night(out, catalog, NIGHTS[0])
    with pytest.raises(LeaseLost, match="lease was taken over"):
        late.committer.hold(1)


def test_nights_restart_schema_evolution_and_field_docs(tmp_path: Path) -> None:
    """Nights in one table partitioned by night; `--restart` of a night replaces it alone; a
    night with one more question adds its columns; every column's description is its doc;
    another config's night is refused unless restarted; a question's kind cannot change."""
    from pyiceberg.catalog import load_catalog

    catalog, out = sqlite(tmp_path), tmp_path / "table"
    write(open_night(out, catalog, NIGHTS[0]), range(5))
    write(open_night(out, catalog, NIGHTS[1]), range(5, 12))
    first = read(catalog).filter(pl.col("dt") == NIGHTS[0]).sort("review_id")

    write(open_night(out, catalog, NIGHTS[1], restart=True), range(100, 103))
    frame = read(catalog)
    assert ids(frame, NIGHTS[1]) == [100, 101, 102]
    assert frame.filter(pl.col("dt") == NIGHTS[0]).sort("review_id").equals(first)

    more = {**{k: v.model_dump() for k, v in SINK_QUESTIONS.items()},
            "urgent": {"type": "noul", "instructions": "Is it urgent?"}}  # fmt: skip
    wider = output_schema("review_id", pa.int64(), more)
    write(open_night(out, catalog, NIGHTS[2], wider, "fp3"), range(3))
    frame = read(catalog)
    assert frame.filter(pl.col("dt") != NIGHTS[2])["urgent__p_true"].null_count() == 5 + 3
    assert frame.filter(pl.col("dt") == NIGHTS[2]).height == 3  # sinkdata answers no 'urgent'

    table = load_catalog("evalpipe", **catalog).load_table(TABLE)
    assert [f.name for f in table.spec().fields] == ["dt"]
    assert (
        table.schema()
        .find_field("urgent__p_true")
        .doc.startswith("Question 'urgent' (yes/no: Is it urgent?)")
    )
    assert all(f.doc for f in table.schema().fields)
    summaries = [s.summary.additional_properties for s in table.snapshots() if s.summary]
    last = summaries[-1]
    assert (
        last["evalpipe.run_id"] == f"run-{NIGHTS[2]}" and last["evalpipe.ended_how"] == "finished"
    )

    with pytest.raises(ResumeConflict, match=r"dt=2026-11-27 was written by a job with a diff"):
        open_night(out, catalog, NIGHTS[1], wider, "fp3")
    changed = {**more, "urgent": {"type": "choice", "instructions": "?",
                                  "criteria": {"y": None, "n": None}}}  # fmt: skip
    with pytest.raises(ConfigError, match=r"^questions.urgent: is a choice question here"):
        open_night(out, catalog, "2026-11-29", output_schema("review_id", pa.int64(), changed))
    with pytest.raises(ConfigError, match=r"is at '.*', not output.path"):
        open_night(tmp_path / "elsewhere", catalog, NIGHTS[0])


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_warehouse_on_s3_with_a_sql_catalog(
    kind: str, s3: pafs.FileSystem, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The table's files on the loopback S3 server (the AWS variables, nothing in the config),
    the catalog on SQLite or on PostgreSQL (its password in PGPASSWORD): a killed night
    resumed, every id once, read by pyiceberg and polars."""
    if kind == "postgres":
        catalog = {"type": "sql", "uri": request.getfixturevalue("postgres")}
    else:
        catalog = sqlite(tmp_path)
    catalog["name"] = f"evalpipe-{kind}"
    s3.create_dir("tables")
    out = f"s3://tables/iceberg-{kind}/reviews"
    stage = tmp_path / "stage"
    with pytest.raises(ConfigError, match=r"^output.catalog: the Iceberg table at 's3://"):
        Sink.open(out, SCHEMA, "fp", format="iceberg", run_id="r", staging=stage)
    write(open_night(out, catalog, NIGHTS[0], staging=stage), range(10))
    write(open_night(out, catalog, NIGHTS[1], staging=stage), range(7), finish=False)
    assert staging_dir(out, stage).joinpath(journal_name({"dt": NIGHTS[1]})).exists()
    done = write(open_night(out, catalog, NIGHTS[1], staging=stage), range(10))
    assert len(done) == 7  # 4 committed, 3 from the journal

    from pyiceberg.catalog import load_catalog

    props = {k: v for k, v in catalog.items() if k != "name"}
    props.update(moto())  # the reader's own
    table = load_catalog(catalog["name"], **props).load_table(TABLE)
    frame = pl.from_arrow(table.scan().to_arrow())
    assert isinstance(frame, pl.DataFrame)
    for night in NIGHTS[:2]:
        assert ids(frame, night) == list(range(10))
    assert table.location() == out
    stored = s3.get_file_info(pafs.FileSelector(f"tables/iceberg-{kind}", recursive=True))
    assert any(info.path.endswith(".parquet") for info in stored)


# --------------------------------------------------------------------------- the job


PART = 30  # rows a commit


def _night_config(
    tmp: Path, url: str, out: str, catalog: dict[str, str], night: str, in_flight: int = 8
) -> Path:
    config = job_config(
        tmp, url, output={"path": out, "format": "iceberg", "table": TABLE, "catalog": catalog,
                          "partition": {"dt": night}, "part_rows": PART},
        concurrency={"actors": 1, "max_in_flight": in_flight}, cache={"enabled": False},
    )  # fmt: skip
    path = tmp / f"job-{night}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.subprocess
def test_a_night_killed_and_resumed_on_s3_each_id_once(
    s3: pafs.FileSystem, ray_address: str, tmp_path: Path
) -> None:
    """The issue's scenario: a SQL catalog, the warehouse on S3, night 1 run, night 2 in a
    process of its own killed with SIGKILL once two batches are committed, then the same
    command: each night's ids once with the service's own answers, read by pyiceberg."""
    from pyiceberg.catalog import load_catalog

    n = 120
    rows = write_corpus(tmp_path / "in.parquet", n)
    s3.create_dir("tables")
    out = "s3://tables/iceberg-job/reviews"
    catalog = sqlite(tmp_path)
    reader = {**catalog, **moto()}
    settings = ServiceSettings(api_key=API_KEY, rpm=30_000, tps=10_000_000, latency=0.05)
    with EmbeddedService(settings) as service:
        url = service.base_url
        cli_run(_night_config(tmp_path, url, out, catalog, NIGHTS[0]), "--ray-address",
                ray_address)  # fmt: skip
        second = _night_config(tmp_path, url, out, catalog, NIGHTS[1], in_flight=4)  # slow
        log = tmp_path / "night2.log"
        first = start(second, log, "--ray-address", ray_address)

        looking = load_catalog("evalpipe", **reader)  # one catalog for every look

        def table_rows() -> int:  # the catalog's current snapshot's count: no scan
            snapshot = looking.load_table(TABLE).current_snapshot()
            summary = snapshot.summary if snapshot is not None else None
            return int(summary["total-records"]) if summary is not None else 0

        def committed() -> int:
            table = looking.load_table(TABLE)
            return len(ids(pl.from_arrow(table.scan().to_arrow()), NIGHTS[1], "id"))  # type: ignore[arg-type]

        # A look is a catalog query and a GET of the table's metadata (served by this
        # process's S3 server): every 0.1 s, well within the second a batch takes here.
        wait_for(lambda: table_rows() >= n + 2 * PART, first, log, timeout=120, every=0.1)
        kill_9_joined(first)
        assert 2 * PART <= committed() < n
        again = cli_run(second, "--set", "concurrency.max_in_flight=8")
        assert " committed by an earlier run" in again.stdout
        table = load_catalog("evalpipe", **reader).load_table(TABLE)
        frame = pl.from_arrow(table.scan().to_arrow())
        assert isinstance(frame, pl.DataFrame)
        for night in NIGHTS[:2]:
            assert frame.filter(pl.col("dt") == night)["id"].to_list() != []
            assert ids(frame, night, "id") == list(range(n))
        by_id = {r["id"]: r for r in frame.filter(pl.col("dt") == NIGHTS[1]).to_dicts()}
        for row in rows[:: n // 8]:
            assert_answered(url, row["text"], by_id[row["id"]])
    _readers(out, n, tmp_path)


def _readers(out: str, n: int, tmp: Path) -> None:
    """Every reader of an output reads the table through the door: ep.read (a night),
    describe, diff (two nights), agree, report (one night; the nightly trend)."""
    import orjson

    import evalpipe as ep

    night_2 = f"{out}/dt={NIGHTS[1]}"
    read = ep.read(night_2).collect()
    assert sorted(read["id"].to_list()) == list(range(n))
    described = orjson.loads(cli("describe", out, "--json"))
    comments = {c["column"]: c["description"] for c in described["columns"]}
    assert comments["helpful__p_true"].startswith("Question 'helpful'")
    assert described["rows"] == 2 * n
    diff = orjson.loads(cli("diff", f"{out}/dt={NIGHTS[0]}", night_2, "--json"))
    assert diff["shared_ids"] == n
    agree_and_report(out, night_2, NIGHTS[1], tmp)
