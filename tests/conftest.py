"""Shared fixtures: the embedded reference service, started once per session, and its helpers.

Service tests talk real HTTP over loopback to it, never to mocks. The session's service has its
rate limits lifted so no test meets a 429 it did not ask for; a test that wants other settings
starts its own instance with `embedded(...)`.
"""

from __future__ import annotations

import contextlib
import copy
import multiprocessing.process
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest

from evalpipe.contract.tokens import count_questions, count_value
from evalpipe.service import EmbeddedService, ServiceSettings

API_KEY = "test-key"
LIFTED = {"rpm": 10_000_000, "tps": 10_000_000_000}  # far beyond what any test sends

QUESTIONS: dict[str, dict[str, Any]] = {
    "helpful": {
        "type": "noul",
        "instructions": "Does the review help a shopper decide?",
        "criteria": {"true": "specific details about the product", "false": "vague or empty"},
    },
    "sentiment": {
        "type": "choice",
        "instructions": "What is the overall sentiment of the review?",
        "criteria": {"positive": "praise and delight", "mixed": None, "negative": "complaints"},
    },
    "quality": {
        "type": "score",
        "instructions": "How well written is the review?",
        "criteria": ["poor", "fair", "good", "excellent"],
    },
}
STATE = "The jacket arrived quickly and fits well, but a button came loose after two days."


def run_config(config: dict[str, Any], **options: Any) -> dict[str, Any]:
    """Run a job config (a dict) the way `evalpipe run` does (`evalpipe.session.opened`:
    prepare, hold the output, contact the service, run), with quiet progress. Returns the
    summary."""
    from evalpipe.config import parse_config
    from evalpipe.engine import EventLog
    from evalpipe.session import opened

    with opened(parse_config(config), options.pop("log", None) or EventLog()) as session:
        return session.run(progress_interval=3600, **options).summary


def cli_run(config: Path, *options: str) -> Any:
    """`evalpipe run CONFIG` in this process (click's CliRunner), on the session's Ray; it must
    exit 0. For the rerun after a kill or a signal, whose output is what is checked: a process
    of its own would cost it 2 s of imports, a Ray connection and three new Ray workers."""
    from click.testing import CliRunner

    from evalpipe.cli.main import main

    args = ["run", str(config), "--progress-interval", "60", *options]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output[-3000:]
    return result


def billed_tokens(state: Any, questions: dict[str, Any]) -> int:
    """`usage.input_tokens` the embedded service bills for a request: the state plus every
    question (question keys are not counted)."""
    return count_value(state) + sum(count_questions(questions).values())


def auth(key: str = API_KEY) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


# The tests' own requests to the services they start (a row's answer asked directly, a metrics
# page scraped): one client for the worker's session. `httpx.post`, a client a call, reads the
# CA bundle into a new SSL context each time (~25 ms of CPU), even for an http:// address.
CLIENT = httpx.Client(timeout=60)


def evaluate_body(**changes: Any) -> dict[str, Any]:
    """A valid evaluate request (a fresh copy), with top-level fields replaced by `changes`."""
    body = {"state": STATE, "model": "model-latest", "questions": copy.deepcopy(QUESTIONS)}
    body.update(changes)
    return body


@contextlib.contextmanager
def embedded(
    mode: Literal["thread", "process"] = "thread", **options: Any
) -> Iterator[EmbeddedService]:
    """A service instance of the test's own (thread mode, or `mode="process"`: a process of
    its own) with these settings."""
    settings = ServiceSettings(api_key=API_KEY, **{**LIFTED, **options})
    with EmbeddedService(settings, mode=mode) as service:
        yield service


@pytest.fixture(scope="module", autouse=True)
def _module_answer_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Jobs run by module fixtures get an answer cache of the module's own (the default one is
    under XDG_CACHE_HOME): they never find answers an earlier module or session left."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
        yield


@pytest.fixture(autouse=True)
def _answer_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each test's jobs (and the `evalpipe` processes it starts) an answer cache of its own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))


