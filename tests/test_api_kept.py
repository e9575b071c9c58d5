"""A call without `output=` keeps its output (`evalpipe.api.kept`): the same call again resumes
it, a changed input gets a folder of its own, a folder another run holds is left to it, and
old or surplus folders are deleted."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import polars as pl
import pytest

import evalpipe as ep
from conftest import API_KEY, embedded, job_config
from evalpipe.api import kept
from evalpipe.config import parse_config
from evalpipe.output import hold, output_lock
from evalpipe.service import EmbeddedService

pytestmark = pytest.mark.patient  # `make test` runs it beside the rest (the Makefile)

QUESTIONS = {
    "helpful": ep.Noul("Does the review help a shopper decide?", true="specific", false="vague"),
    "quality": ep.Score("How well written is it?", ["poor", "fair", "good"]),
}


def reviews(n: int = 12) -> pl.DataFrame:
    return pl.DataFrame(
        {"review_id": list(range(n)), "text": [f"Review {i}: it hums at night." for i in range(n)]}
    )


def score(data: pl.DataFrame, service: EmbeddedService) -> pl.DataFrame:
    """`ep.score` of `data` on `service`, without `output=`: the call keeps its table."""
    svc = ep.Service(service.base_url, model="model-1.13.0")
    return ep.score(data, id="review_id", state="text", questions=QUESTIONS, service=svc,
                    progress=False)  # fmt: skip


def folders() -> list[Path]:
    home = kept.scores_home()
    return sorted(home.iterdir()) if home.is_dir() else []


def runs(folder: Path) -> int:
    return len(json.loads((folder / "_manifest.json").read_text())["runs"])


@pytest.mark.ray
def test_the_same_call_again_resumes_its_kept_output_and_a_changed_input_gets_its_own(
    ray_runtime: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVAL_API_KEY", API_KEY)
    data = reviews()
    with embedded() as service:
        first = score(data, service)
        [folder] = folders()
        sent = service.stats()["requests_accepted"]
        again = score(data.clone(), service)  # the same rows
        assert service.stats()["requests_accepted"] == sent
        changed = data.with_columns(
            pl.when(pl.col("review_id") == 3).then(pl.lit("Changed.")).otherwise("text")
            .alias("text")
        )  # fmt: skip
        third = score(changed, service)
        assert service.stats()["requests_accepted"] == sent + 1  # the changed row alone
    assert not first["_cached"].any()
    assert again.equals(first)  # resumed, not scored again: the first call's run id and times
    assert runs(folder) == 2
    assert len(folders()) == 2
    assert third.filter(pl.col("review_id") != 3)["_cached"].all()  # the answer cache's
    assert third["_run_id"].n_unique() == 1 and third["_run_id"][0] != first["_run_id"][0]


@pytest.mark.ray
def test_a_kept_output_another_run_holds_is_left_to_it(
    ray_runtime: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVAL_API_KEY", API_KEY)
    data = reviews(6)
    with embedded() as service:
        first = score(data, service)
        [folder] = folders()
        with hold(output_lock(folder), str(folder)):  # the same cell, in another notebook
            second = score(data, service)
    assert runs(folder) == 1  # untouched
    assert second["_cached"].all()  # written elsewhere, from the answer cache
    answers = [c for c in first.columns if "__" in c]
    assert second.select(answers).equals(first.select(answers))


@pytest.mark.ray
def test_a_cache_home_where_no_folder_can_be_made_keeps_nothing_and_fails_nothing(
    ray_runtime: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVAL_API_KEY", API_KEY)
    kept.scores_home().parent.mkdir(parents=True, exist_ok=True)
    kept.scores_home().write_text("a file where the folders would go")
    with embedded() as service:
        scored = score(reviews(4), service)
    assert scored.height == 4 and scored["_error_type"].is_null().all()
    assert kept.scores_home().read_text() == "a file where the folders would go"


@pytest.mark.ray
def test_a_kept_output_the_job_cannot_resume_is_started_over(
    ray_runtime: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVAL_API_KEY", API_KEY)
    data = reviews(5)
    with embedded() as service:
        first = score(data, service)
        [folder] = folders()
        (folder / "_manifest.json").write_text("{ damaged")
        again = score(data, service)
    assert runs(folder) == 1  # a new table, from the answer cache
    assert again["_cached"].all() and again["_run_id"][0] != first["_run_id"][0]
    answers = [c for c in first.columns if "__" in c]
    assert again.select(answers).equals(first.select(answers))


def test_only_a_call_the_answer_cache_would_answer_keeps_its_output(tmp_path: Path) -> None:
    def keeps(**changes: object) -> bool:
        return kept.keeps(parse_config(job_config(tmp_path, "http://127.0.0.1:9", **changes)))

    assert keeps()
    assert not keeps(model="model-latest")  # an alias's answers move
    assert not keeps(cache={"enabled": False})
    assert not keeps(cache={"max_age_days": 3})


def test_a_corpus_given_by_path_is_named_by_its_files(tmp_path: Path) -> None:
    path = tmp_path / "in.parquet"
    reviews().write_parquet(path)
    named = kept.path_identity(str(path))
    assert kept.path_identity(str(path)) == named
    reviews(13).write_parquet(path)
    assert kept.path_identity(str(path)) != named
    assert kept.path_identity("s3://bucket/in.parquet") == "s3://bucket/in.parquet"


def test_kept_folders_unused_for_long_beyond_the_count_or_the_bytes_are_deleted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    home = kept.scores_home()
    now = time.time()

    def made(name: str, days_ago: float, size: int = 10) -> Path:
        folder = home / name
        folder.mkdir(parents=True)
        (folder / "part-00000.parquet").write_bytes(b"x" * size)
        os.utime(folder, (now - days_ago * 86_400,) * 2)
        return folder

    monkeypatch.setattr(kept, "KEEP_FOLDERS", 3)
    monkeypatch.setattr(kept, "KEEP_BYTES", 1000)
    recent = [made(f"recent-{i}", i) for i in range(4)]  # the 4th is one too many
    old, held = made("old", 8), made("held", 30)
    big, mine = made("big", 1.5, 2000), made("mine", 9)  # the call's own: kept however old
    with hold(output_lock(held), str(held)):
        os.utime(held, (now - 30 * 86_400,) * 2)  # as old as made: the lock file touched it
        deleted = kept.tidy(keep=mine, now=now)
    assert sorted(p.name for p in deleted) == ["big", "old", "recent-3"]
    assert folders() == sorted([*recent[:3], held, mine])
    assert not big.exists() and not old.exists()


def test_a_folder_in_use_or_whose_lock_cannot_be_opened_is_left_and_fails_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kept, "KEEP_FOLDERS", 0)  # every folder but the call's own is surplus
    home = kept.scores_home()
    now = time.time()
    ages = {"a-minute-ago": 60, "an-hour-ago": 3600, "odd": 3600}
    for name in ages:
        (home / name).mkdir(parents=True)
    (home / "odd" / ".evalpipe.lock").mkdir()  # no lock file can be opened there
    for name, seconds_ago in ages.items():
        os.utime(home / name, (now - seconds_ago,) * 2)
    deleted = kept.tidy(now=now)
    assert [p.name for p in deleted] == ["an-hour-ago"]
    assert [p.name for p in folders()] == ["a-minute-ago", "odd"]
