"""The canary: labelled rows, apart from the corpus, asked fresh before it; a run whose judge
moved behind the same model ID stops before it spends a night on it.

A nightly job trusts that a versioned model's answers do not move, and the answer cache would
replay yesterday's answers if they did. So with `canary.labels` (`--canary`) the run first asks
the canary rows itself (never from the cache: `EvalClient` straight to the service, on the
account's pace), each row's questions as the run would ask them alone, then compares, per
question, what a user acts on (yes at p >= 0.5, the option, the most probable level):

- with the rows' labels, per question: the agreement's one-sided Clopper-Pearson upper bound
  must reach `canary.min_agreement` (when set; else it is reported): a drop is a stop only
  beyond what sampling noise allows;
- with the last passing run's canary answers on the same service and model (kept by
  `evalpipe.planning.Learned`, only for rows whose state is the same): the lower bound of the
  share of answers, every question's together, that changed must stay within
  `canary.max_changed` (one test over all of them: a change behind the model ID moves a row's
  answers to several questions, and more answers see it sooner).

The comparisons held to a limit share 1 - `canary.confidence` (Bonferroni: the last run's
takes half of it when the labels' are held too, and the labels' share the rest), so an
unchanged service passes at least `confidence` of nights.
A run that passes keeps its answers for the next (a failing one does not: a moved judge never
becomes the baseline, until `canary.compare_last: false` accepts it). The result is plain data
the engine records (its metric, the JSON log, the lineage facet, the summary and the report)
and, when it failed, stops the run with (`CanaryFailed`, exit 8), before any corpus row is
sent.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from evalpipe.analysis import coerce_labels
from evalpipe.contract import canonical, validate_questions
from evalpipe.errors import InputError
from evalpipe.input import Source, SourceSpec
from evalpipe.planning import Learned, PreparedJob, clopper_pearson, state_key
from evalpipe.preflight.agreement import decision
from evalpipe.preflight.measure import paced_client
from evalpipe.reading import questions_of
from evalpipe.send import EvalClient, api_key, request_body

KEY = "canary.labels"
MIN_ANSWERED = 0.5  # a canary with fewer of its rows answered cannot vouch for the judge
IN_FLIGHT = 8


@dataclass(frozen=True)
class CanaryRows:
    """The canary file read: each row's id (as text), state and its state's digest, and per
    question the labels (None where a row is not labelled)."""

    ids: list[str]
    states: list[Any]
    hashes: list[str]
    labels: dict[str, list[Any]]
    digest: str  # of the questions and the file: which kept answers are this canary's
    invalid: int = 0  # rows without a state (null or blank): left out


def read_canary(prepared: PreparedJob) -> CanaryRows:
    """The file of `canary.labels`: the job's id and state columns and a label column per
    question key; InputError (one line naming `canary.labels`) when it cannot be."""
    config = prepared.config
    path = config.canary.labels
    assert path is not None
    try:
        source = Source(SourceSpec(path, config.input.id_column, config.input.state))
        source.check_unique_ids()
        rows = [row for batch in source.batches() for row in batch]
        frame = pl.read_parquet(path)
    except InputError as exc:
        raise InputError(f"{KEY}: {exc.message}") from None
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise InputError(f"{KEY}: '{path}' cannot be read: {exc}") from None
    labels = {}
    for q in questions_of(prepared.schema):
        if q.key in frame.columns:
            column = frame[q.key]
            try:
                values = coerce_labels(q, column.drop_nulls())
            except InputError as exc:
                raise InputError(exc.message.replace("--labels", KEY, 1)) from None
            shown = iter(_decisions(q.kind, q.probs, values.to_list()))
            labels[q.key] = [None if v is None else next(shown) for v in column.to_list()]
    if not labels:
        raise InputError(f"{KEY}: '{path}' has no column named by a question key")
    valid = [i for i, r in enumerate(rows) if r.state is not None]
    if not valid:
        raise InputError(f"{KEY}: '{path}' has no row with a state to ask")
    labels = {k: [v[i] for i in valid] for k, v in labels.items()}
    everyone, rows = len(rows), [rows[i] for i in valid]
    hashes = [state_key(r.state).hex() for r in rows if r.state is not None]
    ids = [str(r.id) for r in rows]
    named = {"questions": prepared.questions_digest(), "file": str(Path(path).resolve())}
    digest = hashlib.blake2b(canonical(named), digest_size=8).hexdigest()
    return CanaryRows(ids, [r.state for r in rows], hashes, labels, digest, everyone - len(valid))


def _decisions(kind: str, probs: tuple[str, ...], values: list[Any]) -> list[Any]:
    """Labels as `decision` gives a judge's answers: yes/no, the option, the level's key."""
    if kind == "noul":
        return [bool(v) for v in values]
    if kind == "score":
        return [probs[int(v)] for v in values]
    return list(values)


async def _ask(client: EvalClient, prepared: PreparedJob, rows: CanaryRows) -> list[dict[str, Any]]:
    """Each canary row's decisions per question ({} for a row not answered), asked fresh."""
    parsed = validate_questions(prepared.questions)
    slots = asyncio.Semaphore(IN_FLIGHT)
    model = prepared.config.model

    async def row(state: Any) -> dict[str, Any]:
        if state is None:
            return {}
        found: dict[str, Any] = {}
        for request in prepared.planner.plan(state).requests:
            body = request_body(state, model, prepared.questions, request.keys)
            async with slots:
                result = await client.evaluate(
                    body, {k: parsed[k] for k in request.keys}, request.tokens
                )
            if result.response is None:
                return {}
            found.update({k: decision(a.model_dump()) for k, a in result.response.answers.items()})
        return found

    return list(await asyncio.gather(*(row(s) for s in rows.states)))