# The session's Ray is a head node started through `ray.cluster_utils.Cluster`, which takes
# the node's own parameters (`ray.init` has no switch for these): without the autoscaler's
# monitor, the log monitor (the drivers here read no worker's output: `log_to_driver=False`)
# and the dashboard. Measured 2026-11-29 (a Ray started, 60 actors made and killed, 30 s idle,
# stopped): 2.2 CPU-s to start instead of 2.8, 0.015 CPU-s a second idle instead of 0.037 (the
# log monitor reads every worker's log file, more each actor), 0.3 s to stop instead of 1.3.
SHARED_RAY_NODE = {
    "num_cpus": 2,
    "object_store_memory": 2 * 1024**3,  # the Cluster's default, 150 MiB, is for tiny tests
    "include_dashboard": False,
    "include_log_monitor": False,
    "no_monitor": True,
}


def _start_shared_ray() -> None:
    import ray
    from ray._common.utils import reset_ray_address
    from ray.cluster_utils import Cluster

    os.environ["EVAL_API_KEY"] = API_KEY
    cluster = Cluster(initialize_head=True, head_node_args=SHARED_RAY_NODE)
    reset_ray_address()  # the file a bare `ray.init()` would join: this Ray is not for others
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    _SHARED_RAY["cluster"] = cluster


def _stop_shared_ray() -> None:
    import ray

    ray.shutdown()
    cluster = _SHARED_RAY.pop("cluster", None)
    if cluster is not None:
        cluster.shutdown()


_SHARED_RAY: dict[str, Any] = {"up": False}  # the session's Ray was started (and is to come
# back after own_ray), and its Cluster


@pytest.fixture(scope="session")
def ray_runtime() -> Iterator[None]:
    """One Ray for the session (per xdist worker: `num_cpus=2`), a head node of its own (never
    a `ray start` cluster that happens to run on the machine); jobs run in this process join it.
    Its workers read the key from the environment they inherit from this process. Starting a
    Ray costs about 5 s here, so modules share it rather than start one each."""
    import ray

    os.environ["EVAL_API_KEY"] = API_KEY
    if not ray.is_initialized():
        _start_shared_ray()
    _SHARED_RAY["up"] = True
    yield
    _SHARED_RAY["up"] = False
    _stop_shared_ray()


@pytest.fixture(scope="module")
def ray_address(ray_runtime: None) -> str:
    """The session's Ray, by its address: an `evalpipe run` subprocess joins it there
    (`--ray-address`) instead of starting a Ray of its own, which costs it about 5 s. Asked
    per module: a module with a Ray of its own (`own_ray`) starts the session's again after
    it, at another address."""
    import ray

    return str(ray.get_runtime_context().gcs_address)


@pytest.fixture(autouse=True)
def _no_budget_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test on a Ray, its account Budgets end: each service a test starts is another
    account, whose Budget would otherwise live on (idle for 5 minutes) as one more process of
    the session's Ray; dozens of them slow the suite and make the raylet warn on stderr. The
    Budget of a module's `shared_service` is spared: it ends with that service."""
    yield
    if request.node.get_closest_marker("ray") is None:
        return
    _end_budgets(lambda name: name not in _KEPT_BUDGETS)


def _end_budgets(which: Any) -> None:
    """End the account Budgets on the session's Ray (if up) whose names `which` takes."""
    import ray

    if not ray.is_initialized():
        return
    from evalpipe.limits.account import NAMESPACE

    for actor in ray.util.list_named_actors(all_namespaces=True):
        if actor["namespace"] == NAMESPACE and which(actor["name"]):
            with contextlib.suppress(Exception):  # ended meanwhile
                ray.kill(ray.get_actor(actor["name"], namespace=NAMESPACE))


_KEPT_BUDGETS: set[str] = set()  # the account Budgets of the `shared_service`s now open


@contextlib.contextmanager
def shared_service(**options: Any) -> Iterator[EmbeddedService]:
    """A service (as `embedded`) that tests share, in a module or session fixture: their jobs
    share its account's Budget, made once (a Ray actor process, ~0.5 CPU-s) instead of once
    a test; it ends with the service. Tests count what they sent `Since` they began."""
    from evalpipe.limits.account import account_name

    with embedded(**options) as service:
        name = account_name(service.base_url, API_KEY)
        _KEPT_BUDGETS.add(name)
        try:
            yield service
        finally:
            _KEPT_BUDGETS.discard(name)
            _end_budgets(lambda found: found == name)


