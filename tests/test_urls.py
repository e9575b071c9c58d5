"""One rule for every URL the job shows or sends (evalpipe.stores.urls): credentials in a URL the
config names are refused when it is read, in one line that says where they belong and does not
repeat them; a URL is shown without its userinfo wherever it is shown; a proxy without a scheme
is read as curl reads it.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner, Result

from conftest import job_config
from evalpipe.cli.main import main
from evalpipe.config import MetricsConfig, parse_config
from evalpipe.engine import EventLog
from evalpipe.errors import ConfigError
from evalpipe.observe.lineage import dataset_id
from evalpipe.send.transport import curl_proxy, env_proxy
from evalpipe.stores import scrubbed, shown
from evalpipe.stores.urls import has_credentials

pytestmark = pytest.mark.patient  # `make test` runs it beside the rest (the Makefile)

SECRET = "Sup3r-s3cret-Pa55"  # searched for in everything said


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def one_line_exit_2(result: Result, starts: str, *says: str) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and SECRET not in result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith(starts), line
    for words in says:
        assert words in line, line
    return line


# --------------------------------------------------------------------------- the rule


@pytest.mark.parametrize(
    ("url", "seen"),
    [
        (f"https://alice:{SECRET}@eval.example.com:8443/x", "https://eval.example.com:8443/x"),
        (f"s3://AKIA123:{SECRET}@bucket/corpus", "s3://bucket/corpus"),
        (f"s3://AKIA123:{SECRET}@with@at@bucket/corpus", "s3://bucket/corpus"),
        ("s3://bucket/user@example.com/x", "s3://bucket/user@example.com/x"),
        ("abfs://container@account.dfs.core.windows.net/p", "abfs://container@account.dfs.core.windows.net/p"),
        (f"abfs://container:{SECRET}@account.dfs.core.windows.net/p", "abfs://account.dfs.core.windows.net/p"),
        ("http://127.0.0.1:9091", "http://127.0.0.1:9091"),
        (f"redis://:ab/{SECRET}@tier:6379/0", "redis://tier:6379/0"),  # a password with a /
        (f"s3://AKIA:ab/{SECRET}@bucket/x", "s3://bucket/x"),
        ("https://h:8443/p@x/y", "https://h:8443/p@x/y"),  # a port and a path: kept
        (f"redis://tier/0?auth={SECRET}", "redis://tier/0?auth=[redacted]"),
        (f"redis://tier/0?pwd={SECRET}&db=1", "redis://tier/0?pwd=[redacted]&db=1"),
        (f"https://h/x?jwt={SECRET}", "https://h/x?jwt=[redacted]"),
    ],
)  # fmt: skip
def test_a_url_is_shown_without_its_user_or_password(url: str, seen: str) -> None:
    assert scrubbed(url) == seen
    assert shown(url) == seen


def test_texts_are_scrubbed_and_a_json_line_stays_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    record = {"message": f"cannot reach http://u:{SECRET}@h:1/v1", "other": "x@y", "n": 1}
    line = scrubbed(json.dumps(record, separators=(",", ":")))
    assert json.loads(line) == {"message": "cannot reach http://h:1/v1", "other": "x@y", "n": 1}
    quoted = f"Unknown scheme for proxy URL URL('alice:{SECRET}@proxy:3128')"  # no scheme
    assert SECRET in scrubbed(quoted)  # until the environment names that proxy
    monkeypatch.setenv("https_proxy", f"alice:{SECRET}@proxy:3128")
    assert SECRET not in scrubbed(quoted)
    assert scrubbed("a short key k here", ["k"]) == "a short key [redacted] here"


@pytest.mark.parametrize(
    ("url", "holds"),
    [
        (f"https://alice:{SECRET}@h", True),
        ("https://alice@h", True),  # a user alone is a credential's half
        (f"s3://AKIA:ab/{SECRET}@bucket/x", True),  # an unescaped secret with a slash
        ("abfs://container@account.dfs.core.windows.net", False),  # a container, not a user
        (f"abfs://container:{SECRET}@account.dfs.core.windows.net", True),
        ("https://h:8443/x", False),
        ("s3://bucket/user@example.com/x", False),
    ],
)
def test_what_counts_as_credentials(url: str, holds: bool) -> None:
    assert has_credentials(url) is holds


# --------------------------------------------------------------------------- refused at load


def corpus(tmp: Path) -> None:
    pq.write_table(pa.table({"id": [1, 2], "text": ["a b", "c d"]}), tmp / "in.parquet")


@pytest.mark.parametrize(
    ("key", "value", "belongs"),
    [
        ("service.base_url", f"https://alice:{SECRET}@eval.example.com", "service.api_key_env"),
        ("input.path", f"s3://AKIA123:{SECRET}@corpora/in.parquet", "AWS_SECRET_ACCESS_KEY"),
        ("output.path", f"s3://AKIA123:{SECRET}@tables/out", "AWS_SECRET_ACCESS_KEY"),
        ("output.path", f"gs://svc:{SECRET}@tables/out", "GOOGLE_APPLICATION_CREDENTIALS"),
        ("metrics.pushgateway", f"http://push:{SECRET}@gw:9091", "pushgateway_password_env"),
        ("shared.url", f"redis://alice:{SECRET}@tier:6379/0", "shared.password_env"),
        ("shared.url", f"redis://:ab/{SECRET}@tier:6379/0", "shared.password_env"),
    ],
)
def test_credentials_in_a_config_url_are_refused_at_load_saying_where_they_go(
    tmp_path: Path, key: str, value: str, belongs: str
) -> None:
    section, name = key.split(".")
    config = job_config(tmp_path, "embedded")
    config.setdefault(section, {})[name] = value
    with pytest.raises(ConfigError) as refused:
        parse_config(config)
    message = refused.value.one_line()
    assert message.startswith(f"ConfigError: {key}: holds a user or password"), message
    assert belongs in message and SECRET not in message
    assert scrubbed(message) == message  # nothing in it looks like a URL's userinfo


def test_credentials_given_on_the_command_line_are_refused_too(tmp_path: Path) -> None:
    corpus(tmp_path)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job_config(tmp_path, "embedded")))
    cases: list[tuple[list[str], str]] = [
        (["run", str(path), "--pushgateway", f"http://push:{SECRET}@127.0.0.1:9"],
         "ConfigError: metrics.pushgateway: holds a user or password"),
        (["run", str(path), "--set", f"output.path=s3://K:{SECRET}@tables/x"],
         "ConfigError: output.path: holds a user or password"),
        (["plan", str(path), "--set", f"service.base_url=https://u:{SECRET}@h"],
         "ConfigError: service.base_url: holds a user or password"),
        (["models", "--base-url", f"https://u:{SECRET}@eval.example.com"],
         "ConfigError: service.base_url: holds a user or password"),
        (["describe", f"s3://AKIA:{SECRET}@tables/out"],
         "InputError: output: holds a user or password"),
    ]  # fmt: skip
    for args, starts in cases:
        one_line_exit_2(invoke(*args), starts, "put them in")  # where they go, said whole
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_a_value_echoed_in_a_message_is_shown_without_userinfo() -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config({"service": {"base_url": f"ftp://u:{SECRET}@h"}})
    assert SECRET not in refused.value.message
    with pytest.raises(ValueError, match="a password needs its user"):
        MetricsConfig(pushgateway="http://gw:9091", pushgateway_password_env="GW_PASSWORD")


# --------------------------------------------------------------------------- proxies, as curl


@pytest.mark.parametrize(
    ("value", "read"),
    [
        (f"alice:{SECRET}@proxy.corp:3128", f"http://alice:{SECRET}@proxy.corp:3128"),
        ("proxy.corp:3128", "http://proxy.corp:3128"),
        ("proxy.corp", "http://proxy.corp:1080"),  # curl's port for a proxy that names none
        (f"alice:{SECRET}@proxy.corp", f"http://alice:{SECRET}@proxy.corp:1080"),
        ("http://proxy.corp:3128", "http://proxy.corp:3128"),
        ("https://proxy.corp", "https://proxy.corp"),
    ],
)
def test_a_proxy_is_read_as_curl_reads_it(value: str, read: str) -> None:
    assert curl_proxy(value, "HTTPS_PROXY") == read


def test_the_environment_proxy_is_read_the_same_way(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", f"alice:{SECRET}@proxy.corp:3128")
    assert env_proxy("https://eval.example.com") == f"http://alice:{SECRET}@proxy.corp:3128"
    assert env_proxy("https://127.0.0.1:8000") is None  # loopback: never through a proxy


# --------------------------------------------------------------------------- said and exported


def test_the_event_log_cuts_userinfo_and_the_proxy_password(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", f"alice:{SECRET}@proxy.corp:3128")
    stream = io.StringIO()
    log = EventLog("json", run_id="r1", stream=stream)
    log.warning(f"pushing to http://u:{SECRET}@gw:9091 failed")
    log.emit("error", None, traceback=f"ValueError: URL('alice:{SECRET}@proxy.corp:3128')")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert lines[0]["message"] == "pushing to http://gw:9091 failed"
    assert SECRET not in stream.getvalue()
    text = io.StringIO()
    log = EventLog("text", stream=text)
    log.foreign(f"a library says: for url: http://u:{SECRET}@catalog:5000/api/v1/lineage")
    log.summary({}, f"output s3://K:{SECRET}@tables/out")
    assert SECRET not in text.getvalue() and "http://catalog:5000" in text.getvalue()
    assert capsys.readouterr().out.strip() == "output s3://tables/out"


def test_lineage_names_a_dataset_without_userinfo() -> None:
    assert dataset_id(f"s3://K:{SECRET}@tables/out") == ("s3://tables", "out")


@pytest.mark.subprocess
def test_a_bug_s_traceback_is_printed_scrubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the CLI's process prints for an exception nothing caught passes the same rule."""
    code = (
        "from evalpipe.cli.options import scrub_tracebacks; scrub_tracebacks(); "
        f"raise ValueError(\"Unknown scheme for proxy URL URL('alice:{SECRET}@proxy:3128') "
        f'at https://u:{SECRET}@h")'
    )
    env = {**os.environ, "HTTPS_PROXY": f"alice:{SECRET}@proxy:3128"}
    ran = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert ran.returncode == 1 and "ValueError: Unknown scheme" in ran.stderr
    assert "Traceback" in ran.stderr and SECRET not in ran.stderr


