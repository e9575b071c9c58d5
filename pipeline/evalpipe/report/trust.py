"""The report's "Trust" section: the calibrated columns a calibration added, the rows each
question kept for its promised agreement, and the canary of each run; with `--labels`, the
corpus's shares corrected by the labels beside the judge's (`evalpipe infer`'s figures) and a
reliability diagram per yes/no question (the judge's and the calibrated probabilities against
the labels' share of yes per bin, `evalpipe agree`'s bins, with the rows in each bin).

What the table says of itself: its calibrated columns are found by their field metadata
(`evalpipe.role`: `calibrated` or `abstain`, `evalpipe.question`), so the section reads the same
in a Parquet output and a Delta table; the promise behind `K__abstain` and the canary's
comparisons come from the runs' summaries in the manifest (`calibration`, `rows_kept`,
`canary`). An output with neither has no such section.
"""

from __future__ import annotations

from typing import Any

import altair as alt
import polars as pl

from evalpipe.output import describe
from evalpipe.reading import Output
from evalpipe.report.charts import MAIN_COLOR, WIDTH, to_svg
from evalpipe.report.data import collect
from evalpipe.report.page import Chart, Section, Table

BIN_COLUMNS = ("low", "high", "rows", "predicted", "observed")


def _num(value: Any, digits: int = 3) -> str:
    return "\u2013" if value is None else f"{value:,.{digits}f}"


def _roles(out: Output) -> dict[str, dict[str, list[str]]]:
    """Per question, its columns by role: `calibrated` and `abstain`."""
    found: dict[str, dict[str, list[str]]] = {}
    for entry in describe(out.schema):
        if entry["role"] in ("calibrated", "abstain") and entry["question"]:
            found.setdefault(entry["question"], {}).setdefault(entry["role"], []).append(
                entry["column"]
            )
    return found


def _columns(names: list[str]) -> str:
    """A question's calibrated columns, the probability columns as their pattern."""
    probs = [n for n in names if "__p_calibrated__" in n]
    shown = [n for n in names if n not in probs]
    if probs:
        pattern = probs[0].split("__p_calibrated__")[0] + "__p_calibrated__*"
        shown.append(f"{pattern} ({len(probs)})")
    return ", ".join(shown)


