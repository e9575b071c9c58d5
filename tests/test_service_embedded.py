"""Starting the service: the Python API in both modes, the `serve` command and its settings."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from click.testing import CliRunner

from conftest import API_KEY, auth, evaluate_body
from evalpipe.errors import ConfigError, ServiceUnreachable
from evalpipe.service import EmbeddedService, LimitStep, ServiceSettings, parse_schedule
from evalpipe.service.command import serve
from evalpipe.service.server import base_url

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.subprocess
def test_process_mode_starts_answers_and_stops(http: httpx.Client) -> None:
    settings = ServiceSettings(api_key=API_KEY, rpm=6000, fault_seed=4)
    service = EmbeddedService(settings, mode="process")
    url = service.start()
    try:
        assert url == service.base_url and url.startswith("http://127.0.0.1:")
        assert API_KEY not in Path(f"/proc/{service.pid}/cmdline").read_text()
        raw = orjson.dumps(evaluate_body())
        answered = httpx.post(url + "/v1/evaluate", content=raw, headers=auth())
        # Another process, another hash seed: the same answers as the thread-mode service.
        assert answered.content == http.post("/v1/evaluate", content=raw).content
        service.set_limits(rpm=60)
        stats = service.stats()
        assert stats["limits"]["rpm"] == 60 and stats["requests_accepted"] == 1
        process = service._backend._process  # type: ignore[union-attr]
    finally:
        service.stop()
    assert process.returncode == 0
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/v1/models", headers=auth())
    service.stop()  # twice is fine


def test_thread_mode_stops_and_frees_the_port() -> None:
    with EmbeddedService(ServiceSettings(api_key=API_KEY)) as service:
        url = service.base_url
        assert httpx.get(url + "/v1/models", headers=auth()).status_code == 200
        assert service.pid == os.getpid()
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/v1/models", headers=auth())


def test_a_taken_port_is_a_clear_error(service: EmbeddedService) -> None:
    other = EmbeddedService(ServiceSettings(api_key=API_KEY), port=service.port)
    with pytest.raises(Exception, match="cannot listen"):
        other.start()


@pytest.mark.subprocess
def test_process_mode_reports_why_it_could_not_start(service: EmbeddedService) -> None:
    settings = ServiceSettings(api_key=API_KEY)
    taken = EmbeddedService(settings, port=service.port, mode="process")
    with pytest.raises(ServiceUnreachable, match="did not start: Error: cannot listen"):
        taken.start()


def test_the_api_refuses_misuse() -> None:
    service = EmbeddedService(ServiceSettings(api_key=API_KEY))
    with pytest.raises(ConfigError):
        service.stats()
    with pytest.raises(ConfigError):
        EmbeddedService(ServiceSettings(api_key=API_KEY), mode="fork")  # type: ignore[arg-type]
    with service, pytest.raises(ConfigError):
        service.set_limits(rpm=0)


def test_settings_never_show_the_key() -> None:
    settings = ServiceSettings(api_key="secret-123", fault_drop=0.1)
    assert "secret-123" not in repr(settings)
    assert "secret-123" not in " ".join(settings.to_args())


@pytest.mark.parametrize(
    "options",
    [
        {"api_key": ""},
        {"api_key": "k", "rpm": 0},
        {"api_key": "k", "max_inflight": 0},
        {"api_key": "k", "latency": -1},
        {"api_key": "k", "latency": None},
        {"api_key": "k", "max_inflight": 1.5},
        {"api_key": "k", "fault_drop": 0.6, "fault_500": 0.6},
        {"api_key": "k", "limit_schedule": "soon:rpm=5"},
    ],
)
def test_bad_settings_are_config_errors(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        ServiceSettings(**options)


def test_settings_survive_the_trip_through_the_flags() -> None:
    settings = ServiceSettings(
        api_key="k",
        rpm=600,
        tps=1234.5,
        limit_schedule="30:rpm=600",
        max_inflight=8,
        latency=0.01,
        fault_truncate=0.25,
        fault_seed=9,
        log_requests=True,
    )
    params = serve.make_context("serve", settings.to_args()).params
    del params["host"], params["port"], params["stop_on_stdin_eof"]
    assert ServiceSettings(**{**params, "api_key": "k"}) == settings


def test_parse_schedule() -> None:
    assert parse_schedule("60:rpm=1200; 30:rpm=600,tps=100000;") == (
        LimitStep(30.0, 600.0, 100000.0),
        LimitStep(60.0, 1200.0, None),
    )
    assert parse_schedule("") == ()
    for bad in ["30", "30:rpm", "30:burst=5", "30:rpm=0", "30:rpm=1,rpm=2", "x:rpm=5"]:
        with pytest.raises(ConfigError):
            parse_schedule(bad)


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:80"),
        ("0.0.0.0", "http://127.0.0.1:80"),
        ("::1", "http://[::1]:80"),
    ],
)
def test_base_url(host: str, url: str) -> None:
    assert base_url(host, 80) == url


# --------------------------------------------------------------------------- the command


def test_serve_refuses_to_start_without_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EVAL_API_KEY", raising=False)
    result = CliRunner().invoke(serve, ["--port", "0"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "Error: no API key: pass --api-key or set EVAL_API_KEY"
    ]


@pytest.mark.parametrize(
    "args",
    [["--fault-drop", "0.7", "--fault-500", "0.7"], ["--limit-schedule", "30:rpm=x"]],
)
def test_serve_refuses_bad_settings_in_one_line(args: list[str]) -> None:
    result = CliRunner().invoke(serve, ["--api-key", "k", *args])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1


def _child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "EVAL_API_KEY"}
    env["PYTHONPATH"] = str(ROOT)
    return {**env, **extra}


@pytest.mark.subprocess
def test_python_m_refuses_without_a_key() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "evalpipe.service"], env=_child_env(), capture_output=True, text=True
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "Error: no API key: pass --api-key or set EVAL_API_KEY"
    ]


@pytest.mark.subprocess
def test_serve_banner_url_and_clean_exit_on_sigterm() -> None:
    child = subprocess.Popen(
        [sys.executable, "-m", "evalpipe.service", "--port", "0"],
        env=_child_env(EVAL_API_KEY="banner-secret"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        url = child.stdout.readline().strip()
        assert httpx.get(url + "/v1/models", headers=auth("banner-secret")).status_code == 200
    finally:
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=10)
    assert child.returncode == 0
    banner = err.strip().splitlines()
    assert len(banner) <= 2 and "reference evaluator for offline runs" in banner[0]
    assert url in banner[0] and "banner-secret" not in err + out
