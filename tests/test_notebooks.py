"""The notebooks run, top to bottom, on the output of a real job.

A small demo corpus (data/make_demo.py, 40 rows with its planted edge rows: blank texts, a
repeated text, one text over the context limit) is scored with configs/demo.yaml's questions by
`evalpipe run` (click's runner, in this process) on the embedded reference service; then every
notebook is executed with nbclient in a kernel of this interpreter, pointed at that job through
EVALPIPE_OUTPUT and EVALPIPE_INPUT. The explore notebook's figures are checked against the
job's rows read with pyarrow, and its charts against the report's (`evalpipe report` of the
same job). A committed notebook must hold no outputs.
"""

from __future__ import annotations

import contextlib
import re
import runpy
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import psutil
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner

from evalpipe.cli.main import main
from evalpipe.cli.report import write_report

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXPLORE = ROOT / "notebooks" / "explore_output.ipynb"
TUTORIAL = ROOT / "notebooks" / "tutorial.ipynb"
ROWS = 40

pytestmark = pytest.mark.subprocess  # each test starts a kernel, or a job on a Ray

# Appended to the explore notebook (in memory only): the figures it computed match the job.
CHECKS = """
import sys

assert sys.prefix == {prefix!r}, sys.prefix  # the kernel runs in the test's environment
assert id_col == "review_id"
assert sorted(q.kind for q in out.questions) == ["choice", "choice", "noul", "score"]
assert dict(zip(outcomes["outcome"], outcomes["rows"])) == {outcomes!r}
assert distribution["rows"].sum() == {answered}
assert cost["input_tokens"] == {tokens} and cost["usd"] > 0
assert coverage.row(0) == ({rows}, {rows}, {rows}, 0, 0)
print("checks passed")
"""
SVG = "image/svg+xml"
WIDGET = "application/vnd.jupyter.widget-view+json"


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory, ray_address: str) -> Iterator[dict[str, Path]]:
    """A finished job on a 40-row demo corpus: its input file and output directory. The run
    is `evalpipe run` in this process; it and the kernels' jobs use the session's Ray (a Ray
    of their own would cost 5 s each)."""
    tmp = tmp_path_factory.mktemp("notebook-job")
    corpus, out = tmp / "reviews.parquet", tmp / "out"
    make_demo = runpy.run_path(str(ROOT / "data" / "make_demo.py"), run_name="make_demo")["main"]
    make_demo(["--rows", str(ROWS), "--out", str(corpus)])  # in this process: no interpreter
    config = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text(encoding="utf-8"))
    config["input"]["path"] = str(corpus)
    config["output"]["path"] = str(out)
    config["limits"] = {"requests_per_minute": 60_000, "tokens_per_second": 10_000_000}
    config_path = tmp / "job.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    with contextlib.chdir(tmp):  # the job runs in this process, on the session's Ray
        done = CliRunner().invoke(main, ["run", str(config_path), "--progress-interval", "60"])
    assert done.exit_code == 0, done.output[-3000:]
    assert "evalpipe summary" in done.stdout
    yield {"input": corpus, "output": out}


def _figures(out: Path) -> dict[str, object]:
    """What the notebook should find, read with pyarrow rather than polars."""
    table = pq.read_table(out).to_pylist()  # pyarrow skips _manifest.json: metadata, not rows
    outcomes: dict[str, int] = {}
    for row in table:
        outcome = row["_error_type"] or "answered"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return {
        "rows": len(table),
        "outcomes": outcomes,
        "answered": outcomes.get("answered", 0),
        "tokens": sum(row["_input_tokens"] for row in table),
    }


def _execute(path: Path, job: dict[str, Path], cells: tuple[str, ...] = ()) -> Any:
    """The notebook at `path`, executed on `job` with `cells` appended (in memory only)."""
    import ray
    from nbclient import NotebookClient  # here: jupyter_client costs every worker's collection

    nb = nbformat.read(path, as_version=4)
    nb.cells.extend(nbformat.v4.new_code_cell(cell) for cell in cells)
    client = NotebookClient(
        nb,
        timeout=60,
        kernel_name="python3",
        resources={"metadata": {"path": str(ROOT / "notebooks")}},
    )
    # The kernel inherits this environment; jupyter_client starts kernelspec 'python3'
    # with sys.executable, so the kernel sees this venv's packages.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EVALPIPE_OUTPUT", str(job["output"]))
        patch.setenv("EVALPIPE_INPUT", str(job["input"]))
        patch.setenv("RAY_ADDRESS", ray.get_runtime_context().gcs_address)  # `ep.score` joins
        client.execute()  # raises CellExecutionError, naming the cell, if any cell fails
    return nb


@pytest.fixture(scope="module")
def explored(job: dict[str, Path]) -> Any:
    """The explore notebook, executed on the job with the CHECKS cell appended."""
    figures = _figures(job["output"])
    assert figures["rows"] == ROWS
    assert {"invalid_state", "context_limit"} <= set(figures["outcomes"])  # planted rows
    return _execute(EXPLORE, job, (CHECKS.format(prefix=sys.prefix, **figures),))


