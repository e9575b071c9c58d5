"""Each question's figures: what the answered rows said, as histograms, shares and means.

A question's figures cost at most two streaming passes over the parts: a group-by on the chosen
option (choice only), then one pass that reads each of the question's columns once and
computes every histogram and mean at the same time. Histograms are per-bin sums over a bin
index computed first (`_bins`), because a group-by per histogram would read the parts again,
and sums of an inline expression make polars evaluate it once per bin (8x slower, measured).
Error rows have null answers, and nulls fall in no bin and no mean, so no filter is needed.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from evalpipe.reading import Output, Question
from evalpipe.report.data import collect

BINS = 20  # histogram bins over a value's range (0-1 in steps of 0.05 for probabilities)
TOP_OPTIONS = 20  # a choice chart shows this many options by share; the rest are "other"
TOP_DISTRIBUTIONS = 8  # options whose probability distribution is drawn, by share
OTHER = "other"
# A mean is a sum, and a streaming pass or a parallel group-by adds its parts in whatever order
# its threads finish: two reads of one output (on disk, in an object store) could put a chart's
# point at 100 or at 99.99999999999997 (seen). Means are rounded to this many decimals, far
# below what any chart or table shows, so the same output always gives the same page.
MEAN_DECIMALS = 12

# name -> (value, low, high): a histogram to compute over [low, high] in BINS bins.
Values = dict[str, tuple[pl.Expr, float, float]]


@dataclass(frozen=True, slots=True)
class QuestionFigures:
    """What one question's answered rows said; empty tables when no row was answered."""

    question: Question
    answered: int
    mean: float | None  # mean p(yes) or expected score; None for choice
    histograms: dict[str, pl.DataFrame]  # "noul" | "score" | "confidence" -> start, end, rows
    probabilities: pl.DataFrame  # option or level -> mean probability over answered rows
    options: pl.DataFrame  # choice: option, rows, share, mean_confidence, mean_probability
    distributions: pl.DataFrame  # choice: option, start, end, rows (the most chosen + other)


def _bin(value: pl.Expr, low: float, high: float) -> pl.Expr:
    return ((value - low) / (high - low) * BINS).floor().clip(0, BINS - 1).cast(pl.Int8)


def _histogram(counts: list[int], low: float, high: float) -> pl.DataFrame:
    width = (high - low) / BINS
    starts = [low + b * width for b in range(BINS)]
    return pl.DataFrame({"start": starts, "end": [s + width for s in starts], "rows": counts})


def one_pass(
    frame: pl.LazyFrame, values: Values, means: dict[str, pl.Expr]
) -> tuple[dict[str, pl.DataFrame], dict[str, float | None]]:
    """Histograms of `values` and means of `means`, in one streaming pass over `frame`."""
    bins = [_bin(e, lo, hi).alias(f"h{i}") for i, (e, lo, hi) in enumerate(values.values())]
    raw = [e.alias(f"m{j}") for j, e in enumerate(means.values())]
    sums = [
        (pl.col(f"h{i}") == b).sum().alias(f"h{i}_{b}")
        for i in range(len(bins))
        for b in range(BINS)
    ]
    avgs = [pl.col(f"m{j}").mean().round(MEAN_DECIMALS) for j in range(len(raw))]
    if not sums and not avgs:
        return {}, {}
    row = collect(frame.select(*bins, *raw).select(*sums, *avgs)).row(0, named=True)
    hists = {
        name: _histogram([int(row[f"h{i}_{b}"]) for b in range(BINS)], lo, hi)
        for i, (name, (_, lo, hi)) in enumerate(values.items())
    }
    return hists, {name: row[f"m{j}"] for j, name in enumerate(means)}


def _chosen(out: Output, q: Question) -> pl.DataFrame:
    """Rows that chose each option and their mean confidence (options never chosen: absent)."""
    return collect(
        out.scan()
        .filter(pl.col(q.head).is_not_null())
        .group_by(pl.col(q.head).alias("option"))
        .agg(
            pl.len().alias("rows"),
            pl.col(q.confidence).mean().round(MEAN_DECIMALS).alias("mean_confidence"),
        )
    )


def _options(q: Question, chosen: pl.DataFrame, means: dict[str, float | None]) -> pl.DataFrame:
    """Every option (chosen or not, and any chosen value the layout lacks), most chosen first."""
    listed = pl.DataFrame(
        {"option": list(q.probs), "mean_probability": [means[p] for p in q.probs]},
        schema={"option": pl.String, "mean_probability": pl.Float64},
    )
    return (
        listed.join(chosen, on="option", how="full", coalesce=True)
        .with_columns(pl.col("rows").fill_null(0).cast(pl.Int64))
        .with_columns(share=pl.col("rows") / pl.col("rows").sum().clip(1))
        .sort("rows", "option", descending=[True, False], nulls_last=True)
        .select("option", "rows", "share", "mean_confidence", "mean_probability")
    )