def test_a_credential_among_a_uri_s_parameters_is_refused_and_never_shown() -> None:
    signed = f"https://b.s3.amazonaws.com/x?X-Amz-Credential=AKIA&X-Amz-Signature={SECRET}"
    assert SECRET not in scrubbed(signed) and "X-Amz-Signature=[redacted]" in scrubbed(signed)
    assert has_credentials(f"abfs://account.dfs.core.windows.net/c?client_secret={SECRET}")
    assert not has_credentials("abfs://account.dfs.core.windows.net/c?credential_kind=default")
    with pytest.raises(ConfigError, match="a credential among its parameters") as refused:
        parse_config(
            job_config(Path("."), "embedded", output={"path": f"s3://t/o?session_token={SECRET}"})
        )
    assert SECRET not in refused.value.message


@pytest.mark.parametrize("query", ["password", "auth", "pwd", "jwt", "token"])
def test_a_shared_url_with_a_credential_among_its_parameters_is_refused_never_repeated(
    tmp_path: Path, query: str
) -> None:
    config = job_config(
        tmp_path, "embedded", shared={"url": f"redis://tier:6379/0?{query}={SECRET}"}
    )
    with pytest.raises(ConfigError) as refused:
        parse_config(config)
    message = refused.value.one_line()
    assert message.startswith("ConfigError: shared.url: holds a credential"), message
    assert "shared.password_env" in message and SECRET not in message and "tier" not in message


def test_a_shared_url_of_another_scheme_is_refused_without_repeating_it(tmp_path: Path) -> None:
    config = job_config(tmp_path, "embedded", shared={"url": "http://tier.internal:6379/0"})
    with pytest.raises(ConfigError) as refused:
        parse_config(config)
    message = refused.value.one_line()
    assert "redis://host" in message and "'http'" in message and "tier.internal" not in message
