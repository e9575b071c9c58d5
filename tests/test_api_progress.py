"""Progress from the Python API (`ep.score(..., progress=...)`): every display on a real job
(the session's Ray, a real embedded service over loopback), silence when asked, the display
closed however the job ends, and a bad value refused before anything is read or sent.

The module's tests share two services (two accounts, so one account Budget each for the
module, rather than one started per test): a paced one, for the displays that draw while the
job runs, and a quick one, for the calls that print nothing or send nothing. Each test counts
what its own calls sent."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import evalpipe as ep
from conftest import API_KEY, shared_service
from evalpipe.service import EmbeddedService

ROWS = 20
QUESTIONS = {
    "helpful": ep.Noul("Does the review help a shopper decide?", true="specific", false="vague"),
    "quality": ep.Score("How well written is it?", ["poor", "fair", "good"]),
}
# 20 rows at 1,200 RPM (20 requests a second): about a second of sending, several redraws.
PACED = {"requests_per_minute": 1200, "tokens_per_second": 10_000_000}
QUICK = {"requests_per_minute": 600_000, "tokens_per_second": 100_000_000}


def reviews() -> pl.DataFrame:
    texts = [f"Review {i}: the lamp {'glows' if i % 2 else 'flickers'} after {i} days." for i in
             range(ROWS)]  # fmt: skip
    return pl.DataFrame({"review_id": list(range(ROWS)), "text": texts})


class Counted:
    """The module's service, counting from where a test began: `requests_accepted` is what
    this test's calls sent."""

    def __init__(self, service: EmbeddedService) -> None:
        self._service = service
        self._before = int(service.stats()["requests_accepted"])

    def stats(self) -> dict[str, Any]:
        stats = dict(self._service.stats())
        stats["requests_accepted"] -= self._before
        return stats


@pytest.fixture(scope="module")
def paced_service() -> Iterator[EmbeddedService]:
    with shared_service() as service:
        yield service


@pytest.fixture(scope="module")
def quick_service() -> Iterator[EmbeddedService]:
    with shared_service() as service:
        yield service


def _svc(
    service: EmbeddedService, limits: dict[str, float], monkeypatch: pytest.MonkeyPatch
) -> tuple[Counted, ep.Service]:
    monkeypatch.setenv("EVAL_API_KEY", API_KEY)
    return Counted(service), ep.Service(service.base_url, model="model-1.13.0", limits=limits)


@pytest.fixture
def svc(
    paced_service: EmbeddedService, monkeypatch: pytest.MonkeyPatch
) -> tuple[Counted, ep.Service]:
    """The paced service (what this test sends counted apart), and the API's view of it."""
    return _svc(paced_service, PACED, monkeypatch)


@pytest.fixture
def quick(
    quick_service: EmbeddedService, monkeypatch: pytest.MonkeyPatch
) -> tuple[Counted, ep.Service]:
    """The quick service (limits lifted), as `svc`."""
    return _svc(quick_service, QUICK, monkeypatch)


def score(service: ep.Service, progress: Any, tmp_path: Path) -> pl.DataFrame:
    return ep.score(reviews(), id="review_id", state="text", questions=QUESTIONS,
                    service=service, output=tmp_path / "out", progress=progress)  # fmt: skip


def sent(service: Counted) -> int:
    return int(service.stats()["requests_accepted"])


# --------------------------------------------------------------------------- refused values


@pytest.mark.parametrize("bad", ["fancy", "Rich", 3, 0.5, ["plain"]])
def test_a_bad_value_is_refused_before_anything_is_sent(
    bad: Any, quick: tuple[Counted, ep.Service], tmp_path: Path
) -> None:
    service, api = quick
    with pytest.raises(ep.errors.ConfigError, match=r"^progress: .* not a progress display"):
        score(api, bad, tmp_path)
    assert sent(service) == 0
    assert not (tmp_path / "out").exists()


