"""The report's charts: Altair specs of the small tables `data` computes, rendered to SVG.

Altair describes a chart as data plus encodings (Vega-Lite); vl-convert renders that spec to
a static SVG in-process (an embedded JavaScript engine, no browser, no network). The page
then holds plain SVG: it displays anywhere, with no script and no request. Every function
here takes a polars DataFrame of at most a few hundred rows and returns an Altair chart; the
notebook displays the same charts.
"""

from __future__ import annotations

import re
from itertools import count
from typing import Any

import altair as alt
import polars as pl
import vl_convert as vlc

from evalpipe.report.questions import QuestionFigures, top_options

WIDTH = 330  # one chart's plot width: two charts side by side fill the page's column
ANSWERED_COLOR = "#2f7d4f"
ERROR_COLOR = "#c8553d"
MAIN_COLOR = "#3a6ea5"
SECOND_COLOR = "#8fb3d9"
# Text is measured by vl-convert and drawn by the reader's browser: both must use one font's
# metrics, or labels overflow the SVG. Arial's (Liberation Sans on Linux) are everywhere.
FONT = "Arial, 'Liberation Sans', Helvetica, sans-serif"
CONFIG: dict[str, Any] = {
    "font": FONT,
    "view": {"stroke": None},
    "axis": {"labelFontSize": 11, "titleFontSize": 11, "titleColor": "#444", "gridColor": "#eee"},
    "title": {"fontSize": 13, "anchor": "start", "color": "#222", "subtitleColor": "#666"},
    "legend": {"labelFontSize": 11, "titleFontSize": 11},
}
_VL_VERSION = "_".join(alt.SCHEMA_VERSION.split(".")[:2])  # vl-convert names versions v6_4
_ids = count(1)


def _title(text: str, subtitle: str | None = None) -> alt.TitleParams:
    return alt.TitleParams(text, subtitle=subtitle) if subtitle else alt.TitleParams(text)


def _bars(
    table: pl.DataFrame, category: str, value: str, title: str, **options: Any
) -> alt.LayerChart:
    """Horizontal bars, largest first, each labelled with its value."""
    fmt = options.pop("fmt", ",d")
    color = options.pop("color", alt.value(MAIN_COLOR))
    sort = options.pop("sort", "-x")
    y = alt.Y(f"{category}:N", sort=sort, title=None, axis=alt.Axis(labelLimit=180))
    base = alt.Chart(table, title=_title(title, options.pop("subtitle", None)))
    bars = base.mark_bar(height={"band": 0.8}).encode(
        x=alt.X(f"{value}:Q", title=options.pop("x_title", value)), y=y, color=color
    )
    labels = base.mark_text(align="left", dx=3, fontSize=10, color="#333").encode(
        x=f"{value}:Q", y=y, text=alt.Text(f"{value}:Q", format=fmt)
    )
    step = options.pop("step", 20)
    return (bars + labels).properties(width=WIDTH, height=alt.Step(step))


def outcomes(table: pl.DataFrame) -> alt.TopLevelMixin:
    """Rows per outcome: answered in green, each error type in red."""
    color = alt.condition(
        alt.datum.outcome == "answered", alt.value(ANSWERED_COLOR), alt.value(ERROR_COLOR)
    )
    return _bars(table, "outcome", "rows", "Rows by outcome", color=color, x_title="rows")


def options(table: pl.DataFrame, question: str) -> alt.HConcatChart:
    """A choice question: each option's share of the answered rows, beside the mean
    confidence of the rows that chose it and the mean probability it got."""
    order = table["option"].to_list()
    share = _bars(
        table, "option", "share", f"{question}: chosen option", sort=order, fmt=".1%",
        x_title="share of answered rows",
    )  # fmt: skip
    long = table.unpivot(
        ["mean_confidence", "mean_probability"], index="option", variable_name="mean of"
    ).with_columns(
        pl.col("mean of").replace(
            {"mean_confidence": "confidence when chosen", "mean_probability": "probability"}
        )
    )
    means = (
        alt.Chart(long, title=_title("means"))
        .mark_point(filled=True, size=45)
        .encode(
            x=alt.X("value:Q", title="mean", scale=alt.Scale(domain=[0, 1])),
            y=alt.Y("option:N", sort=order, title=None, axis=alt.Axis(labels=False, ticks=False)),
            color=alt.Color(
                "mean of:N",
                scale=alt.Scale(range=[MAIN_COLOR, ERROR_COLOR]),
                legend=alt.Legend(orient="right", title=None),
            ),
            shape=alt.Shape("mean of:N", legend=None),
        )
        .properties(width=150, height=alt.Step(20))
    )
    return alt.hconcat(share, means, spacing=8)


