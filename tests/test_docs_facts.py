"""What the docs say that the code holds, checked against the code, without building the site.

- every fact a page names (`<!-- fact: NAME -->...<!-- /fact -->`, docs/hooks/facts.py) shows
  the code's value on the repository's web view too;
- every Kubernetes manifest in the docs (a YAML block of a page, or a `.yaml` file under docs/)
  is valid against the Kubernetes API's schema, and a Job's `podFailurePolicy` fails it on
  exactly the exit codes no retry mends;
- every list of exit codes that the docs, the README or the package's docstrings give beside a
  retry is the code's list (`NO_RETRY_EXIT_CODES`) or the rest of the codes;
- every `evalpipe.x` a page names resolves: a module, a name in it, or a metadata key the code
  writes;
- the JSON log's events and the connections evalpipe makes are all named by the pages.
"""

from __future__ import annotations

import ast
import functools
import importlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalpipe.errors import NO_RETRY_EXIT_CODES, exit_codes, retry_mends
from sourcetree import parsed  # each source file parsed once, not once per check

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pipeline" / "evalpipe"
sys.path.insert(0, str(ROOT / "docs" / "hooks"))
import facts  # noqa: E402 - docs/hooks/facts.py, the hook that writes the facts

pytestmark = pytest.mark.patient  # `make test` runs it beside the rest (the Makefile)

PAGES = facts.pages()
# KubeRay's resources: custom resources, whose schema the Kubernetes API's does not hold.
CUSTOM_KINDS = {"RayJob", "RayCluster", "RayService"}
# The oldest Kubernetes with podFailurePolicy and CronJob timeZone as GA fields, the newest
# whose schema kubernetes-validate bundles (as tests/test_schedulers_k8s.py).
KUBERNETES = ("1.31.0", "1.37.0")


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# --------------------------------------------------------------------------- facts


def test_every_fact_on_every_page_is_the_codes_value() -> None:
    named = 0
    stale = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        named += len(facts.found(text))
        if facts.written(text) != text:
            stale += [f"{rel(page)}: {n}" for n, shown in facts.found(text)
                      if facts.written(f"<!-- fact: {n} -->{shown}<!-- /fact -->")
                      != f"<!-- fact: {n} -->{shown}<!-- /fact -->"]  # fmt: skip
    assert named > 10  # the pages use them
    assert not stale, "facts that differ from the code (run `python docs/hooks/facts.py`):\n" + (
        "\n".join(stale)
    )


def test_an_unknown_fact_is_refused() -> None:
    with pytest.raises(LookupError):
        facts.value("no-such-fact")
    with pytest.raises(LookupError):
        facts.value("exit-NoSuchError")
    assert facts.value("exit-CostCapReached") == "6"


def test_the_json_events_are_the_ones_the_code_emits() -> None:
    names = facts.events()
    assert {"start", "progress", "warning", "error", "stopped", "summary", "canary"} <= set(names)
    for name in names:
        assert f"`{name}`" in facts.json_events()


# --------------------------------------------------------------------------- manifests


def yaml_texts() -> Iterator[tuple[str, str]]:
    """(where, text) for every YAML file under docs/ and every ```yaml block of a page."""
    for path in sorted((ROOT / "docs").rglob("*.yaml")):
        if path.name != "openapi.yaml":
            yield rel(path), path.read_text(encoding="utf-8")
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        start = None
        for number, line in enumerate(lines):
            if start is None and re.match(r"^\s*```ya?ml\s*$", line):
                start = number + 1
            elif start is not None and line.strip().startswith("```"):
                indent = len(lines[start - 1]) - len(lines[start - 1].lstrip())
                body = "\n".join(x[indent:] for x in lines[start:number])
                yield f"{rel(page)}:{start}", body
                start = None


def manifests() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for where, text in yaml_texts():
        if "apiVersion:" not in text:
            continue
        for doc in yaml.safe_load_all(text):
            if isinstance(doc, dict) and "apiVersion" in doc and "kind" in doc:
                found.append((f"{where} ({doc['kind']})", doc))
    return found


MANIFESTS = manifests()


def test_the_docs_have_the_manifests_of_the_deployment_pages() -> None:
    kinds = [doc["kind"] for _, doc in MANIFESTS]
    assert kinds.count("CronJob") >= 2 and "Deployment" in kinds and "Service" in kinds


