"""`evalpipe infer OUTPUT --labels LABELS`: the corpus's true share of each answer, from the
judge's answers on every row corrected by people's labels on a sample (`evalpipe.analysis.ppi`).

Per question and answer (noul: yes; choice: each option; score: each level, and the mean
level), over the rows the judge answered: the corrected estimate and its interval at the
confidence asked, the judge alone (the mean of its probability for that answer: what the
output says, and how far it is from the estimate) and the share of its answers, the labels
alone (their classical interval), lambda, and the labels the judge makes these worth. Per
value of a column of the output with `by`.

Which labelled rows count (the estimate is unbiased only for rows drawn by a known design):
- a labels file without `_design` and `_inclusion_prob` is taken as a uniform random sample
  of the answered rows (said in a note: labels picked by hand are not one);
- `_design` uniform or stratified rows count with their `_inclusion_prob` (and `_stratum`;
  a uniform row without one counts too: in a uniform sample every row weighs the same);
  rows of "uncertain" (the judge's least sure) or "browse" (picked while browsing), or without
  an inclusion probability, are left out with a note; where two probability designs are
  present, the one with more labelled rows is used (two samples are not one);
- several reviewers: a row's label is the mean of its reviewers' (each reviewer's last
  non-empty label: `labels.per_reviewer`), so every label counts and rows stay independent;
  their agreement among themselves is reported (`reviewers`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import numpy as np
import polars as pl

from evalpipe.analysis.labels import REVIEWER, per_reviewer, question_keys
from evalpipe.analysis.ppi import ppi_mean
from evalpipe.analysis.reviewers import reviewer_agreement
from evalpipe.analysis.tolabel import DESIGN, INCLUSION, STRATUM
from evalpipe.errors import InputError
from evalpipe.reading import Output, Question

PROBABILITY_DESIGNS = ("uniform", "stratified")
WEIGHT = "_sample_weight"
LABEL, DRAWN = "\x00y", "\x00d"


def _targets(q: Question) -> Iterator[tuple[str, str, pl.Expr, pl.Expr, pl.Expr | None]]:
    """(what, of, the judge's prediction, the label's value, the judge's answer) per figure:
    the label's value from `per_reviewer`'s coerced label column `q.key`."""
    label = pl.col(q.key)
    if q.kind == "noul":
        yield "share", "yes", pl.col(q.head), label.cast(pl.Float64), pl.col(q.head) >= 0.5
        return
    top = pl.concat_list(q.prob_columns).list.arg_max()
    for i, (column, name) in enumerate(zip(q.prob_columns, q.labels, strict=True)):
        value = name if q.kind == "choice" else i
        answered = pl.col(q.head) == name if q.kind == "choice" else top == i
        yield "share", name, pl.col(column), (label == value).cast(pl.Float64), answered
    if q.kind == "score":
        yield "mean", "level", pl.col(q.head), label.cast(pl.Float64), None


def _design(labelled: pl.DataFrame, idc: str, notes: list[str]) -> pl.DataFrame:
    """Per labelled id: its design weight (1 / pi) and stratum; ids no design covers left out."""
    if DESIGN not in labelled.columns and INCLUSION not in labelled.columns:
        notes.append(
            "the labels say nothing of how their rows were drawn (no _design, _inclusion_prob): "
            "taken as a uniform random sample of the answered rows"
        )
        return (
            labelled.select(idc)
            .unique()
            .with_columns(pl.lit(1.0).alias(DRAWN), pl.lit(None, pl.Int64).alias(STRATUM))
        )
    meta = labelled.group_by(idc).agg(
        *[pl.col(c).drop_nulls().first() for c in (DESIGN, INCLUSION, STRATUM)
          if c in labelled.columns]
    )  # fmt: skip
    design = pl.col(DESIGN) if DESIGN in meta.columns else pl.lit("uniform")
    pi = pl.col(INCLUSION).cast(pl.Float64) if INCLUSION in meta.columns else pl.lit(None)
    meta = meta.with_columns(design.alias(DESIGN), pi.alias(INCLUSION))
    # a uniform sample's rows all weigh the same: one without its probability still counts
    uniform = (pl.col(DESIGN) == "uniform") & pl.col(INCLUSION).is_null()
    meta = meta.with_columns(
        pl.when(uniform).then(1.0).otherwise(pl.col(INCLUSION)).alias(INCLUSION)
    )
    usable = meta.filter(pl.col(DESIGN).is_in(PROBABILITY_DESIGNS) & (pl.col(INCLUSION) > 0))
    if usable.height < meta.height:
        counts = meta.join(usable, on=idc, how="anti").group_by(DESIGN).len().sort(DESIGN)
        said = ", ".join(f"{r['len']} {r[DESIGN] or 'of no design'}" for r in counts.to_dicts())
        notes.append(
            f"labelled rows not drawn by a probability design (or without an inclusion "
            f"probability), left out of the estimate: {said}"
        )
    designs = usable.group_by(DESIGN).len().sort("len", DESIGN, descending=[True, False])
    if designs.height > 1:
        kept = designs[DESIGN][0]
        notes.append(f"labels of several designs: the {kept} sample is used, the others left out")
        usable = usable.filter(pl.col(DESIGN) == kept)
    stratum = pl.col(STRATUM).cast(pl.Int64) if STRATUM in usable.columns else pl.lit(None)
    return usable.select(idc, (1.0 / pl.col(INCLUSION)).alias(DRAWN), stratum.alias(STRATUM))


def estimate(
    table: Output,
    labels: pl.DataFrame,
    *,
    confidence: float = 0.9,
    by: str | None = None,
    labels_name: str = "",
) -> dict[str, Any]:
    """The corrected shares and means of `table` from `labels` (module docstring), as
    `evalpipe infer --json`'s document."""
    if not 0 < confidence < 1:
        raise InputError(f"--confidence must be between 0 and 1 (got {confidence})")
    notes: list[str] = []
    idc = table.id_column
    keys = question_keys(table, labels, notes)
    reviewed = per_reviewer(table, labels, keys)
    drawn = _design(reviewed, idc, notes)
    scan = table.scan()
    names = scan.collect_schema().names()
    if by is not None and by not in names:
        raise InputError(f"--by: no column '{by}' in the output")
    weighted = WEIGHT in names
    if weighted:
        notes.append("the output is a sample of the corpus (_sample_weight): both samples count")
    found = []
    for q in table.questions:
        if q.key in keys:
            found += _question(q, scan, reviewed, drawn, idc, by, weighted, confidence, notes)
    return {
        "output": table.shown, "labels": labels_name, "id_column": idc,
        "confidence": confidence, "by": by, "sampled_output": weighted,
        "labelled_rows": int(drawn.height),
        "reviewers": reviewer_agreement(reviewed, idc, keys) if REVIEWER in labels.columns else [],
        "estimates": found, "notes": notes,
    }  # fmt: skip


def _question(
    q: Question, scan: pl.LazyFrame, reviewed: pl.DataFrame, drawn: pl.DataFrame, idc: str,
    by: str | None, weighted: bool, confidence: float, notes: list[str],
) -> list[dict[str, Any]]:  # fmt: skip
    wanted = [idc, *dict.fromkeys([q.head, *q.prob_columns])]
    wanted += [c for c in (by, WEIGHT if weighted else None) if c is not None and c != idc]
    rows = scan.select(wanted).filter(pl.col(q.head).is_not_null()).collect()
    label = reviewed.select(idc, q.key).drop_nulls(q.key)
    label = label.with_columns(pl.col(idc).cast(rows.schema[idc], strict=False))
    out = []
    for what, of, judge, value, answered in _targets(q):
        ys = label.group_by(idc).agg(value.mean().alias(LABEL))  # every reviewer's label
        ys = ys.join(drawn.with_columns(pl.col(idc).cast(rows.schema[idc], strict=False)), on=idc)
        frame = rows.with_columns(
            judge.cast(pl.Float64).alias("\x00f"),
            (answered if answered is not None else pl.lit(None)).cast(pl.Float64).alias("\x00a"),
        ).join(ys, on=idc, how="left")
        groups = [None] if by is None else frame[by].unique(maintain_order=True).sort().to_list()
        for group in groups:
            part = frame if by is None else frame.filter(pl.col(by).eq_missing(group))
            figure = _figure(q, what, of, part, weighted, confidence, notes)
            out.append({**figure, "group": group} if by is not None else figure)
    return out


def _figure(
    q: Question, what: str, of: str, part: pl.DataFrame, weighted: bool, confidence: float,
    notes: list[str],
) -> dict[str, Any]:  # fmt: skip
    top = float(max(1, len(q.probs) - 1)) if what == "mean" else 1.0
    labelled = part.filter(pl.col(LABEL).is_not_null())
    head: dict[str, Any] = {"question": q.key, "kind": q.kind, "what": what, "of": of,
                            "rows": part.height, "labels": labelled.height}  # fmt: skip
    w = part[WEIGHT].fill_null(0.0).to_numpy() if weighted else None
    f = part["\x00f"].to_numpy()
    head["judge"] = float(np.average(f, weights=w)) if part.height else None
    answers = part["\x00a"].drop_nulls()
    head["judge_answers"] = None if answers.is_empty() else float(
        np.average(part["\x00a"].to_numpy(), weights=w)
    )  # fmt: skip
    if labelled.height < 2:
        notes.append(f"question '{q.key}' {what} {of}: fewer than 2 labelled rows, no estimate")
        return head
    d = labelled[DRAWN].to_numpy()
    if weighted:
        d = d * labelled[WEIGHT].fill_null(0.0).to_numpy()
    strata = labelled[STRATUM].fill_null(-1).to_numpy()
    found = ppi_mean(
        labelled[LABEL].to_numpy(), labelled["\x00f"].to_numpy(), f, confidence=confidence,
        design_weight=d, strata=strata, output_weight=w, bounds=(0.0, top),
    )  # fmt: skip
    shown = asdict(found)
    head.update(
        estimate=shown["estimate"], low=shown["low"], high=shown["high"], se=shown["se"],
        judge_off=head["judge"] - shown["estimate"], lam=shown["lam"],
        labels_alone={"estimate": shown["labels_estimate"], "low": shown["labels_low"],
                      "high": shown["labels_high"], "se": shown["labels_se"]},
        effective_labels=shown["effective_labels"],
    )  # fmt: skip
    return head


def infer_output(
    output: str | Output, labels: str | pl.DataFrame, *, confidence: float = 0.9,
    by: str | None = None, record: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """`evalpipe infer`, `ep.infer` and the report: the output (a path or opened) and the
    labels (a path or read) read, `estimate`'s document; with `record`, kept beside the rows
    (`Output.keep_corrected`), where `describe` and the report show it (`recorded` says
    where)."""
    from evalpipe.analysis.labels import read_labels
    from evalpipe.reading import open_output

    table = open_output(output) if isinstance(output, str) else output
    name = labels if isinstance(labels, str) else ""
    read = read_labels(labels) if isinstance(labels, str) else labels
    found = estimate(table, read, confidence=confidence, by=by, labels_name=name)
    for figure in found["estimates"]:  # JSON has no infinity: a label that is worth all rows
        if figure.get("effective_labels") == float("inf"):
            figure["effective_labels"] = None
    if record:
        found["recorded_at"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        found["recorded"] = table.keep_corrected(found)
    return found


def sample_output(
    output: str, *, question: str, n: int, design: str = "stratified", seed: int | None = None
) -> pl.DataFrame:
    """`evalpipe sample` and `ep.label_sample`: the rows of `output` to label for `question`
    (`tolabel.draw_label_sample`), with an empty column named by the question for the labels."""
    from evalpipe.analysis.tolabel import draw_label_sample
    from evalpipe.reading import open_output

    table = open_output(output)
    q = table.question(question)
    if q is None:
        names = ", ".join(x.key for x in table.questions)
        raise InputError(f"--question: '{question}' is no question of the output ({names})")
    drawn = draw_label_sample(
        table.scan(), id_column=table.id_column, question=q, n=n, design=design, seed=seed
    )
    return drawn.with_columns(pl.lit(None, pl.String).alias(q.key)).select(
        table.id_column, q.key, DESIGN, INCLUSION, STRATUM
    )
