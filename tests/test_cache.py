"""The answer cache's file and keys, on a real SQLite file: what is one entry, what is refused,
several processes at once, `kill -9` mid-write, expiry, and `evalpipe cache stats | prune`.

The jobs that use it (Ray, the embedded service) are in test_cache_job.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from click.testing import CliRunner

from conftest import QUESTIONS
from evalpipe.cache.answers import JobCache, open_job_cache, pack, question_digest, unpack
from evalpipe.cache.store import FILE_NAME, CacheUnusable, Store, cache_file
from evalpipe.cli.main import main
from evalpipe.config import parse_config
from evalpipe.output import ArrowAnswers, answer_types, output_schema
from evalpipe.planning import Planner, Request, state_key
from evalpipe.stores import cache_home as default_dir

ROOT = Path(__file__).resolve().parents[1]
MODEL = "model-1.13.0"
SERVICE = "http://127.0.0.1:8080"  # who answered (ServiceConfig.identity)
ANSWER = {
    "type": "choice",
    "choice": "positive",
    "confidence": 0.5,
    "probabilities": {"positive": 0.7, "mixed": 0.2, "negative": 0.1},
}
TOKENS = Planner(QUESTIONS).question_tokens


def config(tmp: Path, **cache: Any) -> Any:
    return parse_config(
        {
            "input": {"path": str(tmp / "in.parquet"), "id_column": "id", "state": "text"},
            "output": {"path": str(tmp / "out")},
            "service": {"base_url": cache.pop("base_url", "http://127.0.0.1:8080")},
            "model": cache.pop("model", MODEL),
            "cache": {"path": str(tmp / "cache"), **cache},
            "questions": QUESTIONS,
        }
    )


def job_cache(tmp: Path, **cache: Any) -> tuple[JobCache, list[str]]:
    warnings: list[str] = []
    types = cache.pop("answer_types", None)
    opened = open_job_cache(
        config(tmp, **cache), QUESTIONS, TOKENS, warn=warnings.append, answer_types=types
    )
    return opened, warnings


def fill(cache: JobCache, states: list[str], keys: tuple[str, ...] = tuple(QUESTIONS)) -> None:
    request = Request(keys, 100, 100 - sum(TOKENS[k] for k in keys))
    for state in states:
        cache.add(
            state_key(state), {k: {**ANSWER, "for": state} for k in keys}, MODEL, 100, [request]
        )
    cache.commit()


def entries(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM answers").fetchone()[0])


# --------------------------------------------------------------------------- keys and values


def test_the_key_is_the_service_the_model_and_the_content_never_the_question_key() -> None:
    q = QUESTIONS["sentiment"]
    base = question_digest(SERVICE, MODEL, q)
    assert question_digest("embedded", MODEL, q) != base  # another service's answers
    assert question_digest("https://evals.example.com:443", MODEL, q) != base
    assert (
        question_digest(SERVICE, MODEL, dict(reversed(list(q.items())))) == base
    )  # a mapping's order
    assert question_digest(SERVICE, "model-1.12.0", q) != base
    assert question_digest(SERVICE, MODEL, {**q, "instructions": q["instructions"] + "!"}) != base
    reordered = {**q, "criteria": dict(reversed(list(q["criteria"].items())))}
    assert (
        question_digest(SERVICE, MODEL, reordered) != base
    )  # the model reads the options in order
    assert len(base) == 16


def test_a_damaged_value_is_a_miss_never_a_wrong_answer() -> None:
    question, state = question_digest(SERVICE, MODEL, QUESTIONS["sentiment"]), state_key("x")
    blob = pack(question, state, ANSWER)
    assert unpack(question, state, blob) == {k: v for k, v in ANSWER.items() if k != "type"}
    flipped = blob.replace(b"0.7", b"0.9")
    assert flipped != blob and unpack(question, state, flipped) is None
    assert unpack(question, state_key("y"), blob) is None  # another state's value
    assert unpack(question_digest(SERVICE, MODEL, QUESTIONS["helpful"]), state, blob) is None
    assert unpack(question, state, b"") is None and unpack(question, state, blob[:3]) is None


def test_default_place_follows_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_dir() == tmp_path / "evalpipe"
    assert cache_file(None) == tmp_path / "evalpipe" / FILE_NAME
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # the XDG spec: ignored
    assert default_dir() == Path.home() / ".cache" / "evalpipe"
    assert cache_file(tmp_path / "mine.sqlite3") == tmp_path / "mine.sqlite3"
    assert cache_file(tmp_path / "dir") == tmp_path / "dir" / FILE_NAME


# --------------------------------------------------------------------------- one job's view


def test_answers_round_trip_per_question_and_old_ones_are_not_used(tmp_path: Path) -> None:
    cache, warnings = job_cache(tmp_path)
    fill(cache, ["one", "two"], ("helpful", "quality"))
    hits = cache.lookup([state_key("one"), state_key("two"), state_key("three")])
    assert set(hits) == {state_key("one"), state_key("two")}
    assert set(hits[state_key("one")].answers) == {"helpful", "quality"}
    assert hits[state_key("one")].answers["quality"]["for"] == "one"
    assert hits[state_key("one")].model == MODEL
    # a value changed in place (no damage SQLite can see) is a miss for that answer only
    where = "WHERE state = ? AND question = ?"
    key = (state_key("two"), cache.ids["quality"])
    with sqlite3.connect(tmp_path / "cache" / FILE_NAME) as conn:
        (blob,) = conn.execute(f"SELECT answer FROM answers {where}", key).fetchone()
        changed = blob.replace(b'"positive"', b'"negative"')
        conn.execute(f"UPDATE answers SET answer = ? {where}", (changed, *key))
    assert set(cache.lookup([state_key("two")])[state_key("two")].answers) == {"helpful"}
    cache.close()
    # Two days later, with a one-day limit: not used, and pruned at the end of the run.
    file = tmp_path / "cache" / FILE_NAME
    with sqlite3.connect(file) as conn:
        conn.execute("UPDATE answers SET created = created - 2 * 86400")
    aged, _ = job_cache(tmp_path, max_age_days=1)
    assert aged.lookup([state_key("one")]) == {}
    aged.close()
    assert entries(file) == 0
    assert warnings == []


def answer_for(state: str) -> dict[str, dict[str, Any]]:
    """Answers of every question's type, with numbers that name the state (and hard floats)."""
    p = (sum(map(ord, state)) % 97 + 1) / 99 + 0.1 + 0.2
    return {
        "helpful": {"type": "noul", "noul": p},
        "sentiment": {
            "type": "choice", "choice": "mixed", "confidence": 1 / 3,
            "probabilities": {"positive": p / 2, "mixed": 1 - p, "negative": p / 2},
        },
        "quality": {
            "type": "score", "score": 3 * p, "confidence": p, "legend": {"0": "poor"},
            "probabilities": {"0": 0.0, "1": 1 - p, "2": p, "3": 0.0},
        },
    }  # fmt: skip