@pytest.mark.parametrize("version", KUBERNETES)
@pytest.mark.parametrize(("where", "doc"), MANIFESTS, ids=[w for w, _ in MANIFESTS])
def test_every_manifest_is_valid_against_the_kubernetes_schema(
    where: str, doc: dict[str, Any], version: str
) -> None:
    import kubernetes_validate

    if doc["kind"] in CUSTOM_KINDS:
        pytest.skip(f"{doc['kind']} is a custom resource (KubeRay): no schema in the API's")
    kubernetes_validate.validate(doc, version, strict=True)


def job_specs(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if doc["kind"] == "CronJob":
        yield doc["spec"]["jobTemplate"]["spec"]
    elif doc["kind"] == "Job":
        yield doc["spec"]


@pytest.mark.parametrize(
    ("where", "doc"),
    [(w, d) for w, d in MANIFESTS if d["kind"] in ("CronJob", "Job")],
    ids=[w for w, d in MANIFESTS if d["kind"] in ("CronJob", "Job")],
)
def test_every_job_fails_on_exactly_the_codes_no_retry_mends(where: str, doc: dict) -> None:
    for job in job_specs(doc):
        pod = job["template"]["spec"]
        assert pod["restartPolicy"] == "Never"
        rules = job.get("podFailurePolicy", {}).get("rules", [])
        [fail] = [r for r in rules if r["action"] == "FailJob"]
        assert fail["onExitCodes"]["operator"] == "In"
        assert set(fail["onExitCodes"]["values"]) == NO_RETRY_EXIT_CODES
        assert job["backoffLimit"] >= 1  # the other ends are retried
        [container] = pod["containers"]
        command = " ".join(container.get("command", []) + container.get("args", []))
        if "evalpipe run" in command:
            assert "date -u +%F" not in command, "the night from the pod's clock, not the Job's"
            assert "exec evalpipe run" in command  # SIGTERM reaches evalpipe


# --------------------------------------------------------------------------- exit-code lists

# A list of two or more exit codes: "2, 3, 4, 6 and 8", "2, 3 and 6", "[2, 3, 6]", "7, 143, 5, 1"
CODES = re.compile(r"(?<![\w.$/-])(\d{1,3}(?:(?:,\s*|\s+(?:and|or)\s+)\d{1,3})+)(?![\w.%:-])")
RETRY_WORDS = re.compile(r"retr(?:y|ies|ied)|FailJob|AirflowFailException|allow_retries", re.I)


def paragraphs() -> Iterator[tuple[str, str]]:
    """(where, text) for every paragraph of the pages (facts left out: they are the code's)
    and every docstring of the package."""
    for page in PAGES:
        text = re.sub(facts.FACT, "", page.read_text(encoding="utf-8"))
        for number, para in enumerate(re.split(r"\n\s*\n", text)):
            yield f"{rel(page)} paragraph {number}", para
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef):
                doc = ast.get_docstring(node)
                if doc:
                    for number, para in enumerate(re.split(r"\n\s*\n", doc)):
                        yield f"{rel(path)} {getattr(node, 'name', '')} {number}", para


def code_lists(text: str) -> Iterator[set[int]]:
    for found in CODES.finditer(text):
        yield {int(n) for n in re.findall(r"\d+", found[1])}


def test_every_list_of_exit_codes_beside_a_retry_is_the_codes() -> None:
    every = {int(code) for code, _ in exit_codes()} - {0}
    retried = {code for code in every if retry_mends(code)}
    wrong = []
    seen = 0
    for where, text in paragraphs():
        if not RETRY_WORDS.search(text):
            continue
        for codes in code_lists(text):
            if not codes <= every:
                continue  # not exit codes (a count, a version)
            seen += 1
            if codes not in (NO_RETRY_EXIT_CODES, retried) and not codes <= retried:
                wrong.append(f"{where}: {sorted(codes)}")
    assert seen >= 1
    assert not wrong, (
        f"exit-code lists beside a retry that are not the code's ({sorted(NO_RETRY_EXIT_CODES)} "
        f"no retry mends; {sorted(retried)} retried): use a fact (docs/hooks/facts.py)\n"
        + "\n".join(wrong)
    )


@pytest.mark.parametrize(
    "text",
    [
        "exits 2, 3 and 6 with allow_retries=False",
        "FailJob on [2, 3, 6]",
        "2, 3  AirflowFailException",
    ],
)
def test_the_check_catches_a_short_list(text: str) -> None:
    codes = list(code_lists(text))
    assert codes and all(c != NO_RETRY_EXIT_CODES for c in codes)


# --------------------------------------------------------------------------- dotted names