def distributions(table: pl.DataFrame, question: str, order: list[str]) -> alt.Chart:
    """How the probability of each shown option is spread over the answered rows: one row of
    cells per option, darker where more rows put that probability on it."""
    shaded = table.with_columns(
        share=pl.col("rows") / pl.col("rows").sum().over("option").clip(1),
        bin=pl.format("{}", pl.col("start").round(2)),
    )
    return (
        alt.Chart(
            shaded,
            title=_title(
                f"{question}: probability of each option",
                "share of answered rows per probability bin (row = option)",
            ),
        )
        .mark_rect()
        .encode(
            x=alt.X(
                "start:Q",
                bin=alt.Bin(binned=True, step=0.05),
                title="probability",
                axis=alt.Axis(values=[0, 0.25, 0.5, 0.75, 1], format=".2f"),
            ),
            x2="end:Q",
            y=alt.Y("option:N", sort=order, title=None, axis=alt.Axis(labelLimit=180)),
            color=alt.Color(
                "share:Q",
                scale=alt.Scale(scheme="blues", domain=[0, 1], type="sqrt"),
                legend=alt.Legend(format=".0%", title="share of rows", orient="right"),
            ),
        )
        .properties(width=WIDTH, height=alt.Step(18))
    )


def histogram(
    table: pl.DataFrame, title: str, x_title: str, subtitle: str | None = None
) -> alt.Chart:
    """Rows per bin of a value (start, end, rows), bars touching."""
    return (
        alt.Chart(table, title=_title(title, subtitle))
        .mark_bar(color=MAIN_COLOR, stroke="white", strokeWidth=0.5)
        .encode(
            x=alt.X("start:Q", bin=alt.Bin(binned=True), title=x_title),
            x2="end:Q",
            y=alt.Y("rows:Q", title="rows"),
        )
        .properties(width=WIDTH, height=160)
    )


