"""The Python API, tried as a data scientist uses it: a DataFrame in, a DataFrame out, from a
script and from inside a running event loop (as in Jupyter), on the CLI's own engine."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import warnings
from pathlib import Path

import polars as pl
import pytest
import yaml
from click.testing import CliRunner

import evalpipe as ep
from conftest import API_KEY, embedded, job_config
from evalpipe.cli.main import main

QUESTIONS = {
    "helpful": ep.Noul("Does the review help a shopper decide?", true="specific", false="vague"),
    "sentiment": ep.Choice("Overall sentiment?", ["positive", "negative", "mixed"]),
    "quality": ep.Score("How well written is it?", ["poor", "fair", "good"]),
}


def reviews(n: int = 40) -> pl.DataFrame:
    ids = [(i * 7) % n for i in range(n)]  # not sorted: rows come back in this order
    texts = [
        f"Review {i}: the lamp {'glows' if i % 2 else 'flickers'} after {i} days." for i in ids
    ]
    return pl.DataFrame({"review_id": ids, "text": texts})


def test_questions_are_checked_when_made_with_the_clis_messages() -> None:
    with pytest.raises(ep.errors.ConfigError, match="criteria: at least 1 option"):
        ep.Choice("Overall sentiment?", [])
    with pytest.raises(ep.errors.ConfigError, match="criteria: at least 1 level"):
        ep.Score("How good?", [])
    assert ep.Noul("Is it?").as_dict() == {"type": "noul", "instructions": "Is it?"}


def test_the_api_is_imported_on_first_use() -> None:
    code = "import sys, evalpipe; print('evalpipe.api' in sys.modules, evalpipe.Noul.__name__)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.split() == ["False", "Noul"], done.stderr


test_the_api_is_imported_on_first_use = pytest.mark.subprocess(
    test_the_api_is_imported_on_first_use
)


@pytest.mark.ray
def test_score_from_a_script_and_from_a_running_loop_equals_the_cli(
    ray_runtime: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVAL_API_KEY", API_KEY)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pipeline.py").write_text("raise ImportError('the user's own pipeline.py')\n")
    data = reviews()
    with embedded() as service:
        svc = ep.Service(service.base_url, model="model-1.13.0")
        options = {"id": "review_id", "state": "text", "questions": QUESTIONS, "service": svc}
        planned = ep.plan(data, **options)
        scored = ep.score(data, **options, progress=False)

        async def in_a_notebook() -> tuple[pl.DataFrame, pl.DataFrame]:
            inside = ep.score(data.to_pandas(), **options, progress=False)  # the loop runs
            awaited = await ep.ascore(data.to_arrow(), **options, progress=False)
            return inside, awaited

        inside, awaited = asyncio.run(in_a_notebook())
        data.write_parquet(tmp_path / "in.parquet")
        config = job_config(
            tmp_path,
            service.base_url,
            questions={k: q.as_dict() for k, q in QUESTIONS.items()},
            cache={"enabled": False},
        )
        config["input"]["id_column"] = "review_id"
        (tmp_path / "job.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        cli = CliRunner().invoke(main, ["run", str(tmp_path / "job.yaml")])
        assert cli.exit_code == 0, cli.output
    assert planned["rows"] == data.height
    assert scored["review_id"].to_list() == data["review_id"].to_list()  # input order
    by_cli = ep.read(tmp_path / "out").collect()
    answers = [c for c in by_cli.columns if "__" in c]
    expected = data.select("review_id").join(by_cli, on="review_id", how="left")
    for frame in (scored, inside, awaited):
        assert frame.columns == by_cli.columns
        assert frame.select(answers).equals(expected.select(answers))
    import pandas as pd  # here: pandas costs every worker 0.2 s at collection

    assert pd.api.types.is_float_dtype(inside.to_pandas()["helpful__p_true"])


@pytest.mark.ray
@pytest.mark.filterwarnings("ignore:service.base_url is 'embedded'")
def test_calls_on_the_embedded_service_find_the_one_the_first_call_started(
    ray_runtime: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ep.Service("embedded")`: the first call starts the service, and the next calls of the
    same key and limits find it (one account: its counters hold every call's requests), also
    after a call interrupted while its requests were in flight. It ends with the process
    (here, `stop_kept`). tests/test_service_kept.py has the rest of its life: other limits,
    another service; a dead one replaced; an interrupt of the process group, then SIGKILL."""
    from evalpipe.service import kept_services, stop_kept

    monkeypatch.setenv("EVAL_API_KEY", API_KEY)  # what the session's Ray was started with
    limits = {"requests_per_minute": 60_000, "tokens_per_second": 10_000_000}
    svc = ep.Service("embedded", model="model-1.13.0", limits=limits)
    options = {"id": "review_id", "state": "text", "questions": QUESTIONS, "progress": False}
    more = reviews(20).with_columns(pl.col("text") + " (more)")
    try:
        first = ep.score(reviews(6), **options, service=svc)
        [kept] = kept_services()
        assert kept.stats()["requests_answered"] == 6  # a row a request, all questions in it
        kept.set_faults(fault_slow=1.0, slow_seconds=300)  # the next call cannot end by itself

        async def interrupted() -> None:
            call = asyncio.ensure_future(ep.ascore(more, **options, service=svc))
            deadline = time.monotonic() + 120  # a guard against a hang, not a speed requirement
            while kept.stats()["requests_accepted"] == 6:
                assert not call.done() and time.monotonic() < deadline
                await asyncio.sleep(0.02)
            call.cancel()  # its requests wait on slow answers: in flight
            with pytest.raises(asyncio.CancelledError):
                await call

        asyncio.run(interrupted())
        kept.set_faults(fault_slow=0.0)
        again = ep.score(more, **options, service=svc)
        assert kept_services() == [kept]
        stats = kept.stats()
        assert stats["requests_answered"] == 6 + 20  # both calls', on one service
        assert stats["requests_accepted"] > 6 + 20  # and the interrupted call's, cancelled
    finally:
        stop_kept()
    for frame, rows in ((first, 6), (again, 20)):
        assert frame.height == rows and frame["_error_type"].null_count() == rows


