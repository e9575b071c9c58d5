"""The browser as a person uses it, in Debian's Chromium (Playwright, the shared `browser`
fixture): open, scroll, filter, sort, jump, open a row, compare two runs, label 100 rows with the
keyboard; and what it refuses: a request without the token, a state's HTML or script run.

The server is `ep.browse` (its own thread, loopback, a fresh token), once for the module, over
two runs written by the real sink and their corpus (tests/browsedata.py). Screenshots of each
mode are kept in out/ for a person to look at (docs/how-to/img/ holds small copies).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import polars as pl
import pytest
from click.testing import CliRunner

from browsedata import HOSTILE, HOSTILE_STATE, JSON_ID, ROWS, write_all
from conftest import open_page
from evalpipe.cli import main

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "out"
DRAWN = """() => {
  const body = document.querySelector('#grid tbody');
  return body && body.dataset.complete === '1' && body.querySelector('tr[data-pos]') !== null;
}"""
DONE = "() => document.querySelector('#l-progress').textContent.startsWith('queue done')"
NEXT = f"(was) => document.querySelector('#l-row').dataset.id !== was || ({DONE})()"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    import evalpipe as ep

    tmp = tmp_path_factory.mktemp("browse-page")
    data = write_all(tmp)
    labels = tmp / "labels.csv"
    browser = ep.browse(str(data["a"]), vs=str(data["b"]), labels=str(labels),
                        input=str(data["corpus"]), reviewer="ann")  # fmt: skip
    yield {"browser": browser, "labels": labels, **data}
    browser.stop()


@pytest.fixture(scope="module")
def tab(browser: Any, served: dict[str, Any]) -> Iterator[tuple[Any, list[str]]]:
    """One tab for the module's tests (a new one costs twice a page load in CPU), and the list
    its console and page errors go to."""
    page, errors = open_page(browser, served["browser"].url)
    yield page, errors
    page.close()


@pytest.fixture
def page(tab: tuple[Any, list[str]], served: dict[str, Any]) -> Iterator[Any]:
    """The page, loaded anew at the server's address: a fresh document (the app keeps its
    state in the address alone), with no error and no request elsewhere while the test ran."""
    page, errors = tab
    errors.clear()
    requests: list[str] = []

    def sent(request: Any) -> None:
        requests.append(request.url)

    page.on("request", sent)
    page.goto(served["browser"].url, wait_until="load")
    page.wait_for_function(DRAWN)
    yield page
    page.remove_listener("request", sent)
    assert errors == []
    base = served["browser"].base
    assert all(url.startswith(base) for url in requests), requests  # nothing from elsewhere


def rows_shown(page: Any) -> list[list[str]]:
    return page.eval_on_selector_all(
        "#grid tbody tr[data-pos]", "trs => trs.map(tr => [...tr.cells].map(td => td.textContent))"
    )


def table(served: dict[str, Any]) -> pl.DataFrame:
    return pl.read_parquet(sorted(Path(served["a"]).glob("part-*.parquet")))


def test_no_row_is_served_without_the_token(served: dict[str, Any]) -> None:
    base, token = served["browser"].base, served["browser"].token
    for path in ("/", "/api/meta", "/api/rows", "/api/row?pos=0", "/api/compare",
                 "/assets/app.js", f"/api/rows?token={token[:-1]}"):  # fmt: skip
        answer = httpx.get(base + path)
        assert answer.status_code == 403, path
        assert "doc_id" not in answer.text
    cookie = {"evalpipe-browse-token": token}
    label = {"id": 1, "question": "helpful", "answer": "yes"}
    answer = httpx.post(base + "/api/label", json=label, cookies=cookie)  # a cookie is not enough
    assert answer.status_code == 403
    assert not served["labels"].exists()
    good = httpx.get(f"{base}/api/rows?limit=1", headers={"X-Evalpipe-Token": token})
    assert good.status_code == 200 and good.json()["count"] == ROWS
    policy = good.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "script-src 'self'" in policy
    assert "unsafe-inline" not in policy


@pytest.mark.subprocess
def test_the_command_prints_the_address_and_stops_on_sigterm(served: dict[str, Any]) -> None:
    command = [sys.executable, "-m", "evalpipe.cli.main", "browse", str(served["a"])]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and "/?token=" in url
        base, token = url.split("/?token=")
        assert httpx.get(f"{base}/api/meta").status_code == 403
        meta = httpx.get(f"{base}/api/meta", headers={"X-Evalpipe-Token": token}).json()
        assert meta["total"] == ROWS and meta["id_column"] == "doc_id"
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def test_the_first_rows_then_a_scroll_to_the_end(page: Any, served: dict[str, Any]) -> None:
    expected = table(served)
    shown = rows_shown(page)
    assert shown[0][:2] == ["1", "0"] and len(shown) > 20
    assert page.text_content("#count") == f"{ROWS} of {ROWS} rows"
    page.eval_on_selector("#scroller", "s => s.scrollTop = s.scrollHeight")
    page.wait_for_selector(f'#grid tbody tr[data-row="{ROWS}"]')
    page.wait_for_function(DRAWN)
    last = rows_shown(page)[-1]
    assert last[:2] == [str(ROWS), str(expected["doc_id"][-1])]


def test_filter_sort_jump_and_the_address_holds_the_view(
    page: Any, browser: Any, served: dict[str, Any]
) -> None:
    expected = table(served).filter(pl.col("sentiment__choice") == "mixed")
    expected = expected.sort("helpful__p_true", descending=True, nulls_last=True)
    page.select_option("#f-col", "sentiment__choice")
    page.select_option("#f-op", "eq")
    page.fill("#f-val", "mixed")
    page.click("#f-add")
    counted = (
        f"() => document.querySelector('#count').textContent.startsWith('{expected.height} of')"
    )
    page.wait_for_function(counted)
    page.click('#grid th[data-column="helpful__p_true"]')  # numbers sort high to low first
    page.wait_for_function(DRAWN)
    page.wait_for_function("() => location.hash.includes('sort=-helpful__p_true')")
    shown = rows_shown(page)
    assert [int(r[1]) for r in shown] == expected["doc_id"][: len(shown)].to_list()
    page.screenshot(path=str(SHOTS / "browse-table.jpg"), type="jpeg", quality=70)
    page.fill("#jump", "100")
    page.press("#jump", "Enter")
    page.wait_for_selector('#grid tbody tr[data-row="100"]')
    page.wait_for_function(DRAWN)
    row = page.eval_on_selector('#grid tbody tr[data-row="100"]', "tr => tr.cells[1].textContent")
    assert int(row) == expected["doc_id"][99]
    page.wait_for_function("() => location.hash.includes('at=100')")
    bookmarked = page.url
    again, _ = open_page(browser, bookmarked)  # another browser's visit: the address alone
    again.wait_for_selector('#grid tbody tr[data-row="100"]')
    assert again.text_content("#count").startswith(f"{expected.height} of")
    same = again.eval_on_selector('#grid tbody tr[data-row="100"]', "tr => tr.cells[1].textContent")
    assert same == row
    again.close()


def test_a_state_of_html_and_script_shows_as_text_and_runs_nothing(page: Any) -> None:
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.click(f'#grid tbody tr[data-pos="{HOSTILE}"]')
    page.wait_for_selector("#detail pre.state")
    assert page.text_content("#detail pre.state") == HOSTILE_STATE
    assert page.evaluate("() => window.__pwned") is None
    assert page.eval_on_selector_all("#detail img, #detail script, #detail b", "e => e.length") == 0
    assert dialogs == []
    assert "row=7" in page.url
    page.screenshot(path=str(SHOTS / "browse-row.jpg"), type="jpeg", quality=70)
    page.keyboard.press("Escape")
    page.click(f'#grid tbody tr[data-pos="{JSON_ID}"]')
    page.wait_for_function(
        "() => document.querySelector('#detail pre.state').textContent.includes('\"stars\": 4')"
    )
    shown = page.text_content("#detail pre.state")
    assert json.loads(shown)["tags"] == ["kitchen", "steel"] and '\n  "title"' in shown  # indented
    bars = page.eval_on_selector_all("#detail .bar > div", "b => b.map(x => x.style.width)")
    assert len(bars) == 2 + 3 + 4 and all(w.endswith("%") for w in bars)


def test_the_comparison_shows_diff_s_counts(page: Any, served: dict[str, Any]) -> None:
    result = CliRunner().invoke(main, ["diff", str(served["a"]), str(served["b"]), "--json"])
    diff = json.loads(result.output)
    page.click('nav button[data-mode="compare"]')
    page.wait_for_selector("#compare-questions")
    ids = page.eval_on_selector_all(
        "#compare-ids tr:nth-child(2) td", "t => t.map(e => e.textContent)"
    )
    assert ids[:3] == [str(diff["shared_ids"]), "2", "2"]
    flips = page.eval_on_selector_all(
        "#compare-questions tr[data-question] td.flips",
        "t => t.map(x => [x.parentElement.dataset.question, x.textContent])",
    )
    assert flips == [[q["key"], str(q["flips"]["count"])] for q in diff["questions"]]
    changed = {r["id"] for q in diff["questions"] for r in q["flips"]["rows"]}
    shown = page.eval_on_selector_all(
        "#compare-rows tr td:first-child", "t => t.map(x => x.textContent)"
    )
    assert [int(i) for i in shown] == sorted(changed)[:100]  # the first page, by id
    page.screenshot(path=str(SHOTS / "browse-compare.jpg"), type="jpeg", quality=70)


def test_label_100_rows_with_the_keyboard_then_agree_reads_them(
    page: Any, served: dict[str, Any]
) -> None:
    page.click('nav button[data-mode="label"]')
    page.select_option("#l-question", "helpful")
    page.select_option("#l-design", "stratified")
    page.fill("#l-n", "100")
    page.click("#l-start")
    page.wait_for_selector("#l-row .detail")
    page.screenshot(path=str(SHOTS / "browse-label.jpg"), type="jpeg", quality=70)
    for i in range(100):  # a person's keys: to the page, whatever has the focus (a button)
        shown = page.get_attribute("#l-row", "data-id")
        page.keyboard.press("y" if i % 3 else "n")
        page.wait_for_function(NEXT, arg=shown)
    assert page.text_content("#l-progress").startswith("queue done")
    labels = pl.read_csv(served["labels"], infer_schema=False)
    assert labels.height == 100 and labels["doc_id"].n_unique() == 100
    assert set(labels["_design"]) == {"stratified"} and set(labels["_reviewer"]) == {"ann"}
    assert labels["_inclusion_prob"].cast(pl.Float64).is_between(0, 1).all()
    assert (labels["helpful"] == "no").sum() == 34
    agree = ["agree", str(served["a"]), "--labels", str(served["labels"]), "--json"]
    result = CliRunner().invoke(main, agree)
    assert result.exit_code == 0, result.output
    helpful = next(q for q in json.loads(result.output)["questions"] if q["key"] == "helpful")
    assert helpful["n"] == 100
    page.click("#l-start")  # resumable: the same queue again holds nothing left to label
    page.wait_for_function(DONE)
    assert pl.read_csv(served["labels"], infer_schema=False).height == 100