def levels(table: pl.DataFrame, question: str) -> alt.Chart:
    """A score question: the mean probability of each level, named by its label, in order."""
    order = table["name"].to_list()  # the levels' order, not the labels' alphabetical one
    return (
        alt.Chart(table, title=_title(f"{question}: mean probability of each level"))
        .mark_bar(color=MAIN_COLOR)
        .encode(
            x=alt.X(
                "name:O",
                title="level",
                sort=order,
                axis=alt.Axis(labelAngle=0, labelLimit=max(40, WIDTH // max(1, len(order)))),
            ),
            y=alt.Y("mean_probability:Q", title="mean probability"),
        )
        .properties(width=WIDTH, height=160)
    )


Named = list[tuple[str, alt.TopLevelMixin]]  # (a stable name for tests and readers, chart)


def question_charts(f: QuestionFigures) -> Named:
    """Every chart of one question, by kind; none when no row was answered."""
    key, kind = f.question.key, f.question.kind
    if f.answered == 0:
        return []
    named: Named = []
    if kind == "choice":
        order = f.distributions["option"].unique(maintain_order=True).to_list()
        named.append((f"{key}-options", options(top_options(f.options), key)))
        named.append((f"{key}-distributions", distributions(f.distributions, key, order)))
    elif kind == "noul":
        named.append((f"{key}-noul", histogram(f.histograms["noul"], f"{key}: p(yes)", "p(yes)")))
    else:
        title = f"{key}: expected score"
        named.append((f"{key}-score", histogram(f.histograms["score"], title, "expected score")))
        named.append((f"{key}-levels", levels(f.probabilities, key)))
    if "confidence" in f.histograms:
        title, subtitle = f"{key}: confidence", "how concentrated each answer's distribution is"
        hist = histogram(f.histograms["confidence"], title, "confidence", subtitle)
        named.append((f"{key}-confidence", hist))
    return named


def how_answered(table: pl.DataFrame) -> alt.TopLevelMixin:
    return _bars(table, "how", "rows", "Answered rows by where the answer came from")


def models(table: pl.DataFrame) -> alt.TopLevelMixin:
    return _bars(table, "model", "rows", "Rows answered per model")


def run_rows(table: pl.DataFrame) -> alt.Chart:
    """Rows each run answered and left in error, stacked, oldest run first."""
    long = table.select("run", answered="rows_answered", **{"in error": "rows_in_error"}).unpivot(
        index="run", variable_name="rows of the run", value_name="rows"
    )
    return (
        alt.Chart(long, title=_title("Rows per run"))
        .mark_bar()
        .encode(
            x=alt.X("run:N", sort=None, title=None, axis=alt.Axis(labelAngle=-30, labelLimit=200)),
            y=alt.Y("rows:Q", title="rows", stack=True),
            color=alt.Color(
                "rows of the run:N",
                scale=alt.Scale(
                    domain=["answered", "in error"], range=[ANSWERED_COLOR, ERROR_COLOR]
                ),
                legend=alt.Legend(orient="bottom", title=None),
            ),
        )
        .properties(width=WIDTH, height=180)
    )


def run_rates(table: pl.DataFrame) -> alt.Chart:
    """Each run's achieved requests per minute beside its limit."""
    long = table.select("run", achieved="achieved_rpm", limit="rpm_limit").unpivot(
        index="run", variable_name="requests per minute", value_name="rpm"
    )
    return (
        alt.Chart(long.drop_nulls("rpm"), title=_title("Requests per minute per run"))
        .mark_bar()
        .encode(
            x=alt.X("run:N", sort=None, title=None, axis=alt.Axis(labelAngle=-30, labelLimit=200)),
            xOffset="requests per minute:N",
            y=alt.Y("rpm:Q", title="requests per minute"),
            color=alt.Color(
                "requests per minute:N",
                scale=alt.Scale(domain=["achieved", "limit"], range=[MAIN_COLOR, SECOND_COLOR]),
                legend=alt.Legend(orient="bottom", title=None),
            ),
        )
        .properties(width=WIDTH, height=180)
    )


def run_time(table: pl.DataFrame) -> alt.LayerChart:
    """Each run's wall time, labelled with the 429s the service answered in it."""
    labelled = table.with_columns(
        label=pl.format("429s: {}", pl.col("rate_limited_429").fill_null(0))
    ).drop_nulls("wall_seconds")
    x = alt.X("run:N", sort=None, title=None, axis=alt.Axis(labelAngle=-30, labelLimit=200))
    base = alt.Chart(labelled, title=_title("Wall time per run", "labelled with its 429s"))
    bars = base.mark_bar(color=MAIN_COLOR).encode(x=x, y=alt.Y("wall_seconds:Q", title="seconds"))
    labels = base.mark_text(dy=-5, fontSize=10, color="#333").encode(
        x=x, y="wall_seconds:Q", text="label:N"
    )
    return (bars + labels).properties(width=WIDTH, height=180)


def throughput(table: pl.DataFrame) -> alt.Chart:
    """Rows finished (answered or in error) per minute over each run, from the rows'
    `_scored_at`; the time axis is
    in seconds for runs under two minutes, else in minutes."""
    short = table["seconds"].max() < 120  # type: ignore[operator]
    unit = "seconds" if short else "minutes"
    table = table.with_columns(since=pl.col("seconds") / (1 if short else 60))
    return (
        alt.Chart(table, title=_title("Throughput", "rows finished per minute, from _scored_at"))
        .mark_line(interpolate="step-after", strokeWidth=1.5)
        .encode(
            x=alt.X("since:Q", title=f"{unit} since the run's first row"),
            y=alt.Y("rows_per_minute:Q", title="rows per minute"),
            color=alt.Color("run:N", legend=alt.Legend(orient="bottom", title="run", columns=2)),
        )
        .properties(width=2 * WIDTH, height=200)
    )


def run_charts(runs: pl.DataFrame, pace: pl.DataFrame) -> Named:
    """The run history's charts (rows, rates, wall time and 429s) and the throughput, where
    there is data."""
    named: Named = []
    if not runs.is_empty() and runs["rows_answered"].is_not_null().any():
        named.append(("run-rows", run_rows(runs)))
    if not runs.is_empty() and runs["achieved_rpm"].is_not_null().any():
        named.append(("run-rates", run_rates(runs)))
    if not runs.is_empty() and runs["wall_seconds"].is_not_null().any():
        named.append(("run-time", run_time(runs)))
    if not pace.is_empty():
        named.append(("throughput", throughput(pace)))
    return named


def coverage(table: pl.DataFrame) -> alt.TopLevelMixin:
    long = table.unpivot(variable_name="ids", value_name="rows")
    return _bars(long, "ids", "rows", "Coverage of the corpus", sort=None, x_title="ids")


# --------------------------------------------------------------------------- SVG


def _scoped(svg: str, prefix: str) -> str:
    """Prefix the SVG's element ids (clip paths, gradients) so that many SVGs inlined in one
    HTML page do not resolve each other's `url(#id)` references."""
    ids = set(re.findall(r'\bid="([^"]+)"', svg))
    if not ids:
        return svg
    pattern = re.compile(r'(\bid="|url\(#|href="#)(' + "|".join(map(re.escape, ids)) + r')(?=[")])')
    return pattern.sub(lambda m: f"{m.group(1)}{prefix}{m.group(2)}", svg)


def to_svg(chart: alt.TopLevelMixin) -> str:
    """The chart as a standalone SVG string; it may fetch nothing (allowed_base_urls=[])."""
    spec = chart.configure(**CONFIG).to_dict()
    svg = vlc.vegalite_to_svg(spec, vl_version=_VL_VERSION, allowed_base_urls=[])
    return _scoped(svg, f"c{next(_ids)}-")