class Since:
    """A service's counters from now on (a `shared_service`'s, for one test): the counts of
    requests, tokens, responses and faults less what they were, the rest as it is now (limits,
    what is in flight); and its URL."""

    COUNTS = ("requests_accepted", "requests_answered", "tokens_accepted", "rate_limited",
              "overloaded", "faults_injected", "responses", "faults")  # fmt: skip

    def __init__(self, service: EmbeddedService) -> None:
        self.service, self.base_url = service, service.base_url
        self._before = service.stats()

    def stats(self) -> dict[str, Any]:
        now = self.service.stats()
        for key in self.COUNTS:
            value, before = now[key], self._before[key]
            if isinstance(value, dict):
                now[key] = {k: n - before.get(k, 0) for k, n in value.items()
                            if n != before.get(k, 0)}  # fmt: skip
            else:
                now[key] = value - before
        return now


@contextlib.contextmanager
def own_ray() -> Iterator[None]:
    """For a module that needs a Ray of its own (a cluster, a spy in every worker): the
    session's Ray stops meanwhile and comes back afterwards if a module had started it."""
    import ray

    if ray.is_initialized():
        _stop_shared_ray()
    try:
        yield
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if _SHARED_RAY["up"]:
            _start_shared_ray()


# --------------------------------------------------------------------------- S3 and Chromium

S3_BUCKETS = ("corpora", "tables")  # shared by the session's modules: each uses its own prefixes
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _s3_environment(endpoint: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "test-access-key",
        "AWS_SECRET_ACCESS_KEY": "test-secret-key",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",  # no instance-role lookups off this machine
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    }


@contextlib.contextmanager
def _s3_env(endpoint: str) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        for name, value in _s3_environment(endpoint).items():
            patch.setenv(name, value)
        patch.delenv("AWS_PROFILE", raising=False)
        yield


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """moto's S3 server on loopback (`moto[server]`, a thread), started once for the session,
    with the buckets `S3_BUCKETS`; its URL."""
    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per S3 request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    with _s3_env(endpoint):
        client = boto3.client("s3")
        for bucket in S3_BUCKETS:
            client.create_bucket(Bucket=bucket)
    yield endpoint
    server.stop()