@pytest.fixture(scope="module")
def tutorial(job: dict[str, Path]) -> Any:
    """The tutorial, executed once on the job with the PROGRESS_CELLS and the KEPT_CELL
    appended (a run of the tutorial scores the demo corpus: 10-15 s)."""
    return _execute(TUTORIAL, job, (*PROGRESS_CELLS, KEPT_CELL))


def _titles(svgs: list[str]) -> list[str]:
    """Each chart's first title (a concatenated chart has one per part), as vl-convert drew it."""
    pattern = re.compile(r"role-title-text[^>]*>\s*<text[^>]*>([^<]*)</text>")
    return [pattern.search(svg).group(1) for svg in svgs]  # type: ignore[union-attr]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_without_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name}: clear the outputs before committing"
            assert cell.execution_count is None, f"{path.name}: clear the execution counts"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_runs_on_a_real_job(
    path: Path, job: dict[str, Path], request: pytest.FixtureRequest
) -> None:
    executed = {EXPLORE: "explored", TUTORIAL: "tutorial"}  # shared with the tests below
    nb = request.getfixturevalue(executed[path]) if path in executed else _execute(path, job)
    ran = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert all(cell.execution_count for cell in ran), "a code cell did not run"
    if path == EXPLORE:
        printed = "".join(o.get("text", "") for o in ran[-1].outputs)
        assert printed == "checks passed\n"


@pytest.mark.timeout(180)
def test_the_notebook_draws_the_reports_charts(
    explored: Any, job: dict[str, Path], tmp_path: Path
) -> None:
    outputs = [o for cell in explored.cells for o in cell.get("outputs", [])]
    drawn = [o["data"][SVG] for o in outputs if SVG in o.get("data", {})]
    html = write_report(job["output"], job["input"], tmp_path / "report.html").read_text("utf-8")
    report = re.findall(r'<figure class="chart" data-chart="[^"]+">\s*(<svg.*?</svg>)', html, re.S)
    assert len(report) >= 14  # outcomes, 4 questions' charts, cost, models, runs, coverage
    assert _titles(drawn) == _titles(report)


# Appended to the tutorial (in memory only): each display on fresh states (so requests are
# sent and the display draws), in the kernel's running loop, its stderr a notebook's stream.
def _scored_with(shown: object) -> str:
    return f"""
fresh = reviews.head(20).with_columns(pl.col("text") + " ({shown})")
ep.score(fresh, id="review_id", state="text", questions=questions, service=service,
         progress={shown!r})
"""


CALLBACK_CELL = """
seen = []
fresh = reviews.head(20).with_columns(pl.col("text") + " (callback)")
ep.score(fresh, id="review_id", state="text", questions=questions, service=service,
         progress=seen.append)
print("final", seen[-1].final, seen[-1].rows_done, seen[-1].rows_total)
"""
PROGRESS_CELLS = (*(_scored_with(shown) for shown in ("rich", "tqdm", True)), CALLBACK_CELL)
# Appended last: the embedded services the kernel keeps once every call ran.
KEPT_CELL = """
from evalpipe.service import kept_services
print("kept", *(service.pid for service in kept_services()))
"""


@pytest.mark.timeout(300)
def test_progress_renders_in_a_kernel(tutorial: Any) -> None:
    """rich and tqdm redraw one line; the default is a widget (ipywidgets is installed here),
    never a new line every few seconds; no cell warns of a library the user did not ask for."""
    rich, tqdm, default, callback = tutorial.cells[-len(PROGRESS_CELLS) - 1 : -1]
    for cell in (rich, tqdm, default, callback):
        kinds = {o["output_type"] for o in cell.outputs}
        assert "error" not in kinds  # no traceback
        text = "".join(o.get("text", "") for o in cell.outputs)
        assert "ipywidgets" not in text and "TqdmWarning" not in text, text
    for cell in (rich, tqdm, callback):
        assert "display_data" not in {o["output_type"] for o in cell.outputs}

    def stderr(cell: Any) -> str:
        return "".join(o["text"] for o in cell.outputs if o.get("name") == "stderr")

    assert "\r" in stderr(rich) and "/20" in stderr(rich)  # one line redrawn in place
    assert "\r" in stderr(tqdm) and "row" in stderr(tqdm)
    widgets = [o for o in default.outputs if WIDGET in o.get("data", {})]
    assert len(widgets) == 1 and stderr(default) == ""  # a widget, updated in place
    assert "".join(o["text"] for o in callback.outputs) == "final True 20 20\n"


def test_the_tutorials_calls_find_one_embedded_service_that_ends_with_the_kernel(
    tutorial: Any,
) -> None:
    """Every call of the tutorial and of the cells appended to it, on one
    `ep.Service("embedded", ...)`, found the service the first call started (one account, one
    Budget), and that service ended with the kernel."""
    printed = "".join(o.get("text", "") for o in tutorial.cells[-1].outputs).split()
    assert printed[0] == "kept" and len(printed) == 2, printed
    pid = int(printed[1])
    end = time.monotonic() + 30  # a guard against a hang, not a speed requirement
    while _running(pid):
        assert time.monotonic() < end, f"the kernel's service {pid} outlived it"
        time.sleep(0.05)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