def _calibrated_rows(out: Output, roles: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """Per calibrated question: its mean answer before and after, and the rows it kept."""
    exprs = []
    for key, found in roles.items():
        q = out.question(key)
        own = q.head if q is not None and q.kind != "choice" else None
        calibrated = found.get("calibrated", [None])[0]
        if own is not None and calibrated is not None:
            exprs += [pl.col(own).mean().alias(f"{key}\x00own"),
                      pl.col(calibrated).mean().alias(f"{key}\x00cal")]  # fmt: skip
        for column in found.get("abstain", []):
            exprs += [(~pl.col(column)).sum().alias(f"{key}\x00kept"),
                      pl.col(column).count().alias(f"{key}\x00answered")]  # fmt: skip
    figures = collect(out.scan().select(exprs)).row(0, named=True) if exprs else {}
    rows = []
    for key, found in roles.items():
        kept, answered = figures.get(f"{key}\x00kept"), figures.get(f"{key}\x00answered")
        share = f"{kept / answered:.1%}" if answered else "\u2013"
        rows.append([
            key, _columns(found.get("calibrated", [])), _num(figures.get(f"{key}\x00own")),
            _num(figures.get(f"{key}\x00cal")),
            f"{kept:,} of {answered:,} ({share})" if answered is not None else "no abstention",
        ])  # fmt: skip
    return rows


def _promises(summary: dict[str, Any]) -> list[list[str]]:
    rows = []
    for key, q in ((summary.get("calibration") or {}).get("questions") or {}).items():
        a = q.get("abstain")
        if not a:
            continue
        ece = (q.get("held_out") or {}).get("ece") or {}
        threshold = "none can promise it" if a["threshold"] is None else _num(a["threshold"], 4)
        promise = f"{a['target_agreement']:.1%} at {a['confidence']:.0%}"
        moved = f"{_num(ece.get('before'))} -> {_num(ece.get('after'))}"
        rows.append([key, promise, threshold, _num(a["bound"]), moved])
    return rows


def _canaries(out: Output) -> list[list[str]]:
    """Each run's canary (from the manifest's runs), oldest first."""
    rows = []
    for run in (out.manifest or {}).get("runs") or []:
        canary = ((run or {}).get("summary") or {}).get("canary") if isinstance(run, dict) else None
        if not isinstance(canary, dict):
            continue
        tests = canary.get("tests") or []
        worst = min((t["share"] if t["against"] == "labels" else 1 - t["share"]
                     for t in tests if t.get("share") is not None), default=None)  # fmt: skip
        rows.append([str(run.get("run_id")), "passed" if canary.get("passed") else "FAILED",
                     f"{canary.get('answered', 0):,} of {canary.get('rows', 0):,}",
                     str(canary.get("compared_with")), _num(worst)])  # fmt: skip
    return rows


def reliability_chart(
    key: str, judge: list[dict[str, Any]], calibrated: list[dict[str, Any]] | None = None
) -> alt.VConcatChart:
    """A yes/no question's reliability diagram: the labels' share of yes per bin of p against
    the bin's mean p, the judge's and (where the output has them) the calibrated
    probabilities', beside the diagonal of perfect calibration; under it, the rows per bin."""
    schema = {c: pl.Int64 if c == "rows" else pl.Float64 for c in BIN_COLUMNS}
    series = [("judge", judge), ("calibrated", calibrated or [])]
    table = pl.concat([
        pl.DataFrame(bins, schema=schema).with_columns(pl.lit(name).alias("p"))
        for name, bins in series if bins
    ])  # fmt: skip
    middle = (pl.col("low") + pl.col("high")) / 2  # the judge's rows left, the calibrated right
    table = table.with_columns(
        pl.when(pl.col("p") == "judge").then(pl.col("low")).otherwise(middle).alias("from"),
        pl.when(pl.col("p") == "judge").then(middle).otherwise(pl.col("high")).alias("to"),
    )
    scale = alt.Scale(domain=[0, 1])
    colour = alt.Color("p:N", scale=alt.Scale(domain=["judge", "calibrated"],
                       range=[MAIN_COLOR, "#e08a2e"]),
                       legend=alt.Legend(orient="bottom", title=None))  # fmt: skip
    diagonal = alt.Chart(pl.DataFrame({"d": [0.0, 1.0]})).mark_line(
        color="#999", strokeDash=[4, 4]
    ).encode(x=alt.X("d:Q", scale=scale, title="mean predicted p(yes) in the bin"),
             y=alt.Y("d:Q", scale=scale, title="labels' share of yes"))  # fmt: skip
    title = alt.TitleParams(f"{key}: reliability", subtitle="labels' share of yes per bin of p")
    base = alt.Chart(table)
    line = base.mark_line().encode(x="predicted:Q", y="observed:Q", color=colour)
    points = base.mark_circle().encode(x="predicted:Q", y="observed:Q", color=colour,
                                       size=alt.Size("rows:Q", legend=None))  # fmt: skip
    curve = (diagonal + line + points).properties(width=WIDTH, height=WIDTH * 0.75, title=title)
    rows = base.mark_bar(opacity=0.8).encode(
        x=alt.X("from:Q", scale=scale, title="bin of p: rows in it"), x2="to:Q",
        y=alt.Y("rows:Q", title="rows", stack=None), y2=alt.datum(0), color=colour,
    ).properties(width=WIDTH, height=70)  # fmt: skip
    return alt.vconcat(curve, rows, spacing=6)


def _corrected_rows(document: dict[str, Any]) -> list[list[str]]:
    """Per question and answer: the corrected share beside the judge's and the labels'."""
    rows = []
    for e in document["estimates"]:
        if "estimate" not in e:
            continue
        alone = e["labels_alone"]
        worth = e.get("effective_labels")
        rows.append([
            e["question"], f"mean {e['of']}" if e["what"] == "mean" else e["of"],
            _num(e["estimate"]), f"{_num(e['low'])}\u2013{_num(e['high'])}", _num(e["judge"]),
            f"{e['judge_off']:+.3f}", f"{_num(alone['low'])}\u2013{_num(alone['high'])}",
            f"{e['labels']:,}", "\u2013" if worth is None else f"{worth:,.0f}",
        ])  # fmt: skip
    return rows


def _labelled(section: Section, agreement: dict[str, Any] | None,
              corrected: dict[str, Any] | None) -> None:  # fmt: skip
    """What the labels add: the corrected shares, and the reliability diagrams."""
    if corrected is not None:
        level = f"{corrected['confidence']:.0%}"
        headers = ["question", "answer", "corrected", f"{level} interval", "judge", "judge off",
                   "labels alone", "labels", "worth"]  # fmt: skip
        section.tables.append(Table(
            headers, _corrected_rows(corrected),
            frozenset(["corrected", "judge", "judge off", "labels", "worth"]),
            caption="the corpus's shares corrected by the labels (evalpipe infer): worth is "
            "how many labels alone would be as precise",
        ))  # fmt: skip
        section.notes.extend(corrected["notes"])
    for q in (agreement or {}).get("questions", []):
        if q["kind"] == "noul" and q.get("reliability"):
            chart = reliability_chart(q["key"], q["reliability"], q.get("reliability_calibrated"))
            section.charts.append(Chart(f"{q['key']}-reliability", to_svg(chart)))


def trust_section(
    out: Output, agreement: dict[str, Any] | None = None, corrected: dict[str, Any] | None = None
) -> Section | None:
    """The section (module docstring), or None when the output has nothing of it. With
    labels: `agreement`, `evalpipe agree`'s document, and `corrected`, `evalpipe infer`'s."""
    roles = _roles(out)
    summary = (out.manifest or {}).get("summary") or {}
    canaries = _canaries(out)
    corrected = corrected if corrected is not None else out.corrected  # `infer --record`'s
    if not roles and not canaries and agreement is None and corrected is None:
        return None
    section = Section(
        "trust", "Trust",
        "Calibrated columns (evalpipe calibrate) beside the judge's own, the rows each question "
        "kept for its promised agreement with people, the canary asked before each run, and, "
        "with labels, the corpus's shares they correct and the judge's reliability.",
    )  # fmt: skip
    _labelled(section, agreement, corrected)
    if roles:
        headers = ["question", "calibrated columns", "mean (judge)", "mean (calibrated)", "kept"]
        section.tables.append(Table(headers, _calibrated_rows(out, roles), wide=frozenset(
            {"calibrated columns"})))  # fmt: skip
    promises = _promises(summary if isinstance(summary, dict) else {})
    if promises:
        headers = ["question", "promise", "threshold", "bound", "held-out ECE"]
        section.tables.append(Table(headers, promises, caption="the last run's promise"))
    if canaries:
        headers = ["run", "canary", "answered", "compared with", "lowest agreement"]
        section.tables.append(Table(headers, canaries, frozenset({"lowest agreement"})))
    return section