@pytest.fixture(scope="module")
def s3(s3_endpoint: str) -> Iterator[Any]:
    """The session's S3 server, named by AWS_ENDPOINT_URL as an S3-compatible store is (with
    the other standard AWS variables, for this module only); yields a pyarrow filesystem on it
    for the tests' own reads and writes."""
    import pyarrow.fs as pafs

    with _s3_env(s3_endpoint):
        yield pafs.FileSystem.from_uri("s3://corpora")[0]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium (Debian's, `make chromium`; Playwright never downloads one here), one
    per module: Playwright's sync API runs an event loop of its own, which must not outlive the
    module into the asyncio tests of another."""
    from playwright.sync_api import sync_playwright

    assert CHROMIUM.exists(), "Chromium is missing: `make chromium` installs Debian's package"
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def open_page(browser: Any, url: str) -> tuple[Any, list[str]]:
    """A new page of `browser` at `url`, and the list its console errors and page errors go
    to (close the page when done)."""
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(url, wait_until="load")
    return page, errors


# --------------------------------------------------------------------------- Prometheus

PROMETHEUS = Path("/usr/bin/prometheus")
PUSHGATEWAY = Path("/usr/bin/prometheus-pushgateway")
SCRAPE_SECONDS = 1  # how often the session's Prometheus scrapes the session's Pushgateway


def free_port() -> int:
    """A TCP port free on loopback now."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _started(argv: list[str], ready: str, log: Path) -> subprocess.Popen[bytes]:
    """A server process writing to `log`, once `ready` (a URL) answers 200; an error with the
    end of its log if it exits first."""
    import time

    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{argv[0]} exited: {log.read_text()[-2000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(ready, timeout=1).status_code == 200:
                return process
        time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"{argv[0]} did not answer {ready}")


def _ended(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="session")
def pushgateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Debian's Prometheus Pushgateway (`make prometheus`) on a free loopback port, started once
    per session, with a persistence file of its own (by default it would keep, and show, what
    earlier runs pushed to /var/lib/prometheus/pushgateway.data); its URL."""
    assert PUSHGATEWAY.exists(), "the Pushgateway is missing: `make prometheus` installs it"
    port = free_port()
    home = tmp_path_factory.mktemp("pushgateway")
    process = _started(
        [str(PUSHGATEWAY), f"--web.listen-address=127.0.0.1:{port}",
         f"--persistence.file={home / 'metrics.data'}"],
        f"http://127.0.0.1:{port}/-/ready", home / "log",
    )  # fmt: skip
    yield f"http://127.0.0.1:{port}"
    _ended(process)


@pytest.fixture(scope="session")
def prometheus(pushgateway: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Debian's Prometheus on a free loopback port, started once per session, scraping the
    session's Pushgateway every `SCRAPE_SECONDS` (keeping the pushed `job` labels); its URL."""
    assert PROMETHEUS.exists(), "Prometheus is missing: `make prometheus` installs it"
    home = tmp_path_factory.mktemp("prometheus")
    target = pushgateway.removeprefix("http://")
    (home / "prometheus.yml").write_text(
        f"global: {{scrape_interval: {SCRAPE_SECONDS}s, evaluation_interval: 1s}}\n"
        "scrape_configs:\n"
        f"  - {{job_name: pushgateway, honor_labels: true, "
        f"static_configs: [{{targets: ['{target}']}}]}}\n"
    )
    port = free_port()
    process = _started(
        [str(PROMETHEUS), f"--config.file={home / 'prometheus.yml'}",
         f"--storage.tsdb.path={home / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
        f"http://127.0.0.1:{port}/-/ready", home / "log",
    )  # fmt: skip
    yield f"http://127.0.0.1:{port}"
    _ended(process)


# --------------------------------------------------------------------------- Redis

REDIS_SERVER = Path("/usr/bin/redis-server")


class Redis:
    """A Debian redis-server (`make redis`) on a free loopback port, in a folder of its own,
    saving nothing; `stop` kills it (as a tier lost mid-run), `start` brings it back, empty."""

    def __init__(self, home: Path, password: str | None = None, *options: str) -> None:
        self.home, self.password, self.options = home, password, options
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Redis:
        import time

        import redis

        assert REDIS_SERVER.exists(), "redis-server is missing: `make redis` installs it"
        argv = [str(REDIS_SERVER), *f"--port {self.port} --bind 127.0.0.1".split(), "--save",
                "", "--appendonly", "no", "--dir", str(self.home), *self.options]  # fmt: skip
        if self.password is not None:
            argv += ["--requirepass", self.password]
        with (self.home / "log").open("ab") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        client = redis.Redis(port=self.port, password=self.password, socket_connect_timeout=1)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited: {(self.home / 'log').read_text()}")
            with contextlib.suppress(redis.ConnectionError):
                client.ping()
                client.close()
                return self
            time.sleep(0.05)
        raise RuntimeError("redis-server did not answer")  # fmt: skip

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def client(self) -> Any:
        import redis

        return redis.Redis(port=self.port, password=self.password)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Redis]:
    """The session's redis-server (no password: Ray workers of the session's Ray would not
    know one), started once; tests keep apart by their accounts' keys (each its own API key)."""
    server = Redis(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


# --------------------------------------------------------------------------- PostgreSQL

POSTGRES_PASSWORD = "catalog-password"  # the tests' own server; given to clients as PGPASSWORD


def _postgres_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    assert found, "PostgreSQL is missing: `make postgres` installs Debian's package"
    return found[-1].parent


@pytest.fixture(scope="session")
def postgres() -> Iterator[str]:
    """Debian's PostgreSQL (`make postgres`: initdb, pg_ctl) in a temporary folder, on a free
    loopback port, started once per session, as the `postgres` user when this is root (the
    server refuses root); a password for TCP (scram), given to clients in PGPASSWORD. Yields
    the URL of its database `postgres` (user `evalpipe`, no password in it)."""
    import pwd
    import shutil
    import tempfile
    import time

    bin_dir = _postgres_bin()
    home = Path(tempfile.mkdtemp(prefix="evalpipe-pg-"))
    (home / "pw").write_text(POSTGRES_PASSWORD)
    run_as: list[str] = []
    if os.geteuid() == 0:
        account = pwd.getpwnam("postgres")
        for path in (home, home / "pw"):
            os.chown(path, account.pw_uid, account.pw_gid)
        run_as = ["runuser", "-u", "postgres", "--"]
    data, port = home / "data", free_port()
    subprocess.run(
        [*run_as, str(bin_dir / "initdb"), "-D", str(data), "-U", "evalpipe", "--pwfile",
         str(home / "pw"), "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8"],
        check=True, capture_output=True,
    )  # fmt: skip
    options = f"-p {port} -k {home} -c listen_addresses=127.0.0.1 -c fsync=off"
    ctl = [*run_as, str(bin_dir / "pg_ctl"), "-D", str(data)]
    subprocess.run([*ctl, "-o", options, "-l", str(home / "log"), "-w", "start"], check=True,
                   capture_output=True)  # fmt: skip
    deadline = time.monotonic() + 30
    while not (home / f".s.PGSQL.{port}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PGPASSWORD", POSTGRES_PASSWORD)
        yield f"postgresql+psycopg2://evalpipe@127.0.0.1:{port}/postgres"
    subprocess.run([*ctl, "-m", "immediate", "stop"], check=False, capture_output=True)
    shutil.rmtree(home, ignore_errors=True)


# --------------------------------------------------------------------------- test tiers

# Fixtures that start processes: a test that uses one is in that tier (`make check` skips them).
TIER_OF_FIXTURE = {
    "ray_runtime": "ray",
    "ray_address": "ray",
    "cluster": "ray",
    "browser": "browser",
    "s3": "subprocess",
    "s3_endpoint": "subprocess",
    "slow_service": "subprocess",
    "pushgateway": "subprocess",
    "prometheus": "subprocess",
    "redis_server": "subprocess",
    "postgres": "subprocess",
}
TIERS = ("ray", "browser", "subprocess")


# The modules that take longest, longest first: their seconds on `make test`'s two workers
# (2026-11-29, `--durations=0`: 35, 32, 29, 29, 28, 18, 17, 17, 15, 15, 15, 15, 13, 12, 12, 12,
# 10, 10, 10, 9, 9, 8, 8, 8, 7, 7, 7; each of the rest under 7), the `patient` ones among them
# since run first in the process beside (the Makefile); the other modules follow in the usual
# order. Ahead of them the modules with a Ray of their own (`own_ray`; test_cluster now,
# test_secrets watches a run's own Ray instead), each handed out first to a worker: it runs
# before that worker started the session's Ray, which then never has to stop and start again
# for it (about 5 CPU-s and 4 s of wall a time, 2026-11-29). test_upkeep, left out of an
# older list, ran its 10 s of tests last on one worker, which ended 7 s after the other.
OWN_RAY_MODULES = ("test_cluster",)
LONGEST_MODULES = (
    *OWN_RAY_MODULES,
    "test_faults", "test_kernel", "test_scheduled", "test_tier_stalls", "test_airflow",
    "test_delta", "test_tier_hosts", "test_iceberg", "test_packing", "test_notebooks",
    "test_docs_examples", "test_api_interrupt", "test_secrets", "test_account", "test_resume",
    "test_hostpace", "test_secret_sinks", "test_upkeep", "test_objectstore", "test_api_progress",
    "test_observe", "test_browse_page", "test_api", "test_judge_job", "test_report_store",
    "test_first_contact", "test_docs",
)  # fmt: skip


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the xdist_group marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for name in getattr(item, "fixturenames", ()):
            if name in TIER_OF_FIXTURE:
                item.add_marker(TIER_OF_FIXTURE[name])
    _longest_modules_first(items)
    _module_fixtures_on_one_worker(items)
    for item in items:
        if item.get_closest_marker("patient") and item.get_closest_marker("browser"):
            raise pytest.UsageError(
                f"{item.nodeid}: a browser test is not `patient`: `make test` runs those at the "
                "lowest CPU priority, where a page's load can outwait Playwright's timeouts"
            )


def _longest_modules_first(items: list[pytest.Item]) -> None:
    """The long modules first, each module's tests together and in order. `make test` hands
    the tests out one at a time (`--dist loadgroup`), so the workers share the long scenarios
    from the start and the quick tests fill in at the end, instead of one worker running the
    last long ones while the others wait."""
    rank = {name: place for place, name in enumerate(LONGEST_MODULES)}
    items.sort(key=lambda item: rank.get(item.module.__name__, len(rank)))


# Module-scoped fixtures that cost next to nothing to make twice: an address, AWS variables, a
# service process.
CHEAP_MODULE_FIXTURES = frozenset({"ray_address", "s3", "slow_service"})


def _costly(fixture: str) -> bool:
    return not fixture.startswith("_") and fixture not in CHEAP_MODULE_FIXTURES


def _module_fixtures_on_one_worker(items: list[pytest.Item]) -> None:
    """A module whose tests share a costly module-scoped fixture (a 3-node cluster, a finished
    job, a browser, the docs site) runs on one worker, so the fixture is made once, not once
    per worker. The autouse ones (named `_...`, as every autouse fixture here) and those in
    `CHEAP_MODULE_FIXTURES` do not count."""
    shared = set()
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.items() if info is not None else ()
        if any(d and d[-1].scope == "module" and _costly(name) for name, d in defs):
            shared.add(item.module.__name__)
    for item in items:
        if item.module.__name__ in shared:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


def pytest_collection_finish(session: pytest.Session) -> None:
    """On an xdist worker under `--dist loadgroup`: a test in a group must carry the group in
    its node id (xdist's side channel to its scheduler), else the groups silently stop working
    and costly module fixtures are made on every worker (pytest 9.2 did this: pyproject)."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    for item in session.items:
        if item.get_closest_marker("xdist_group") and "@" not in item.nodeid:
            raise pytest.UsageError(
                f"{item.nodeid}: xdist's loadgroup lost its group (pytest-xdist issue 1386); "
                "use a pytest that keeps it (pyproject pins it)"
            )


class UnmarkedProcess(AssertionError):
    """A test outside the ray/browser/subprocess tiers started a process."""


@pytest.fixture(autouse=True)
def _process_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test that starts a process (a subprocess, a multiprocessing child, Ray) must carry one
    of the tier markers, so that `make check` (no Ray, no browser, no subprocess) stays quick:
    an unmarked one fails here, in every run, the day it is written."""
    if any(request.node.get_closest_marker(tier) for tier in TIERS):
        return

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise UnmarkedProcess(
            f"{request.node.nodeid} starts a process: mark it with one of {', '.join(TIERS)}"
        )

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse)


def job_config(tmp: Path, base_url: str, **changes: Any) -> dict[str, Any]:
    """A job config (a dict) on `tmp/in.parquet` (id, text) into `tmp/out` against `base_url`,
    with limits far above what a test sends and quick retries; a section given in `changes`
    is merged into the default one, any other value replaces it."""
    config: dict[str, Any] = {
        "input": {"path": str(tmp / "in.parquet"), "id_column": "id", "state": "text"},
        "output": {"path": str(tmp / "out")},
        "service": {"base_url": base_url, "api_key_env": "EVAL_API_KEY"},
        "model": "model-1.13.0",
        "limits": {"requests_per_minute": 60_000, "tokens_per_second": 10_000_000},
        "retries": {"base_delay": 0.02, "max_delay": 0.3},
        "questions": QUESTIONS,
    }
    for key, value in changes.items():
        merge = isinstance(value, dict) and key != "questions"
        config[key] = {**config.get(key, {}), **value} if merge else value
    return config


@pytest.fixture(scope="session")
def service() -> Iterator[EmbeddedService]:
    """The session's embedded service: thread mode, key `test-key`, limits lifted; the jobs
    of the session's tests on it share its account's Budget (`shared_service`). A test counts
    what it sent `Since` it began."""
    with shared_service() as started:
        yield started


@pytest.fixture(scope="session")
def http(service: EmbeddedService) -> Iterator[httpx.Client]:
    """An authenticated client of the session's service."""
    with httpx.Client(base_url=service.base_url, headers=auth(), timeout=30) as client:
        yield client