def check_canary(
    prepared: PreparedJob,
    url: Future[str],
    run_id: str,
    *,
    warn: Callable[[str], None],
    rows: CanaryRows | None = None,
) -> dict[str, Any] | None:
    """The canary of `canary.labels` (its `rows`, read already or now) asked and compared
    (module docstring); None without one. The result's `passed` says whether the run may go
    on, `message` says why not in one line."""
    config = prepared.config
    if config.canary.labels is None:
        return None
    rows = rows or read_canary(prepared)
    key = api_key(config.service)

    async def asked() -> list[dict[str, Any]]:
        async with paced_client(prepared, url.result(), key) as client:
            return await _ask(client, prepared, rows)

    answers = asyncio.run(asked())
    learned = Learned.of(prepared)
    last = learned.canary(rows.digest) if config.canary.compare_last else None
    result = verdict(prepared, rows, answers, last)
    if result["passed"]:
        each = zip(rows.ids, rows.hashes, answers, strict=True)
        kept = {i: {"state": h, "answers": a} for i, h, a in each if a}
        learned.keep_canary(rows.digest, {"run_id": run_id, "rows": kept})
    if rows.invalid:
        warn(f"canary: {rows.invalid} of its rows have no state (null or blank): left out")
    if result["answered"] < len(rows.ids):
        warn(f"canary: {len(rows.ids) - result['answered']} of its rows were not answered")
    return result


@dataclass
class _Test:
    """One comparison: `k` of `n` (rows agreeing with their labels, or answers changed), and
    the limit that decides it (None: reported, not held to one)."""

    question: str  # a question key, or "all" for the answers of every question
    against: str  # "labels" or "last_run"
    k: int
    n: int
    limit: float | None  # canary.min_agreement or canary.max_changed

    def figures(self, confidence: float) -> dict[str, Any]:
        low, high = clopper_pearson(self.k, self.n, confidence)
        share = self.k / self.n if self.n else None
        failed = (
            self.limit is not None
            and self.n > 0
            and (high < self.limit if self.against == "labels" else low > self.limit)
        )
        return {"question": self.question, "against": self.against, "rows": self.n,
                "count": self.k, "share": share, "low": low, "high": high,
                "limit": self.limit, "confidence": round(confidence, 6),
                "failed": failed}  # fmt: skip


def _levels(tests: list[_Test], confidence: float) -> list[float]:
    """The confidence each comparison is held at: 1 - confidence shared (Bonferroni) by those
    held to a limit, the last run's taking half when the labels' are held too (a change behind
    the model ID is what the canary is for: it keeps the most power)."""
    alpha = 1 - confidence
    labels = sum(1 for t in tests if t.limit is not None and t.against == "labels")
    last = any(t.limit is not None and t.against == "last_run" for t in tests)
    to_labels = alpha / 2 if last and labels else alpha
    to_last = alpha - to_labels if labels else alpha
    return [1 - to_labels / max(1, labels) if t.against == "labels" else 1 - to_last for t in tests]