def test_tqdm_without_tqdm_names_the_package(
    quick: tuple[Counted, ep.Service], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service, api = quick
    monkeypatch.setitem(sys.modules, "tqdm", None)  # as if it were not installed
    with pytest.raises(ep.errors.ConfigError, match=r"needs the tqdm package.*pip install tqdm"):
        score(api, "tqdm", tmp_path)
    assert sent(service) == 0


# --------------------------------------------------------------------------- each display


@pytest.mark.ray
def test_progress_false_prints_nothing_at_all(
    ray_runtime: None,
    quick: tuple[Counted, ep.Service],
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    service, api = quick
    for off in (False, None):
        scored = score(api, off, tmp_path)
        assert scored.height == ROWS
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    assert sent(service) == ROWS  # the second call resumed the first's output


@pytest.mark.ray
@pytest.mark.parametrize("progress", [True, "plain"])
def test_plain_lines_off_a_terminal_end_with_every_row(
    progress: Any,
    ray_runtime: None,
    svc: tuple[Counted, ep.Service],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, api = svc
    score(api, progress, tmp_path)
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert out == ""
    # The first line comes at the first look after the job started, while it sends (20 rows
    # at 1,200 RPM take a second): with the account's Budget and workers up from an earlier
    # call, some rows may be in already.
    first = lines[0].split("/", 1)[0]
    assert first.isdigit() and int(first) < ROWS and lines[0].startswith(f"{first}/20 rows"), err
    assert lines[-1].startswith("20/20 rows"), err
    assert "req/s" in lines[-1] and "errors 0" in lines[-1]


@pytest.mark.ray
def test_rich_draws_one_line_of_its_own_and_clears_it(
    ray_runtime: None,
    svc: tuple[Counted, ep.Service],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # draw as on a terminal (stderr is captured)
    seen: dict[str, Any] = {}
    streams = (sys.stdout, sys.stderr)
    real_update = ep_displays().RichDisplay.update

    def watched(display: Any, snapshot: Any) -> None:
        real_update(display, snapshot)
        seen["streams"] = (sys.stdout, sys.stderr)  # while the bar is live
        seen["live"] = display.bar.live
        seen.setdefault("threads", {t.name for t in threading.enumerate()})

    monkeypatch.setattr(ep_displays().RichDisplay, "update", watched)
    score(api_of(svc), "rich", tmp_path)
    out, err = capsys.readouterr()
    assert out == ""
    assert "20/20" in err and "\r" in err  # redrawn in place, the last frame complete
    assert seen["streams"] == streams  # nothing redirected, even while it was live
    assert not seen["live"].is_started  # stopped
    assert not any("Refresh" in name for name in seen["threads"])  # no refresh thread


@pytest.mark.ray
def test_tqdm_draws_with_tqdm_std_and_closes_its_bar(
    ray_runtime: None,
    svc: tuple[Counted, ep.Service],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tqdm.std import tqdm

    score(api_of(svc), "tqdm", tmp_path)
    out, err = capsys.readouterr()
    assert out == ""
    assert "row/s" in err or "s/row" in err, err
    assert "\r" in err
    assert len(tqdm._instances) == 0  # closed: no bar (and no monitor) left


@pytest.mark.ray
def test_a_callback_gets_monotone_snapshots_ending_at_the_total(
    ray_runtime: None, svc: tuple[Counted, ep.Service], tmp_path: Path
) -> None:
    snapshots: list[ep.ProgressSnapshot] = []
    score(api_of(svc), snapshots.append, tmp_path)
    done = [s.rows_done for s in snapshots]
    assert len(snapshots) >= 3, done
    assert done == sorted(done)
    assert [s.requests for s in snapshots] == sorted(s.requests for s in snapshots)
    last = snapshots[-1]
    assert last.final and not any(s.final for s in snapshots[:-1])
    assert (last.rows_done, last.rows_total, last.rows_in_error) == (ROWS, ROWS, 0)
    assert last.requests == ROWS and last.input_tokens > 0 and last.elapsed_seconds > 0
    # Scored again into the same output: every row was committed, nothing more to do.
    again: list[ep.ProgressSnapshot] = []
    score(api_of(svc), again.append, tmp_path)
    assert again[-1].rows_done == again[-1].rows_skipped == ROWS
    assert again[-1].requests == 0


# --------------------------------------------------------------------------- failures


@pytest.mark.ray
def test_the_display_is_closed_when_the_job_fails(
    ray_runtime: None,
    svc: tuple[Counted, ep.Service],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bug mid-run (made here: the driver's journal tick raises once the bar is drawn)."""
    from rich.progress import Progress as RichProgress

    from evalpipe.output.sink import Sink

    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    calls = {"start": 0, "stop": 0, "tick": 0}
    for name in ("start", "stop"):
        real = getattr(RichProgress, name)

        def counted(bar: Any, real: Any = real, name: str = name) -> None:
            calls[name] += 1
            real(bar)

        monkeypatch.setattr(RichProgress, name, counted)
    real_tick = Sink.tick

    def tick(sink: Sink) -> None:
        calls["tick"] += 1
        if calls["start"] and calls["tick"] > 3:
            raise RuntimeError("a bug in the driver")
        real_tick(sink)

    monkeypatch.setattr(Sink, "tick", tick)
    with pytest.raises(RuntimeError, match="a bug in the driver"):
        score(api_of(svc), "rich", tmp_path)
    assert calls["start"] == calls["stop"] == 1


@pytest.mark.ray
def test_what_a_callback_raises_ends_the_call_and_the_next_call_resumes(
    ray_runtime: None, svc: tuple[Counted, ep.Service], tmp_path: Path
) -> None:
    service, api = svc
    snapshots: list[ep.ProgressSnapshot] = []

    def impatient(snapshot: ep.ProgressSnapshot) -> None:
        snapshots.append(snapshot)
        if snapshot.rows_done >= 5 and not snapshot.final:
            raise ValueError("seen enough")

    with pytest.raises(ValueError, match="seen enough"):
        score(api, impatient, tmp_path)
    assert snapshots[-1].final  # closed with its last snapshot, after the error
    scored = score(api, False, tmp_path)
    assert scored["review_id"].to_list() == list(range(ROWS))
    assert scored["helpful__p_true"].null_count() == 0
    assert sent(service) < 2 * ROWS  # only what was in flight at the error is sent again


def ep_displays() -> Any:
    import evalpipe.session.displays as displays

    return displays


def api_of(svc: tuple[Counted, ep.Service]) -> ep.Service:
    return svc[1]