# `evalpipe.x.y` as a name, not in a path (`.evalpipe.lock`, `/srv/evalpipe`) nor after a
# DataFrame (`pl.col("text").evalpipe.ask`).
DOTTED = re.compile(r"(?<![\w./)-])evalpipe(?:\.[A-Za-z_]\w*)+")


def dotted_names() -> list[tuple[str, str]]:
    found = {}
    for page in PAGES:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
            for name in DOTTED.findall(line):
                found.setdefault(name.rstrip("."), f"{rel(page)}:{number}")
    return sorted((name, where) for name, where in found.items())


@functools.cache  # asked by every name's test
def metadata_keys() -> frozenset[str]:
    """The `evalpipe.*` keys the package writes into Parquet and Delta metadata (the rooms that
    write outputs: a span's attribute `evalpipe.job` is not one)."""
    keys = set()
    for path in [
        p for room in ("output", "lake", "calibration") for p in (PACKAGE / room).rglob("*.py")
    ]:
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
                text = node.value.decode() if isinstance(node.value, bytes) else node.value
                keys |= set(re.findall(r"^evalpipe\.[a-z_]+$", text))
    return frozenset(keys)


def source_defines(module: str, name: str) -> bool:
    """Whether the module's source binds `name` at its top (a def, class, assignment or import,
    lazy ones under TYPE_CHECKING included): read, not imported (the scheduler extras)."""
    base = PACKAGE.joinpath(*module.split(".")[1:])
    path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    tree = parsed(path)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef):
            if node.name == name:
                return True
        elif isinstance(node, ast.Import | ast.ImportFrom):
            if any((a.asname or a.name.split(".")[0]) == name for a in node.names):
                return True
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
    return False


def resolves(name: str, keys: frozenset[str]) -> bool:
    if name in keys:
        return True
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        base = PACKAGE.joinpath(*parts[1:cut])
        if base.is_dir() or base.with_suffix(".py").is_file() or cut == 1:
            rest = parts[cut:]
            return not rest or source_defines(module, rest[0])
    return False


NAMES = dotted_names()


def test_the_pages_name_python_modules() -> None:
    assert len(NAMES) > 10


@pytest.mark.parametrize(("name", "where"), NAMES, ids=[n for n, _ in NAMES])
def test_every_evalpipe_name_a_page_gives_resolves(name: str, where: str) -> None:
    keys = metadata_keys()
    assert resolves(name, keys), f"{where}: {name} is not a module, a name nor a metadata key"
    if name in keys or name.split(".")[1] in ("airflow", "dagster"):
        return  # a metadata key; the schedulers' extras are `make test`'s only
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            found = getattr(found, attr)
        return


def test_a_name_that_is_gone_is_caught() -> None:
    assert not resolves("evalpipe.job", metadata_keys())
    assert resolves("evalpipe.limits.local", frozenset())
    assert resolves("evalpipe.tier.TierPace", frozenset())


# --------------------------------------------------------------------------- connections

# The network clients a Python package may use, and the words connections.md names each by.
NETWORK = {
    "aiohttp": "aiohttp",
    "httpx": "httpx",
    "requests": "requests",
    "urllib.request": "urllib",
    "http.client": "http.client",
    "redis": "redis-py",
    "deltalake": "deltalake",
    "openlineage": "openlineage-python",
    "opentelemetry.exporter": "OpenTelemetry exporters",
    "prometheus_client": "prometheus_client",
    "pyarrow.fs": "pyarrow",
    "ray": "Ray",
    "boto3": "boto3",
    "botocore": "botocore",
    "fsspec": "fsspec",
    "smtplib": "smtplib",
    "websockets": "websockets",
    "grpc": "grpc",
}


def imported_modules() -> set[str]:
    found = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return found


def test_every_network_client_the_package_uses_is_in_the_connections_page() -> None:
    page = (ROOT / "docs" / "reference" / "connections.md").read_text(encoding="utf-8")
    modules = imported_modules()
    used = {
        client
        for client in NETWORK
        for module in modules
        if module == client or module.startswith(client + ".")
    }
    assert {"httpx", "redis", "deltalake", "ray"} <= used
    missing = [f"{client} ({NETWORK[client]})" for client in sorted(used)
               if NETWORK[client] not in page]  # fmt: skip
    assert not missing, f"connections.md has no row for {missing}"
    assert "shared.url" in page


def test_the_architecture_page_names_every_make_target() -> None:
    page = (ROOT / "docs" / "explanation" / "architecture.md").read_text(encoding="utf-8")
    named = set(re.findall(r"^\| `make ([\w-]+)", page, re.MULTILINE))
    assert named == set(facts.make_targets()), "the make targets of architecture.md's table"
    assert "chromium" in facts.make_test_installs()