ARROW = answer_types(output_schema("id", pa.string(), QUESTIONS))


def test_hits_held_in_arrow_read_as_the_stored_answers(tmp_path: Path) -> None:
    cache, _ = job_cache(tmp_path)
    states = [f"state {i}" for i in range(300)]
    request = Request(tuple(QUESTIONS), 100, 100 - sum(TOKENS.values()))
    for state in states:
        cache.add(state_key(state), answer_for(state), MODEL, 100, [request])
    cache.commit()
    in_arrow, _ = job_cache(tmp_path, answer_types=ARROW)
    digests = [state_key(s) for s in [*states, "unknown"]]
    as_dicts, held = cache.lookup(digests), in_arrow.lookup(digests)
    assert set(held) == set(as_dicts) == set(digests[:-1])
    for state in states:
        hit = held[state_key(state)]
        assert isinstance(hit.answers, ArrowAnswers) and hit.model == MODEL
        stored = {k: {f: v for f, v in a.items() if f not in ("type", "legend")}
                  for k, a in answer_for(state).items()}  # fmt: skip
        assert dict(hit.answers) == as_dicts[state_key(state)].answers == stored
    cache.close()
    in_arrow.close()


@pytest.mark.parametrize("arrow", [False, True], ids=["dicts", "arrow"])
def test_a_value_whose_check_holds_but_is_no_answer_is_a_miss(tmp_path: Path, arrow: bool) -> None:
    import zlib

    cache, warnings = job_cache(tmp_path, answer_types=ARROW if arrow else None)
    fill(cache, ["one", "two", "three", "four", "five"])
    where = "WHERE state = ? AND question = ?"

    def rewrite(state: str, question: str, text: bytes, model: Any = MODEL) -> None:
        digest, key = state_key(state), cache.digests[question]
        check = zlib.crc32(text, zlib.crc32(digest, zlib.crc32(key))).to_bytes(4, "big")
        with sqlite3.connect(tmp_path / "cache" / FILE_NAME) as conn:
            conn.execute(
                f"UPDATE answers SET answer = ?, model = ? {where}",
                (check + text, model, digest, cache.ids[question]),
            )

    rewrite("one", "quality", b"[1, 2]")  # checked, but a list: the state is a miss
    rewrite("two", "helpful", b'{"noul": 0.5}', model=b"m")  # a model that is not text: left out
    rewrite("three", "sentiment", b'{"choice": ')  # not JSON: breaks the batch's, then its own
    rewrite("four", "helpful", b"null")  # JSON, but no answer
    rewrite("five", "helpful", b'{"noul": 1}\n')  # a line break, which no stored answer has
    states = ("one", "two", "three", "four", "five")
    hits = cache.lookup([state_key(s) for s in states])
    assert set(hits) == {state_key("two"), state_key("five")}
    alone = {s: set(cache.lookup([state_key(s)])) for s in states}  # each its batch's only
    assert alone == {s: {state_key(s)} if s in ("two", "five") else set() for s in states}
    assert set(hits[state_key("two")].answers) == set(QUESTIONS) - {"helpful"}
    assert all(a["for"] == "two" for a in hits[state_key("two")].answers.values())
    cache.close()
    assert warnings == []