@pytest.mark.ray
def test_a_running_ray_is_used_with_one_warning_where_it_differs(
    ray_runtime: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evalpipe.cluster import running_differences

    monkeypatch.setenv("EVAL_API_KEY", API_KEY)  # what the session's Ray was started with
    assert running_differences(None, "EVAL_API_KEY") == []
    monkeypatch.setenv("RAY_ADDRESS", "10.9.8.7:6379")  # asked for, but a Ray runs here
    data = reviews(6)
    with embedded() as service:
        svc = ep.Service(service.base_url, model="model-1.13.0")
        options = {"id": "review_id", "state": "text", "questions": QUESTIONS, "service": svc}
        with pytest.warns(ep.EvalpipeWarning, match="the address 10.9.8.7:6379 is not used"):
            first = ep.score(data, **options, progress=False)
        with warnings.catch_warnings():
            warnings.simplefilter("error", ep.EvalpipeWarning)  # once per process
            second = ep.score(data, **options, progress=False)
    answers = [c for c in first.columns if "__" in c]
    assert first.select(answers).equals(second.select(answers))
    monkeypatch.delenv("RAY_ADDRESS")
    monkeypatch.setenv("EVAL_API_KEY", "a-key-set-after-ray-started")
    [message] = running_differences(None, "EVAL_API_KEY")
    assert "started before EVAL_API_KEY was set" in message


def test_the_raylets_worker_count_warning_is_not_printed_where_ray_prints_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from ray._private import worker

    from evalpipe.cluster.here import _skip_raylet_noise

    _skip_raylet_noise()  # what evalpipe does when it starts (or joins) Ray
    noise = (
        "WARNING: 8 PYTHON worker processes have been started on node: 4f2a with address: "
        "127.0.0.1, which is 4x the maximum expected startup concurrency (2)."
    )
    for line, is_err in ((noise, False), (noise, True), ("a worker's own error", True)):
        worker.print_to_stdstream({"lines": [line], "pid": "raylet", "is_err": is_err}, False)
    printed = capsys.readouterr()
    assert "worker processes have been started" not in printed.out + printed.err
    assert "a worker's own error" in printed.err  # everything else still shows