# --------------------------------------------------------------------------- job configs


def unknown_keys(model: type, data: Any, prefix: str = "") -> Iterator[str]:
    """The dotted keys of `data` that the config model `model` does not have."""
    from pydantic import BaseModel

    if not isinstance(data, dict):
        return
    for key, value in data.items():
        field = model.model_fields.get(key)
        if field is None:
            yield prefix + str(key)
            continue
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            yield from unknown_keys(sub, value, f"{prefix}{key}.")


def test_every_job_config_a_page_shows_has_only_keys_the_config_has() -> None:
    from evalpipe.config import JobConfig

    sections = set(JobConfig.model_fields)
    checked = 0
    wrong = []
    for where, text in yaml_texts():
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError:
            continue  # a fragment (a `--8<--` include, an elided block)
        if not isinstance(doc, dict) or "apiVersion" in doc or not set(doc) <= sections:
            continue
        checked += 1
        wrong += [f"{where}: {key}" for key in unknown_keys(JobConfig, doc)]
    assert checked >= 5
    assert not wrong, "keys no job config has:\n" + "\n".join(wrong)


def test_the_event_logs_docstring_names_every_event() -> None:
    doc = ast.get_docstring(ast.parse((PACKAGE / "engine" / "events.py").read_text()))
    assert doc is not None
    missing = [name for name in facts.events() if f"`{name}`" not in doc]
    assert not missing, f"evalpipe.engine.events' docstring does not name {missing}"


def config_key_known(path: str) -> bool:
    """Whether `a.b.c` is a key of the job config (below a mapping such as
    `output.partition`, any name is one)."""
    from pydantic import BaseModel

    from evalpipe.config import JobConfig

    model: Any = JobConfig
    for part in path.split("."):
        field = model.model_fields.get(part)
        if field is None:
            return False
        sub = field.annotation
        if not (isinstance(sub, type) and issubclass(sub, BaseModel)):
            return True
        model = sub
    return True


def test_every_set_override_a_page_gives_names_a_config_key() -> None:
    found = [
        (f"{rel(page)}", key)
        for page in PAGES
        for key in re.findall(r"--set[ =]['\"]?([a-z_][\w.]*)=", page.read_text(encoding="utf-8"))
    ]
    assert len(found) > 20
    wrong = [f"{where}: --set {key}=" for where, key in found if not config_key_known(key)]
    assert not wrong, "overrides of keys no job config has:\n" + "\n".join(wrong)
    assert not config_key_known("limits.no_such_key")


# The pages say that a scheduler retries a held output (the other run lets go): true once
# `OutputLocked` has an exit code of its own, outside NO_RETRY_EXIT_CODES.
def _held_output_code() -> int:
    from evalpipe.errors import OutputLocked

    return OutputLocked.exit_code


@pytest.mark.xfail(
    _held_output_code() in NO_RETRY_EXIT_CODES,
    reason="the held output shares exit 2 with a bad config until it has a code of its own",
    strict=True,
)
def test_a_held_output_is_retried_by_every_scheduler_as_the_pages_say() -> None:
    from evalpipe.errors import OutputLocked

    code = _held_output_code()
    assert code not in NO_RETRY_EXIT_CODES
    assert retry_mends(code, OutputLocked("held by pid 7 on host-a"))
    for _, doc in MANIFESTS:
        for job in job_specs(doc):
            rules = job.get("podFailurePolicy", {}).get("rules", [])
            assert all(code not in r["onExitCodes"]["values"] for r in rules if "onExitCodes" in r)


@pytest.mark.schedulers
@pytest.mark.subprocess  # importing Airflow starts one
def test_the_dag_of_airflow_with_redis_builds_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    page = (ROOT / "docs" / "how-to" / "airflow-redis.md").read_text(encoding="utf-8")
    found = re.search(r"```python\n(import pendulum.*?)```", page, re.DOTALL)
    assert found is not None
    namespace: dict[str, Any] = {}
    exec(compile(found[1], "airflow-redis.md", "exec"), namespace)
    dag = namespace["dag"]
    assert sorted(dag.task_dict) == ["score_chats", "score_reviews", "score_tickets"]
    task = dag.task_dict["score_reviews"]
    assert task.overrides == ["input.path=s3://corpora/reviews/dt={{ ds }}/"]
    assert task.retry_delay.total_seconds() > float(facts.lease_seconds())
    assert task.partition == {"dt": "{{ ds }}"}