def test_a_cache_is_off_for_an_alias_or_when_disabled(tmp_path: Path) -> None:
    alias, warnings = job_cache(tmp_path, model="model-latest")
    assert not alias.on and "alias" in alias.note and warnings == []
    disabled, _ = job_cache(tmp_path, enabled=False)
    assert not disabled.on and disabled.note == "off: cache.enabled is false"
    assert not (tmp_path / "cache").exists()  # neither made a file


def test_an_unusable_file_is_a_warning_and_no_cache(tmp_path: Path) -> None:
    (tmp_path / "cache").mkdir()
    file = tmp_path / "cache" / FILE_NAME
    file.write_bytes(b"this is not a database, but it is where the cache should be" * 100)
    cache, warnings = job_cache(tmp_path)
    assert not cache.on and cache.note.startswith("off:")
    assert len(warnings) == 1 and "not a database" in warnings[0] and str(file) in warnings[0]
    with sqlite3.connect(tmp_path / "other.sqlite3") as conn:  # another program's database
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(CacheUnusable, match="not an evalpipe cache"):
        Store.open(tmp_path / "other.sqlite3")


def test_a_damaged_file_never_gives_a_wrong_answer(tmp_path: Path) -> None:
    cache, _ = job_cache(tmp_path)
    states = [f"state {i} " * 20 for i in range(3000)]
    fill(cache, states)
    cache.close()
    file = tmp_path / "cache" / FILE_NAME
    data = bytearray(file.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 20_000] = os.urandom(20_000)
    file.write_bytes(bytes(data))
    damaged, warnings = job_cache(tmp_path)
    hits = damaged.lookup([state_key(s) for s in states])
    by_digest = {state_key(s): s for s in states}
    for digest, hit in hits.items():  # what it still gives is right
        assert all(a["for"] == by_digest[digest] for a in hit.answers.values())
    assert len(hits) < len(states) or warnings  # and the damage was seen
    damaged.close()


