"""The report's sections that look beyond one output: `--against B` (what changed since B,
`evalpipe diff`'s figures) and `--labels` (the judge against people, `evalpipe agree`'s; its
reliability diagrams are the Trust section's, `trust`).

The figures are `evalpipe.analysis`'s JSON documents, laid out here: the page and the commands
never compute a statistic twice or differently.
"""

from __future__ import annotations

from typing import Any

import altair as alt
import polars as pl

from evalpipe.report.charts import MAIN_COLOR, WIDTH, to_svg
from evalpipe.report.page import Chart, Section, Table

SHOWN_FLIPS = 200  # flips listed per question on the page
MISSING = "\u2013"  # an en dash, as in the other sections


def _f(value: Any, signed: bool = False) -> str:
    if value is None:
        return MISSING
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def _ci(low: Any, high: Any) -> str:
    return MISSING if low is None else f"[{low:+.3f}, {high:+.3f}]"


def change_chart(document: dict[str, Any]) -> alt.LayerChart:
    """Every change in mean with its 95% interval, beside a rule at 0."""
    rows = [
        {"what": f"{q['key']}: {c['what']}", "change": c["change"],
         "low": c["low"] if c["low"] is not None else c["change"],
         "high": c["high"] if c["high"] is not None else c["change"]}
        for q in document["questions"] for c in q["changes"]
    ]  # fmt: skip
    table = pl.DataFrame(rows, schema={"what": pl.String, "change": pl.Float64,
                                       "low": pl.Float64, "high": pl.Float64})  # fmt: skip
    title = alt.TitleParams("Change in mean, with 95% intervals", subtitle="B minus A")
    base = alt.Chart(table, title=title)
    y = alt.Y("what:N", sort=None, title=None, axis=alt.Axis(labelLimit=220))
    rules = base.mark_rule(color=MAIN_COLOR).encode(
        x=alt.X("low:Q", title="change"), x2="high:Q", y=y
    )
    points = base.mark_point(filled=True, color=MAIN_COLOR, size=40).encode(x="change:Q", y=y)
    zero = alt.Chart(pl.DataFrame({"x": [0.0]})).mark_rule(color="#999").encode(x="x:Q")
    return (zero + rules + points).properties(width=WIDTH, height=alt.Step(20))


def _changes_table(document: dict[str, Any]) -> Table:
    rows = [
        [q["key"], c["what"], f"{q['n']:,}", _f(c["a"]), _f(c["b"]), _f(c["change"], True),
         _ci(c["low"], c["high"]), f"{q['flips']['count']:,}"]
        for q in document["questions"] for c in q["changes"]
    ]  # fmt: skip
    columns = ["question", "figure", "rows", "A", "B", "change", "95% interval", "flips"]
    return Table(columns, rows, frozenset(columns[2:]))


def _flips_table(document: dict[str, Any]) -> Table:
    rows = [
        [q["key"], str(r["id"]), _cell(r["a"]), _cell(r["b"])]
        for q in document["questions"] for r in q["flips"]["rows"][:SHOWN_FLIPS]
    ]  # fmt: skip
    caption = f"Rows whose answer flipped (at most {SHOWN_FLIPS} per question)"
    return Table(["question", "id", "A", "B"], rows, caption=caption, collapsed=True)


def _cell(value: Any) -> str:
    return _f(value) if isinstance(value, float) else str(value)


def diff_section(document: dict[str, Any]) -> Section:
    """`--against B`: the diff of B (before) and this output (after)."""
    before, after = document["a"], document["b"]
    models = "differ" if document["models_differ"] else "the same"
    section = Section(
        "against",
        f"Compared with {before['output']}",
        f"A is {before['output']} (before), B is this output (after), joined on the id "
        "column: per question, the change in mean from A to B with a 95% paired bootstrap "
        "interval, and the rows whose answer flipped (a choice changed, p(yes) crossed 0.5, "
        "or the most probable level changed), as `evalpipe diff A B` computes them.",
        figures=[
            ("shared ids", f"{document['shared_ids']:,}"),
            ("only in A", f"{document['only_in_a']['count']:,}"),
            ("only in B (here)", f"{document['only_in_b']['count']:,}"),
            ("models", models),
        ],
    )
    section.figures.append(("models in A", ", ".join(before["models"]) or MISSING))
    section.figures.append(("models in B", ", ".join(after["models"]) or MISSING))
    section.notes.extend(document["notes"])
    if any(q["changes"] for q in document["questions"]):
        section.charts.append(Chart("against-changes", to_svg(change_chart(document))))
    section.tables += [_changes_table(document), _flips_table(document)]
    return section


def _metrics_table(document: dict[str, Any]) -> Table:
    rows = []
    for q in document["questions"]:
        base = q.get("base_rate")
        shown_base = MISSING if base is None else f"{base['share']:.1%} ({base['majority']})"
        for m in q["metrics"]:
            rows.append([q["key"], f"{q['n']:,}", m["name"], _f(m["value"]),
                         _ci(m["low"], m["high"]).replace("+", ""), shown_base])  # fmt: skip
    columns = ["question", "rows", "figure", "value", "95% interval", "base rate"]
    return Table(columns, rows, frozenset(["rows", "value", "95% interval"]))


def agreement_section(document: dict[str, Any], labels: str) -> Section:
    """`--labels`: the judge against people's labels."""
    section = Section(
        "agreement",
        "Agreement with people's labels",
        f"The judge's answers against the labels in {labels}, over the rows both answered; "
        "kappa beside the base rate (the share of the most common label); the reliability "
        "diagrams are in the Trust section.",
        figures=[
            ("labelled rows", f"{document['labelled_rows']:,}"),
            ("matched", f"{document['matched_rows']:,}"),
        ],
    )
    section.notes.extend(document["notes"])
    section.tables.append(_metrics_table(document))
    return section