def _choice_values(q: Question, shown: list[str]) -> Values:
    """The shown options' probabilities and, with more options, what all the others got."""
    values: Values = {p: (pl.col(q.prob(p)), 0.0, 1.0) for p in shown}
    rest = len(q.probs) - len(shown)
    if rest > 0 and shown:
        together = 1.0 - pl.sum_horizontal(pl.col(q.prob(p)) for p in shown)
        # sum_horizontal counts a null as 0: keep error rows (all null) out of the histogram
        values[f"{OTHER} {rest} together"] = (
            pl.when(pl.col(q.head).is_not_null()).then(together),
            0.0,
            1.0,
        )
    return values


def _long(hists: dict[str, pl.DataFrame], names: list[str]) -> pl.DataFrame:
    frames = [hists[n].with_columns(option=pl.lit(n)) for n in names]
    schema = {"option": pl.String, "start": pl.Float64, "end": pl.Float64, "rows": pl.Int64}
    if not frames:
        return pl.DataFrame(schema=schema)
    return pl.concat(frames).select(list(schema)).cast(schema)  # type: ignore[arg-type]


def _values(q: Question) -> Values:
    if q.kind == "noul":
        return {"noul": (pl.col(q.head), 0.0, 1.0)}
    values: Values = {}
    if q.kind == "score":
        values["score"] = (pl.col(q.head), 0.0, float(max(len(q.probs) - 1, 1)))
    values["confidence"] = (pl.col(q.confidence), 0.0, 1.0)
    return values


def question_figures(out: Output, q: Question) -> QuestionFigures:
    """Everything the report draws for question `q`."""
    chosen = _chosen(out, q) if q.kind == "choice" else pl.DataFrame()
    ranked = (
        chosen.sort("rows", "option", descending=[True, False]) if q.kind == "choice" else chosen
    )
    shown = ranked["option"].head(TOP_DISTRIBUTIONS).to_list() if q.kind == "choice" else []
    shown = [p for p in shown if p in q.probs]
    extra = _choice_values(q, shown) if q.kind == "choice" else {}
    means = {p: pl.col(q.prob(p)) for p in q.probs}
    head = {"\x00head": pl.col(q.head)} if q.kind != "choice" else {}
    hists, avgs = one_pass(out.scan(), {**_values(q), **extra}, {**means, **head})
    first = next(iter(_values(q)))  # p(yes) or confidence: null exactly when not answered
    probabilities = pl.DataFrame(
        {"name": _shown_names(q), "mean_probability": [avgs[p] for p in q.probs]},
        schema={"name": pl.String, "mean_probability": pl.Float64},
    )
    return QuestionFigures(
        question=q,
        answered=int(hists[first]["rows"].sum()),
        mean=avgs.get("\x00head"),
        histograms={k: hists[k] for k in _values(q)},
        probabilities=probabilities,
        options=_options(q, chosen, avgs) if q.kind == "choice" else pl.DataFrame(),
        distributions=_long(hists, [*shown, *(n for n in extra if n not in shown)]),
    )


def _shown_names(q: Question) -> list[str]:
    """A score's levels as the table names them (its labels: `poor`, `fair`...), numbered
    where two labels are alike; a choice's options are their own names."""
    if q.kind != "score":
        return list(q.probs)
    labels = [q.label(p) for p in q.probs]
    if len(set(labels)) < len(labels):
        return [f"{p}: {label}" for p, label in zip(q.probs, labels, strict=True)]
    return labels


def top_options(options: pl.DataFrame, top: int = TOP_OPTIONS) -> pl.DataFrame:
    """The `top` options by rows plus one "other (N options)" row that sums the rest."""
    if options.height <= top + 1:
        return options
    head, rest = options.head(top), options.slice(top)
    weight = pl.col("rows") / pl.col("rows").sum().clip(1)
    other = rest.select(
        pl.lit(f"{OTHER} ({rest.height} options)").alias("option"),
        pl.col("rows").sum(),
        pl.col("share").sum(),
        (pl.col("mean_confidence").fill_null(0) * weight).sum().alias("mean_confidence"),
        pl.col("mean_probability").sum(),
    )
    return pl.concat([head, other.cast(head.schema)])
