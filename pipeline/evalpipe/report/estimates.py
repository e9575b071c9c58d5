"""The report's "Estimates" section: what `evalpipe estimate` found from a sample of the corpus.

An output an estimate sampled keeps the design and the last estimates beside its rows
(`_sample.json`, `evalpipe.output.sampled`); the section shows them as the command printed them,
each figure with its interval, and per question a chart of each figure per stratum (a point
and its interval per stratum, the corpus-wide one first). When a full run has scored the rest
since, the Questions section above holds the census, and the section says so.
"""

from __future__ import annotations

from typing import Any

import altair as alt
import polars as pl

from evalpipe.reading import Output
from evalpipe.report.charts import FONT, MAIN_COLOR, WIDTH, to_svg
from evalpipe.report.page import Chart, Section, Table

ALL = "all rows"  # the corpus-wide figure's place among the strata in a chart


def _num(value: Any) -> str:
    return "\u2013" if value is None else f"{value:,.3f}"


def _interval(row: dict[str, Any]) -> str:
    return "\u2013" if row["low"] is None else f"[{row['low']:.3f}, {row['high']:.3f}]"


def chart(rows: list[dict[str, Any]], question: str) -> alt.FacetChart:
    """One question's figures per stratum: each a point and its interval, one panel a figure."""
    table = pl.DataFrame(
        [{"figure": r["what"], "stratum": r["stratum"] or ALL, "estimate": r["estimate"],
          "low": r["low"], "high": r["high"]} for r in rows if r["estimate"] is not None],
        schema={"figure": pl.String, "stratum": pl.String, "estimate": pl.Float64,
                "low": pl.Float64, "high": pl.Float64},
    )  # fmt: skip
    order = [ALL, *sorted(set(table["stratum"]) - {ALL})]
    y = alt.Y("stratum:N", sort=order, title=None, axis=alt.Axis(labelLimit=160))
    base = alt.Chart()
    rules = base.mark_rule(color=MAIN_COLOR, strokeWidth=2).encode(
        x=alt.X("low:Q", title="estimate and interval"), x2="high:Q", y=y
    )
    points = base.mark_point(filled=True, color="#222", size=40).encode(x="estimate:Q", y=y)
    layered = alt.layer(rules, points, data=table).properties(width=WIDTH, height=alt.Step(16))
    header = alt.Header(labelFont=FONT, labelOrient="top", labelAnchor="start")
    facet = alt.Row("figure:N", title=None, header=header)
    return layered.facet(row=facet).properties(title=f"{question}: estimates per stratum")


def estimates_section(out: Output) -> Section | None:
    """The section, or None when the output holds no sample."""
    sample = out.sample
    if not sample or "estimates" not in sample:
        return None
    confidence = f"{sample['confidence']:.0%}"
    share = sample.get("sample_share") or 0.0
    section = Section(
        "estimates",
        "Estimates",
        f"From a stratified random sample of {sample['sample_rows']:,} of the corpus's "
        f"{sample['corpus_rows']:,} rows ({share:.1%}; evalpipe estimate, seed {sample['seed']}"
        f"{', by ' + ', '.join(sample['by']) if sample['by'] else ''}): each figure with its "
        f"{confidence} interval. The per-stratum intervals hold together: all of them cover "
        "their true values with that confidence.",
        figures=_figures(sample),
    )
    rows = sample["estimates"]
    header = ["question", "figure", "stratum", "estimate", f"{confidence} interval", "n", "method"]
    cells = [
        [r["question"], r["what"], r["stratum"] or ALL, _num(r["estimate"]), _interval(r),
         f"{r['n']:,}", r["method"] or "\u2013"]
        for r in rows
    ]  # fmt: skip
    overall = [c for c in cells if c[2] == ALL]
    section.tables.append(Table(header, overall, frozenset({"estimate", "n"}), "Corpus-wide"))
    if sample["by"]:
        strata = [c for c in cells if c[2] != ALL]
        section.tables.append(
            Table(header, strata, frozenset({"estimate", "n"}), "Per stratum", collapsed=True)
        )
        for key in dict.fromkeys(r["question"] for r in rows):
            mine = [r for r in rows if r["question"] == key]
            section.charts.append(Chart(f"estimates-{key}", to_svg(chart(mine, key))))
    total = _rows(out)
    if total > sample["sample_rows"]:
        section.notes.append(
            f"The output holds {total:,} rows now, more than the sample: the Questions section "
            "above describes all of them (the census where every row is scored); the estimates "
            "are the sample's, as the last `evalpipe estimate` found them."
        )
    return section


def _figures(sample: dict[str, Any]) -> list[tuple[str, str]]:
    precision = sample["precision"]
    reached = "" if sample["reached"] else " (not reached)"
    return [
        ("sample rows", f"{sample['sample_rows']:,}"),
        ("widest interval", "\u2013" if precision is None else f"±{precision:.4f}"),
        ("margin", f"{sample['margin']:g}{reached}"),
    ]


def _rows(out: Output) -> int:
    return int(out.scan().select(pl.len()).collect().item())
