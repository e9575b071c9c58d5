"""What the report shows, in what order: figures from `data`, drawn by `charts`, laid out as
`page` sections. This is the one place that decides the page's content; the command only
opens the output and writes the file, and the notebook picks the same charts one by one.

A section shows only what the output can tell: a chart with no data is not drawn (an empty
chart area reads as a bug), and what an older output lacks is said in a note.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import polars as pl

from evalpipe.config import EMBEDDED_WARNING
from evalpipe.reading import Output, Question
from evalpipe.report import charts, corpus, data, questions
from evalpipe.report.estimates import estimates_section
from evalpipe.report.page import Chart, Page, Section, Table
from evalpipe.report.trust import trust_section

MISSING = "\u2013"  # an en dash: the figure is not known for this output
_INTROS = {
    "noul": "p(yes) of each answered row: the probability the answer is yes.",
    "choice": "The option each answered row chose (its highest probability), and how sure the "
    "rows were.",
    "score": "The expected score of each answered row: its probability-weighted level, where 0 "
    "is the first level.",
}


def _int(value: Any) -> str:
    return MISSING if value is None else f"{int(value):,}"


def _share(value: Any) -> str:
    return MISSING if value is None else f"{value:.1%}"


def _num(value: Any, digits: int = 3) -> str:
    return MISSING if value is None else f"{value:,.{digits}f}"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return _num(value)
    return MISSING if value is None else str(value)


def _anchor(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "q"


def _chart(name: str, chart: Any) -> Chart:
    return Chart(name, charts.to_svg(chart))


# --------------------------------------------------------------------------- sections


def outcomes_section(out: Output) -> tuple[Section, pl.DataFrame]:
    table = data.outcomes(out)
    rows = [
        [o, _int(n), _share(s), e or ""]
        for o, n, s, e in table.select("outcome", "rows", "share", "example").iter_rows()
    ]
    section = Section(
        "outcomes",
        "Outcomes",
        "Every row of the output: answered, or the error type it ended with.",
        charts=[_chart("outcomes", charts.outcomes(table))] if table.height else [],
        tables=[
            Table(
                ["outcome", "rows", "share", "example message"], rows, frozenset({"rows", "share"})
            )
        ],
    )
    if out.journal:
        section.notes.append(
            "_journal.bin exists: a run is going on, or was killed. Its rows are not in a part "
            "yet, so they are not counted here; the next run folds them into a part."
        )
    return section, table


def _options_table(section: Section, options: pl.DataFrame) -> None:
    shown = questions.top_options(options)
    if options.height > shown.height:
        section.notes.append(
            f"{options.height} options: the {questions.TOP_OPTIONS} chosen most are drawn and "
            "the rest summed as 'other'; the table below lists every option."
        )
    rows = [[o, _int(n), _share(s), _num(c), _num(p)] for o, n, s, c, p in options.iter_rows()]
    columns = ["option", "rows", "share", "mean confidence", "mean probability"]
    caption = f"All {options.height} options"
    section.tables.append(Table(columns, rows, frozenset(columns[1:]), caption, collapsed=True))


def question_section(out: Output, q: Question, number: int) -> Section:
    anchor = f"q{number}-{_anchor(q.key)}"  # numbered: keys may differ only in punctuation
    section = Section(anchor, q.key, _INTROS[q.kind], kind=q.kind)
    f = questions.question_figures(out, q)
    section.figures.append(("answered rows", _int(f.answered)))
    if f.answered == 0:
        section.notes.append("No answered rows: nothing to draw.")
        return section
    if f.mean is not None:
        label = "mean p(yes)" if q.kind == "noul" else "mean expected score"
        section.figures.append((label, _num(f.mean)))
    section.charts = [_chart(name, chart) for name, chart in charts.question_charts(f)]
    if q.kind == "choice":
        _options_table(section, f.options)
    return section


def questions_section(out: Output) -> Section:
    section = Section("questions", "Questions", "Answered rows only; error rows have no answers.")
    section.children = [question_section(out, q, i) for i, q in enumerate(out.questions, 1)]
    if not out.questions:
        section.notes.append("This output has no question columns.")
    return section


def _price_note(figures: dict[str, Any]) -> str:
    per_million = figures["price_per_million"]
    if per_million is None:
        return f"Input tokens billed; the cost is unknown ({figures['price_source']})."
    return (
        f"Input tokens billed, at ${per_million:g} per million input tokens "
        f"({figures['price_source']})."
    )


def cost_section(out: Output) -> Section:
    figures = data.cost(out)
    section = Section(
        "cost",
        "Cost",
        _price_note(figures),
        figures=[
            ("input tokens", _int(figures["input_tokens"])),
            ("cost", "unknown" if figures["usd"] is None else f"${figures['usd']:,.4f}"),
            ("rows reused within their run", _int(figures["reused"])),
            ("rows answered from the cache", _int(figures["cached_rows"])),
        ],
    )
    if figures["cached_questions"] is not None:  # `_cached` counted questions before version 2
        section.figures.append(
            ("questions answered from the cache", _int(figures["cached_questions"]))
        )
    missing = [c for c in ("_reused", "_cached") if not out.has(c)]
    if missing:
        section.notes.append(
            f"This output has no {' or '.join(missing)} column (written before lineage columns "
            "existed): rows reused or answered from the cache cannot be told apart from the table."
        )
    how = data.how_answered(figures)
    if int(how["rows"].sum()) > 0:
        section.charts.append(_chart("how-answered", charts.how_answered(how)))
    return section


def models_section(out: Output) -> Section:
    table = data.models(out)
    section = Section(
        "models", "Service and models", "The service and the versioned model that answered."
    )
    if table.is_empty():
        section.notes.append("No row was answered by a model.")
        return section
    if "embedded" in table["service"].to_list():
        section.notes.append(f"Rows answered by 'embedded': {EMBEDDED_WARNING}.")
    section.charts.append(_chart("models", charts.models(table)))
    rows = [[v, m, _int(n), _int(t)] for v, m, n, t in table.iter_rows()]
    numeric = frozenset({"rows", "input tokens"})
    section.tables.append(Table(["service", "model", "rows", "input tokens"], rows, numeric))
    _packing(out, section)
    return section


def _packing(out: Output, section: Section) -> None:
    """Rows per request (`packing.rows`) of the last run, with its agreement and cost figures."""
    summary = (out.manifest or {}).get("summary")
    packing = summary.get("packing") if isinstance(summary, dict) else None
    if not isinstance(packing, dict) or "rows" not in packing:
        return
    section.figures.append(("rows per request (at most)", str(packing["rows"])))
    if packing.get("rows_per_request"):
        section.figures.append(("rows per request (mean)", _num(packing["rows_per_request"], 2)))
    if packing.get("cost_ratio") is not None:
        section.figures.append(("cost per row packed / alone", _num(packing["cost_ratio"], 3)))
    section.notes.append(f"Packing: {packing.get('reason', '')}.")
    agreement = packing.get("agreement") or []
    if agreement:
        rows = [
            [a["question"], f"{a['agree']}/{a['rows']}", _num(a["interval_95"][0], 3),
             _num(a["interval_95"][1], 3), _num(a["mean_abs_change"], 4)]
            for a in agreement
        ]  # fmt: skip
        headers = ["question", "agree (packed vs alone)", "95% low", "95% high", "mean change"]
        section.tables.append(Table(headers, rows, frozenset(headers[2:])))


_RUN_COLUMNS = {
    "run": "run", "started": "started", "ended_how": "ended", "rows_answered": "answered",
    "rows_in_error": "in error", "requests": "requests", "rate_limited_429": "429s",
    "wall_seconds": "wall s", "achieved_rpm": "RPM", "rpm_limit": "RPM limit",
    "achieved_tps": "tokens/s", "cost_usd": "cost $",
}  # fmt: skip


def _run_cells(row: dict[str, Any]) -> list[str]:
    cells = []
    for key in _RUN_COLUMNS:
        value = row[key]
        if key in ("wall_seconds", "achieved_rpm", "rpm_limit", "achieved_tps"):
            cells.append(_num(value, 1))
        elif key == "cost_usd":
            cells.append(_num(value, 4))
        elif isinstance(value, int):
            cells.append(_int(value))
        elif key == "started" and value:
            cells.append(str(value)[:16].replace("T", " "))
        else:
            cells.append(MISSING if value is None else str(value))
    return cells


def runs_section(out: Output) -> Section:
    table = data.runs(out)
    section = Section("runs", "Runs", "Each run of the job on this output, from _manifest.json.")
    if out.manifest is None:
        section.notes.append("This output has no _manifest.json: the run history is unavailable.")
    elif "runs" not in out.manifest:
        section.notes.append("This manifest keeps only the last run's summary (older outputs).")
    if table.height > data.MAX_RUNS:
        section.notes.append(f"{table.height} runs: the last {data.MAX_RUNS} are shown.")
        table = table.tail(data.MAX_RUNS)
    pace = data.throughput(out)
    section.charts = [_chart(name, chart) for name, chart in charts.run_charts(table, pace)]
    if not table.is_empty():
        rows = [_run_cells(r) for r in table.iter_rows(named=True)]
        numeric = frozenset(list(_RUN_COLUMNS.values())[3:])
        section.tables.append(Table(list(_RUN_COLUMNS.values()), rows, numeric))
    if pace.is_empty() and not out.has("_scored_at"):
        section.notes.append(
            "This output has no _scored_at column (written before lineage columns existed): "
            "throughput over time is unavailable."
        )
    elif pace.is_empty():
        section.notes.append("No row has a _scored_at time: throughput is unavailable.")
    return section


def corpus_section(out: Output, rows: pl.LazyFrame, name: str) -> Section:
    cover = corpus.coverage(out, rows)
    section = Section(
        "corpus", "Corpus", f"The output beside the corpus {name}, joined on {out.id_column}."
    )
    section.charts.append(_chart("coverage", charts.coverage(cover)))
    sample = corpus.sample(out, rows)
    cells = [[_cell(v) for v in r] for r in sample.iter_rows()]
    caption = (
        f"{sample.height} rows of the corpus (picked by a hash of the id) beside their answers"
    )
    answers = {q.head for q in out.questions} | {"_error_type", out.id_column}
    texts = [c for c, t in sample.schema.items() if t == pl.String and c not in answers]
    texts = texts[:1]  # the longest corpus text (corpus.sample puts it first) gets room
    section.tables.append(Table(sample.columns, cells, caption=caption, wide=frozenset(texts)))
    return section


def about_section(out: Output) -> Section:
    manifest = out.manifest or {}
    section = Section("about", "About this output", notes=list(out.notes))
    section.figures = [
        ("part files", _int(len(out.parts))),
        ("columns", _int(len(out.schema) - len(out.partition))),  # a night's `dt` aside
        ("id column", out.id_column),
        ("questions", _int(len(out.questions))),
    ]
    if out.missing_lineage:
        section.notes.append(
            "Lineage columns absent (written by an older evalpipe): "
            + ", ".join(out.missing_lineage)
        )
    facts = [
        [k, str(manifest[k])]
        for k in ("fingerprint", "created", "updated", "finished")
        if manifest.get(k)
    ]
    if facts:
        section.tables.append(Table(["manifest", "value"], facts))
    return section


def build(
    out: Output,
    rows: pl.LazyFrame | None = None,
    corpus_name: str = "",
    extra: Sequence[Section] = (),
    labelled: tuple[dict[str, Any], dict[str, Any]] | None = None,
) -> Page:
    """The whole report of `out` (and of its corpus `rows`, when given); `extra` sections
    (`compare`: against another output, against labels) follow the questions; `labelled`
    (`evalpipe agree`'s and `evalpipe infer`'s documents) goes into the Trust section."""
    outcome, table = outcomes_section(out)
    total = int(table["rows"].sum())
    done = int(table.filter(pl.col("outcome") == data.ANSWERED)["rows"].sum())
    cost = cost_section(out)
    sampled = estimates_section(out)  # an output `evalpipe estimate` sampled
    # calibrated columns, rows kept, the runs' canaries; with labels, corrected shares
    trust = trust_section(out, *(labelled or (None, None)))
    sections = [outcome, *([sampled] if sampled else []), questions_section(out),
                *([trust] if trust else []), *extra, cost]  # fmt: skip
    sections.append(models_section(out))
    sections.append(runs_section(out))
    if rows is not None:
        sections.append(corpus_section(out, rows, corpus_name))
    sections.append(about_section(out))
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return Page(
        title=f"evalpipe report: {out.name}",
        subtitle=f"{out.where} · written {stamp}",
        figures=[
            ("rows", _int(total)),
            ("answered", _share(done / total if total else None)),
            ("in error", _int(total - done)),
            ("questions", _int(len(out.questions))),
            *cost.figures[:2],  # input tokens, dollars
        ],
        sections=sections,
    )
