"""The report of a nightly series (`out/dt=*`): one chart per question across nights, with
the nights on which the model version changed marked, and a table of the nights.

The figures are `evalpipe.analysis.series`'s; this module draws them as the rest of the
report draws (Altair to static SVG, the same page template).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import altair as alt
import polars as pl

from evalpipe.analysis import model_changes
from evalpipe.report.charts import WIDTH, to_svg
from evalpipe.report.page import Chart, Page, Section, Table

CHANGE_COLOR = "#c8553d"


def _points(document: dict[str, Any], key: str) -> pl.DataFrame:
    rows = [
        {"date": night["date"], "figure": figure, "value": value}
        for night in document["nights"] if "questions" in night
        for figure, value in night["questions"].get(key, {}).items() if value is not None
    ]  # fmt: skip
    schema = {"date": pl.String, "figure": pl.String, "value": pl.Float64}
    return pl.DataFrame(rows, schema=schema)


def trend_chart(document: dict[str, Any], key: str) -> alt.LayerChart:
    """One question's figures night by night; a red rule where the model changed."""
    dates = [night["date"] for night in document["nights"]]
    x = alt.X("date:O", sort=dates, title=None, scale=alt.Scale(domain=dates))
    title = alt.TitleParams(f"{key}: across nights", subtitle="red: the model version changed")
    lines = (
        alt.Chart(_points(document, key), title=title)
        .mark_line(point=True)
        .encode(x=x, y=alt.Y("value:Q", title=None), color=alt.Color("figure:N", title=None))
    )
    changes = pl.DataFrame(
        [{"date": d, "model": m} for d, m in model_changes(document)],
        schema={"date": pl.String, "model": pl.String},
    )
    rules = alt.Chart(changes).mark_rule(color=CHANGE_COLOR, strokeDash=[4, 3]).encode(x=x)
    labels = alt.Chart(changes).mark_text(
        color=CHANGE_COLOR, align="left", dx=3, dy=-4, fontSize=10, baseline="bottom"
    ).encode(x=x, y=alt.value(0), text="model:N")  # fmt: skip
    return (lines + rules + labels).properties(width=WIDTH, height=200)


def _nights_table(document: dict[str, Any]) -> Table:
    rows = []
    for night in document["nights"]:
        if "skipped" in night:
            rows.append([night["date"], "\u2013", "\u2013", night["skipped"]])
            continue
        models = ", ".join(night["models"]) or "\u2013"
        rows.append([night["date"], f"{night['rows']:,}", f"{night['answered']:,}", models])
    return Table(["night", "rows", "answered", "models"], rows, frozenset(["rows", "answered"]))


def series_page(document: dict[str, Any]) -> Page:
    """The whole page of a nightly series."""
    nights = [n for n in document["nights"] if "questions" in n]
    keys = list(dict.fromkeys(k for n in nights for k in n["questions"]))
    changes = model_changes(document)
    trend = Section(
        "trend",
        "Trend across nights",
        "Each night's output (a dt=* folder), over its answered rows: p(yes) for yes/no "
        "questions, the expected level for score questions, each option's share for choice "
        "questions. A dashed red rule marks a night whose model differs from the night "
        "before's: a change there may be the model's, not the data's.",
        figures=[("nights", f"{len(document['nights']):,}"), ("model changes", str(len(changes)))],
    )
    trend.notes += [f"{date}: the model changed to {model}" for date, model in changes]
    trend.charts = [Chart(f"{key}-trend", to_svg(trend_chart(document, key))) for key in keys]
    trend.tables.append(_nights_table(document))
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return Page(
        title=f"evalpipe report: {document['location']} (nightly series)",
        subtitle=f"{document['location']} · written {stamp}",
        figures=[("nights", f"{len(document['nights']):,}"), ("questions", str(len(keys)))],
        sections=[trend],
    )