def test_a_newer_format_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    cache, _ = job_cache(tmp_path)
    fill(cache, ["one"])
    cache.close()
    file = tmp_path / "cache" / FILE_NAME
    with sqlite3.connect(file) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE name = 'format'")
    before = file.read_bytes()
    newer, warnings = job_cache(tmp_path)
    assert not newer.on and len(warnings) == 1
    assert "newer evalpipe (cache format 99" in warnings[0] and "cache.path" in warnings[0]
    planned, _ = open_job_cache(config(tmp_path), QUESTIONS, TOKENS, write=False), None
    assert not planned.on and "newer" in planned.note
    assert file.read_bytes() == before
    result = CliRunner().invoke(main, ["cache", "stats", "--path", str(file)])
    assert result.exit_code == 2
    assert result.output.strip().startswith("ConfigError: cache.path: ") and "99" in result.output


# --------------------------------------------------------------------------- permissions

_OPEN = """
import json, sys
from pathlib import Path
sys.path.insert(0, "tests")
from test_cache import TOKENS, config
from conftest import QUESTIONS
from evalpipe.cache.answers import open_job_cache
warnings = []
cache = open_job_cache(config(Path(sys.argv[1])), QUESTIONS, TOKENS, warn=warnings.append)
print(json.dumps({"on": cache.on, "note": cache.note, "warnings": warnings}))
"""