def _said(failed: list[dict[str, Any]], changed: dict[str, list[int]], model: str) -> list[str]:
    """What the failed comparisons say, one clause for the labels and one for the last run."""
    clauses = []
    labels = [t for t in failed if t["against"] == "labels"]
    if labels:
        each = ", ".join(f"'{t['question']}' {t['count']} of {t['rows']} ({t['share']:.1%}, "
                         f"at most {t['high']:.1%})" for t in labels)  # fmt: skip
        clauses.append(
            f"agreement with the labels fell below canary.min_agreement "
            f"{labels[0]['limit']:.1%} at {labels[0]['confidence']:.1%} confidence: {each}"
        )
    for t in failed:
        if t["against"] == "last_run":
            each = ", ".join(f"'{k}' {c} of {n}" for k, (c, n) in changed.items() if c)
            clauses.append(
                f"{t['count']} of {t['rows']} answers changed since the last run on {model} "
                f"({t['share']:.1%}; at least {t['low']:.1%} at {t['confidence']:.1%} "
                f"confidence, canary.max_changed "
                f"{t['limit']:.1%}): {each}"
            )
    return clauses


def _unchanged_pairs(
    key: str, rows: CanaryRows, answers: list[dict[str, Any]], before: dict[str, Any]
) -> list[tuple[Any, Any]]:
    """(tonight's, last run's) decision of `key`, over rows answered both times whose state is
    the same (a row whose text changed is a new row, not a changed answer)."""
    pairs = []
    for row_id, digest, now in zip(rows.ids, rows.hashes, answers, strict=True):
        then = before.get(row_id) or {}
        if key in now and then.get("state") == digest and key in (then.get("answers") or {}):
            pairs.append((now[key], then["answers"][key]))
    return pairs


def verdict(
    prepared: PreparedJob,
    rows: CanaryRows,
    answers: list[dict[str, Any]],
    last: dict[str, Any] | None,
) -> dict[str, Any]:
    """The canary's comparisons (module docstring) and whether the run may go on: per question
    its agreement with the labels (held to `min_agreement` when set); and the answers of every
    question changed since the last run, together (held to `max_changed`)."""
    section, model = prepared.config.canary, prepared.config.model
    tests: list[_Test] = []
    changed: dict[str, list[int]] = {}
    for key in prepared.questions:
        if key in rows.labels:
            labelled = zip(answers, rows.labels[key], strict=True)
            pairs = [(a[key], y) for a, y in labelled if key in a and y is not None]
            agree = sum(answer == label for answer, label in pairs)
            tests.append(_Test(key, "labels", agree, len(pairs), section.min_agreement))
        if last is not None:
            pairs = _unchanged_pairs(key, rows, answers, last.get("rows") or {})
            changed[key] = [sum(now != then for now, then in pairs), len(pairs)]
    if last is not None:
        moved, compared = (sum(c[i] for c in changed.values()) for i in (0, 1))
        tests.append(_Test("all", "last_run", moved, compared, section.max_changed))
    shown = [t.figures(level) for t, level in zip(tests, _levels(tests, section.confidence),
                                                  strict=True)]  # fmt: skip
    answered = sum(1 for a in answers if a)
    reasons = _said([t for t in shown if t["failed"]], changed, model)
    if answered < MIN_ANSWERED * len(rows.ids):
        reasons.insert(0, f"only {answered} of its {len(rows.ids)} rows were answered")
    compared_with = "labels" + (" and the last run's answers" if last is not None else "")
    said = "passed" if not reasons else "FAILED"
    return {
        "file": str(section.labels), "rows": len(rows.ids), "answered": answered,
        "passed": not reasons, "confidence": section.confidence,
        "compared_with": compared_with, "last_run": (last or {}).get("run_id"),
        "tests": shown, "changed": {k: {"changed": c, "rows": n} for k, (c, n) in changed.items()},
        "message": _message(section.labels, len(rows.ids), reasons),
        "text": f"Canary: {said}: {len(rows.ids)} rows asked fresh ({answered} answered), "
        f"compared with {compared_with}",
    }  # fmt: skip


def _message(path: Any, rows: int, reasons: list[str]) -> str:
    """The one line a failed canary stops the run with (empty when it passed)."""
    if not reasons:
        return ""
    return (
        f"canary '{path}' ({rows} rows): " + "; ".join(reasons) + ". No corpus row was sent: "
        "check what changed behind the model ID (evalpipe diff against an earlier output), then "
        "run again"
    )
