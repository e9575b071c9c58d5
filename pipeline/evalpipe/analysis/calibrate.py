"""`evalpipe calibrate OUTPUT --labels LABELS`: the judge's probabilities made to mean what
they say, fitted on people's labels, and what that is worth on rows it was not fitted on.

Per question, over the rows the judge answered and a person labelled (matched as `agree`
matches them), a map (`evalpipe.analysis.maps`) is cross-fitted: the rows are cut into
`folds` (stratified by the label where every label has enough rows), each fold's rows are
mapped by the map fitted on the others, and the figures compare the judge's own probabilities
with those held-out ones: the expected calibration error (ECE), the Brier score and the log
loss, before and after, each with its 95% bootstrap interval, and the change with its own
(paired: the same rows resampled for both). The map the file keeps is then fitted on every
labelled row. `--by COL` adds the figures per value of a column of the labels (or of the
output), so a calibration that holds overall but not for one group is seen.

The file (`evalpipe.output.Calibration`) is tied to the service and the versioned model that
answered the labelled rows and to each question's fingerprint; it also keeps each labelled
row's held-out calibrated confidence and whether the person agreed with the calibrated answer,
which a job's `calibration.target_agreement` chooses its threshold on
(`evalpipe.planning.choose_threshold`); `--target-agreement` shows that choice here.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from evalpipe.analysis import maps, resampled
from evalpipe.analysis.agree import reliability
from evalpipe.analysis.intervals import interval
from evalpipe.analysis.labels import coerced, labelled_ids, matched
from evalpipe.calibration import CalibratedQuestion, Calibration
from evalpipe.errors import InputError
from evalpipe.planning import choose_threshold
from evalpipe.reading import Output, Question

FOLDS = 5
MIN_ROWS = 20  # labelled rows below which a question is not calibrated
SEED = 20261201


def _mean(values: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.asarray(np.mean(values, axis=axis))


def _finite(value: Any) -> float | None:
    return None if value is None or not np.isfinite(value) else round(float(value), 6)


def _figure(
    statistic: Any, before: tuple[np.ndarray, ...], after: tuple[np.ndarray, ...]
) -> dict[str, Any]:
    """One figure before and after, each with its 95% interval, and the change with its own:
    BCa for a mean (Brier, log loss); the ECE, which is not one, the percentile interval as
    `agree` gives it (a resample's ECE is biased up, so a near-calibrated figure can sit below
    its interval: the interval says how far it may be from zero, the change how far it moved)."""
    per_resample = statistic is resampled.ece
    width = len(before)

    def change(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
        return statistic(*samples[width:], axis=axis) - statistic(*samples[:width], axis=axis)

    out: dict[str, Any] = {}
    for name, samples, stat in (("before", before, statistic), ("after", after, statistic),
                                ("change", before + after, change)):  # fmt: skip
        with np.errstate(all="ignore"):
            value = float(stat(*samples))
            ci = interval(samples, stat, vectorized=True, per_resample=per_resample)
        out[name] = _finite(value)
        out[f"{name}_interval"] = None if ci is None else [_finite(ci[0]), _finite(ci[1])]
    return out


def _folds(y: np.ndarray, folds: int) -> list[np.ndarray]:
    """Each fold's row indices: stratified by label when every label has `folds` rows."""
    from sklearn.model_selection import KFold, StratifiedKFold

    counts = np.unique(y, return_counts=True)[1]
    splitter: Any = (
        StratifiedKFold(folds, shuffle=True, random_state=SEED)
        if counts.min() >= folds
        else KFold(folds, shuffle=True, random_state=SEED)
    )
    return [test for _, test in splitter.split(np.zeros(len(y)), y)]


def held_out(kind: str, method: str, probs: np.ndarray, y: np.ndarray, folds: int) -> np.ndarray:
    """Each row's calibrated probabilities from the map fitted without its fold."""
    out = np.empty_like(probs)
    everyone = np.arange(len(y))
    for test in _folds(y, folds):
        train = np.setdiff1d(everyone, test)
        params = maps.fit(kind, method, probs[train], y[train])
        out[test] = maps.apply(kind, method, params, probs[test])
    return out