def _open_without_privileges(tmp: Path) -> dict[str, Any]:
    """open_job_cache in a process that file permissions apply to (root ignores them: as root,
    the process runs without its capabilities)."""
    prefix: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: permissions cannot be tested")
        prefix = ["setpriv", "--inh-caps=-all", "--bounding-set=-all"]
    done = subprocess.run(
        [*prefix, sys.executable, "-c", _OPEN, str(tmp)],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return dict(json.loads(done.stdout))


@pytest.mark.subprocess
@pytest.mark.parametrize(("mode", "reason"), [(0o444, "is read-only"), (0o000, "cannot be read")])
def test_a_read_only_or_unreadable_cache_is_a_warning(
    tmp_path: Path, mode: int, reason: str
) -> None:
    cache, _ = job_cache(tmp_path)
    fill(cache, ["one"])
    cache.close()
    file = tmp_path / "cache" / FILE_NAME
    file.chmod(mode)
    (tmp_path / "cache").chmod(0o555)
    try:
        seen = _open_without_privileges(tmp_path)
    finally:
        (tmp_path / "cache").chmod(0o755)
        file.chmod(0o644)
    assert seen["on"] is False and reason in seen["note"]
    assert len(seen["warnings"]) == 1 and "the run goes on without it" in seen["warnings"][0]


# --------------------------------------------------------------------------- several processes

_WRITER = """
import sys, time
from pathlib import Path
from evalpipe.cache.store import Store
path, me, batches, rows = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
store = Store.open(path)
for t in range(batches):
    keys = [bytes([me]) + t.to_bytes(4, "big") + i.to_bytes(11, "big") for i in range(rows)]
    store.put([(k, 1, b"x" * 60, f"writer-{me}", t, int(time.time())) for k in keys])
    assert len(store.get(keys[:: max(1, rows // 20)], [1])) == len(keys[:: max(1, rows // 20)])
    print(t, flush=True)
"""


def _writer(file: Path, me: int, batches: int, rows: int) -> subprocess.Popen[str]:
    command = [sys.executable, "-c", _WRITER, str(file), str(me), str(batches), str(rows)]
    return subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _whole(file: Path) -> dict[tuple[str, int], int]:
    with sqlite3.connect(file) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = conn.execute("SELECT model, tokens, count(*) FROM answers GROUP BY 1, 2")
        return {(model, t): n for model, t, n in rows}


@pytest.mark.subprocess
def test_two_processes_write_and_read_one_new_cache_at_once(tmp_path: Path) -> None:
    file = tmp_path / "shared" / FILE_NAME  # neither finds it: both create it
    writers = [_writer(file, me, 60, 200) for me in (1, 2)]
    for writer in writers:
        _, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err
    groups = _whole(file)
    assert len(groups) == 120 and set(groups.values()) == {200}


_OPENER = """
import sys
from pathlib import Path
from evalpipe.cache.store import Store
print("ready", flush=True)
for line in sys.stdin:  # all at one moment: when the test lets every opener go
    Store.open(Path(line.strip())).close()
    print("opened", flush=True)
"""


@pytest.mark.subprocess
def test_jobs_that_create_one_cache_at_the_same_moment_all_use_it(tmp_path: Path) -> None:
    """Switching a new file to WAL takes a lock SQLite does not wait for: without the retry,
    about 1 in 9 openings failed "database is locked" (three processes at once). Four
    processes, four rounds: in each, all four open one new file at the same moment."""
    openers = [
        subprocess.Popen(
            [sys.executable, "-c", _OPENER],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    try:
        for opener in openers:  # each imported, waiting
            assert opener.stdout is not None and opener.stdout.readline() == "ready\n"
        for round_ in range(4):
            file = tmp_path / str(round_) / FILE_NAME
            for opener in openers:  # go: the file's path is the signal
                assert opener.stdin is not None
                opener.stdin.write(f"{file}\n")
                opener.stdin.flush()
            for opener in openers:
                assert opener.stdout is not None
                assert opener.stdout.readline() == "opened\n", opener.communicate()[1]
            with sqlite3.connect(file) as conn:
                assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        for opener in openers:
            _, err = opener.communicate(timeout=120)  # stdin closed: it ends
            assert opener.returncode == 0, err
    finally:
        for opener in openers:
            opener.kill()


@pytest.mark.subprocess
def test_kill_9_mid_write_leaves_whole_transactions(tmp_path: Path) -> None:
    file = tmp_path / FILE_NAME
    writer = _writer(file, 7, 1_000_000, 5_000)
    assert writer.stdout is not None
    for _ in range(5):  # five transactions committed, the sixth being written
        writer.stdout.readline()
    time.sleep(0.05)
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=30)
    groups = _whole(file)
    assert len(groups) >= 5 and set(groups.values()) == {5_000}
    store = Store.open(file)  # and it is usable as it is
    store.put([(b"k" * 16, 1, b"x" * 20, MODEL, 1, 1)])
    store.close()


# --------------------------------------------------------------------------- evalpipe cache


def test_cache_stats_and_prune(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    store = Store.open(folder / FILE_NAME)
    now = int(time.time())
    rows = [(bytes([i]) * 16, 1, b"x" * 30, "model-1.12.0", 10, now - 10 * 86400) for i in range(3)]
    rows += [(bytes([i]) * 16, 2, b"x" * 30, MODEL, 20, now - 86400) for i in range(3, 5)]
    store.put(rows)
    store.close()
    runner = CliRunner()
    shown = runner.invoke(main, ["cache", "stats", "--path", str(folder), "--json"])
    assert shown.exit_code == 0, shown.output
    figures = json.loads(shown.output)
    assert figures["entries"] == 5 and figures["bytes"] > 0
    assert figures["models"] == {
        "model-1.12.0": {"entries": 3, "tokens": 30},
        MODEL: {"entries": 2, "tokens": 40},
    }
    assert (figures["oldest"], figures["newest"]) == (now - 10 * 86400, now - 86400)
    text = runner.invoke(main, ["cache", "stats", "--path", str(folder)]).output
    assert "5 answers" in text and "model-1.12.0: 3 answers" in text
    pruned = runner.invoke(main, ["cache", "prune", "--older-than", "5", "--path", str(folder)])
    assert pruned.exit_code == 0 and "Pruned 3 answers" in pruned.output
    assert entries(folder / FILE_NAME) == 2
    # the config's cache.path and max_age_days, as a run finds them
    job = tmp_path / "job.yaml"
    settings = json.loads(config(tmp_path).model_dump_json())
    settings["cache"] = {"path": str(folder), "max_age_days": 0.5}
    job.write_text(yaml.safe_dump(settings))
    by_config = runner.invoke(main, ["cache", "prune", "--config", str(job), "--vacuum"])
    assert by_config.exit_code == 0 and "Pruned 2 answers" in by_config.output, by_config.output
    assert entries(folder / FILE_NAME) == 0


def test_cache_commands_without_a_cache_or_a_limit(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(main, ["cache", "stats", "--path", str(tmp_path / "none")])
    assert missing.exit_code == 0 and "No answer cache" in missing.output
    assert not (tmp_path / "none").exists()
    unbounded = runner.invoke(main, ["cache", "prune", "--path", str(tmp_path)])
    assert unbounded.exit_code == 2 and "--older-than" in unbounded.output