def _figures(kind: str, raw: np.ndarray, held: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """ECE, Brier and log loss of the judge's own probabilities and of the held-out ones."""
    sides = []
    for probs in (raw, held):
        answer, sure = maps.confidence(kind, probs)
        right = (answer == y).astype(np.int64)
        ece_samples = (y, probs) if kind == "noul" else (right, sure)
        sides.append((ece_samples, maps.per_row(kind, probs, y)))
    (ece_b, rows_b), (ece_a, rows_a) = sides
    return {
        "ece": _figure(resampled.ece, ece_b, ece_a),
        "brier": _figure(_mean, (rows_b["brier"],), (rows_a["brier"],)),
        "log_loss": _figure(_mean, (rows_b["log_loss"],), (rows_a["log_loss"],)),
    }


def _labels_and_probs(q: Question, rows: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    label = f"{q.key}\x00label"
    y_series = coerced(q, rows[label])
    if q.kind == "noul":
        return y_series.to_numpy().astype(np.int64), rows[q.head].to_numpy().astype(float)
    if q.kind == "choice":
        codes = {option: i for i, option in enumerate(q.probs)}
        y = y_series.replace_strict(codes, return_dtype=pl.Int64).to_numpy()
    else:
        y = y_series.to_numpy().astype(np.int64)
    return y, rows.select(q.prob_columns).to_numpy().astype(float)


def _question(
    q: Question, rows: pl.DataFrame, fingerprint: str, options: dict[str, Any], notes: list[str]
) -> tuple[CalibratedQuestion | None, dict[str, Any]]:
    label = f"{q.key}\x00label"
    usable = rows.filter(pl.col("_error_type").is_null() & pl.col(label).is_not_null())
    usable = usable.filter(pl.col(q.head).is_not_null())
    method = "temperature" if q.kind != "noul" else options["method"]
    shown: dict[str, Any] = {"key": q.key, "kind": q.kind, "n": usable.height, "method": method}
    if usable.height < MIN_ROWS:
        notes.append(f"question '{q.key}': {usable.height} answered and labelled rows, fewer "
                     f"than {MIN_ROWS}: not calibrated")  # fmt: skip
        return None, shown
    y, raw = _labels_and_probs(q, usable)
    if len(np.unique(y)) < 2:
        notes.append(f"question '{q.key}': the labels hold one category only: not calibrated")
        return None, shown
    folds = int(min(options["folds"], len(y) // 2))
    held = held_out(q.kind, method, raw, y, folds)
    params = maps.fit(q.kind, method, raw, y)
    answer, sure = maps.confidence(q.kind, held)
    agreed = (answer == y).astype(np.int64)
    shown.update(params=params, folds=folds, held_out=_figures(q.kind, raw, held, y))
    right_raw = (maps.confidence(q.kind, raw)[0] == y).astype(np.int64)
    base = (y, raw) if q.kind == "noul" else (right_raw, maps.confidence(q.kind, raw)[1])
    shown["reliability"] = {"before": reliability(*base), "after": reliability(
        *((y, held) if q.kind == "noul" else (agreed, sure)))}  # fmt: skip
    shown["agreement_held_out"] = round(float(agreed.mean()), 6)
    labels = tuple(q.label(p) for p in q.probs)
    entry = CalibratedQuestion(
        q.kind, fingerprint, method, params, labels, len(y), shown["held_out"],
        tuple(round(float(s), 9) for s in sure), tuple(int(a) for a in agreed),
    )  # fmt: skip
    if options["target"] is not None:
        figures = choose_threshold(
            entry.scores, entry.agreed, options["target"], options["confidence"]
        )
        entry = entry.abstaining(**figures)
        shown["abstain"] = entry.abstain.shown() if entry.abstain else None
    if options["by"] is not None:
        shown["by"] = _by_group(q.kind, usable[options["by"]], raw, held, y)
    return entry, shown


def _by_group(
    kind: str, groups: pl.Series, raw: np.ndarray, held: np.ndarray, y: np.ndarray
) -> list[dict[str, Any]]:
    """ECE and Brier before and after per value of the `--by` column (no intervals)."""
    out = []
    values = groups.cast(pl.String).fill_null("(null)").to_numpy()
    for value in sorted(set(values.tolist())):
        mask = values == value
        row: dict[str, Any] = {"group": value, "n": int(mask.sum())}
        for side, probs in (("before", raw[mask]), ("after", held[mask])):
            answer, sure = maps.confidence(kind, probs)
            right = (answer == y[mask]).astype(np.int64)
            samples = (y[mask], probs) if kind == "noul" else (right, sure)
            row[f"ece_{side}"] = _finite(resampled.ece(*samples))
            row[f"brier_{side}"] = _finite(maps.per_row(kind, probs, y[mask])["brier"].mean())
        out.append(row)
    return out


def _judge(rows: pl.DataFrame) -> tuple[str, str]:
    """The service and the versioned model that answered the labelled rows: one of each."""
    answered = rows.filter(pl.col("_error_type").is_null())
    models = answered["_model"].drop_nulls().unique().sort().to_list()
    services = (
        answered["_service"].drop_nulls().unique().sort().to_list()
        if "_service" in answered.columns
        else []
    )
    if len(models) != 1 or len(services) > 1:
        said = ", ".join(models) or "none"
        raise InputError(
            f"--labels: the labelled rows were answered by models {said}; a calibration is of one "
            "model: label rows one model answered (or filter the output to them)"
        )
    return (services[0] if services else ""), models[0]


def _with_group(table: Output, labels: pl.DataFrame, rows: pl.DataFrame, by: str) -> pl.DataFrame:
    """`rows` with the `--by` column: the labels' (joined on the id), else the output's."""
    idc = table.id_column
    if by in labels.columns and by != idc:
        groups = labels.select(pl.col(idc).cast(rows.schema[idc]), pl.col(by).alias(f"{by}\x00by"))
        return rows.join(groups, on=idc, how="left").with_columns(pl.col(f"{by}\x00by").alias(by))
    if by in rows.columns:
        return rows
    raise InputError(f"--by: no column '{by}' in the labels or the output")


def fit_calibration(
    table: Output,
    labels: pl.DataFrame,
    *,
    method: str = "platt",
    folds: int = FOLDS,
    by: str | None = None,
    target: float | None = None,
    confidence: float = 0.9,
    questions: dict[str, dict[str, Any]] | None = None,
    labels_name: str = "",
) -> tuple[Calibration | None, dict[str, Any]]:
    """The calibration of `table`'s judge on `labels` (`read_labels`), and its figures (the
    module docstring); None when no question could be calibrated. `questions` (a job's, as
    the service takes them) stand in for the fingerprints an older output did not record."""
    if method not in maps.NOUL_METHODS:
        raise InputError(f"--method: {method!r} is not one of {', '.join(maps.NOUL_METHODS)}")
    notes: list[str] = []
    rows = matched(table, labels, notes)
    if by is not None:
        rows = _with_group(table, labels, rows, by)
    fingerprints = Calibration.fingerprints_of(table.schema)
    if questions is not None:
        fingerprints = {k: Calibration.fingerprint(q) for k, q in questions.items()}
    service, model = _judge(rows)
    options = {"method": method, "folds": folds, "by": by, "target": target,
               "confidence": confidence}  # fmt: skip
    keys = {c.split("\x00")[0] for c in rows.columns if c.endswith("\x00label")}
    fitted: dict[str, CalibratedQuestion] = {}
    shown = []
    for q in table.questions:
        if q.key not in keys:
            continue
        if q.key not in fingerprints:
            raise InputError(
                f"output '{table.shown}' does not record question '{q.key}' as it was asked "
                "(written by an older evalpipe): pass --config with the job that wrote it"
            )
        entry, figures = _question(q, rows, fingerprints[q.key], options, notes)
        shown.append(figures)
        if entry is not None:
            fitted[q.key] = entry
    source = {"output": table.shown, "labels": labels_name,
              "labelled_rows": labelled_ids(table, labels), "matched_rows": rows.height,
              "folds": folds}  # fmt: skip
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    calibration = Calibration(service, model, stamp, fitted, source) if fitted else None
    document = {"output": table.shown, "service": service, "model": model, "fitted": stamp,
                **source, "questions": shown, "notes": notes}  # fmt: skip
    return calibration, document


def calibrate_output(
    output: str, labels: str, out: Path | None, config: Path | None = None, **options: Any
) -> dict[str, Any]:
    """`evalpipe calibrate` and `ep.calibrate`: the output and labels read, the calibration
    fitted (`fit_calibration`'s `options`), its file written to `out` (when given and a
    question was calibrated); the figures, with `file` where it went (None: not written)."""
    from evalpipe.analysis.labels import read_labels
    from evalpipe.reading import open_output

    questions = None
    if config is not None:
        from evalpipe.config import load_config
        from evalpipe.contract import question_dicts

        questions = question_dicts(load_config(config).parsed_questions)
    table = open_output(output)
    found, document = fit_calibration(
        table, read_labels(labels), questions=questions, labels_name=labels, **options
    )
    document["file"] = None
    if found is not None and out is not None:
        found.write(out)
        document["file"] = str(out)
    elif found is None:
        document["notes"].append("no question could be calibrated: no file was written")
    return document
