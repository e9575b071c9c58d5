"""`evalpipe estimate`: a stratified random sample of the corpus, scored in rounds into the job's
output, until the estimates are as precise as asked.

The statistics (what is estimated, the intervals, the allocation of each round, when to stop)
are `evalpipe.analysis.sampling`'s; this module draws the rows and pays for them:

- the strata are the distinct values of the `--by` columns (one pass over those columns);
- each stratum's rows are in a fixed random order: by a hash of the seed and the row's id, so
  the same corpus and seed give the same order in every process, and a sample of n_h rows of
  stratum h is the first n_h of its order. A later estimate with a smaller margin goes on with
  the same rows (`_sample.json` says how many of each stratum were drawn) and pays only for
  the rows it adds;
- a round is a run of the job (`run_job`) on the rows drawn so far, into the job's output: rows
  already there are not sent again (resume), rows that ended in a retryable error are tried
  again; the answer cache answers what it can. A later full `evalpipe run` into the output
  pays only for the rows the sample did not score;
- after the rounds, each answered sample row's `_sample_weight` is set (N_h / n_h), and
  `_sample.json` records the design and the estimates (for `report` and `diff`).

The cost of the full run, for comparison, is `evalpipe plan`'s estimate for the whole corpus.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from evalpipe.analysis import (
    STRATUM,
    Sequential,
    estimate_sample,
    run_sequential,
)
from evalpipe.config import JobConfig
from evalpipe.engine import Display, EventLog, StopSignals, new_run_id
from evalpipe.errors import ConfigError
from evalpipe.input import Selection, Source, Strata, strata_of
from evalpipe.output import SampleFile, weigh
from evalpipe.planning import prepare, price_of
from evalpipe.preflight import plan_figures
from evalpipe.reading import open_output, questions_of
from evalpipe.session.start import Session, opened

SAMPLE_FORMAT = 1
SPENT = ("requests", "input_tokens", "rows_answered", "rows_from_cache")


@dataclass(frozen=True)
class EstimateOptions:
    """`evalpipe estimate`'s flags (and `ep.estimate`'s arguments)."""

    margin: float
    by: tuple[str, ...] = ()
    confidence: float = 0.95
    max_rows: int | None = None
    max_cost: float | None = None
    seed: int = 0
    ray_address: str | None = None
    progress_interval: float = 60.0

    def check(self) -> None:
        if not 0 < self.margin < 1:
            raise ConfigError(f"--margin must be between 0 and 1, e.g. 0.02 (got {self.margin})")
        if not 0 < self.confidence < 1:
            raise ConfigError(f"--confidence must be between 0 and 1 (got {self.confidence})")
        if len(set(self.by)) != len(self.by):
            raise ConfigError("--by: a column is named more than once")


@dataclass
class Spending:
    """What the rounds sent and cost, summed over their runs."""

    price_known: bool
    runs: list[str] = field(default_factory=list)
    figures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SPENT, 0))
    cost: float = 0.0
    new_rows: int = 0  # rows the runs scored (answered or not): not in the output before

    def add(self, run_id: str, summary: Mapping[str, Any]) -> None:
        self.runs.append(run_id)
        for key in SPENT:
            self.figures[key] += int(summary.get(key) or 0)
        self.cost += float(summary.get("cost_usd") or 0.0)
        errors = summary.get("rows_in_error") or {}
        self.new_rows += int(summary.get("rows_answered") or 0) + sum(errors.values())


class _Stopped(Exception):
    """A round's run was stopped by a signal: no more rounds."""


@dataclass
class _Rounds:
    """The state the rounds share: the job and its session, the strata, the money."""

    session: Session
    strata: Strata
    options: EstimateOptions
    log: EventLog
    stop: StopSignals
    display: Display | None
    spending: Spending
    planned_cost_per_row: float | None
    drawn: dict[str, int] = field(default_factory=dict)
    number: int = 0  # rounds done

    def score(self, drawn: Mapping[str, int]) -> pl.DataFrame:
        """Run the job on the rows drawn so far; every answered sample row, with its stratum."""
        positions = self.strata.positions(drawn)
        selection = Selection.of(positions.tolist(), self.options.seed)
        prepared = self.session.prepared
        job = replace(prepared, source=Source(replace(prepared.source.spec, rows=selection)))
        run_id = new_run_id()
        outcome = self.session.run(
            job, run_id=run_id, ray_address=self.options.ray_address,
            progress_interval=self.options.progress_interval, display=self.display,
            stop=self.stop, keep_ray=True,
        )  # fmt: skip
        self.spending.add(run_id, outcome.summary)
        self.drawn = dict(drawn)
        if outcome.ended_how == "stopped":
            raise _Stopped
        return self.answered(positions)

    def answered(self, positions: np.ndarray) -> pl.DataFrame:
        """The output's answered rows among `positions`, each with its stratum."""
        config = self.session.prepared.config
        table = open_output(str(config.output.path))
        sample = self.strata.ids[positions]
        id_name = sample.columns[0]
        rows = table.rows.filter(pl.col("_error_type").is_null())
        if rows.schema[id_name] != sample.schema[id_name]:
            sample = sample.with_columns(pl.col(id_name).cast(rows.schema[id_name]))
        return rows.join(sample, on=id_name, how="inner")

    def affordable(self) -> int | None:
        """How many more rows `--max-cost` pays for, at the cost per row measured so far (the
        plan's before the first round)."""
        budget = self.options.max_cost
        if budget is None:
            return None
        left = budget - self.spending.cost
        per_row = self.planned_cost_per_row or 0.0
        if self.spending.new_rows and self.spending.cost:
            per_row = self.spending.cost / self.spending.new_rows
        if per_row <= 0:
            return None
        return max(0, math.floor(left / per_row))

    def round_done(self, drawn: int, precision: float) -> None:
        self.number += 1
        number = self.number
        shown = "-" if math.isinf(precision) else f"±{precision:.4f}"
        self.log.emit(
            "round",
            f"round {number}: {drawn:,} rows drawn; widest interval {shown} "
            f"(margin {self.options.margin:g})",
            round=number, rows_drawn=drawn, precision=precision,
        )  # fmt: skip


def run_estimate(
    config: JobConfig,
    options: EstimateOptions,
    *,
    log: EventLog | None = None,
    stop: StopSignals | None = None,
    display: Display | None = None,
    keep_service: bool = False,
) -> dict[str, Any]:
    """Estimate from a sample of the job's corpus until every corpus-wide interval is within
    `options.margin` (or a limit): the JSON document `evalpipe estimate --json` prints.
    `keep_service`: an embedded service is kept for the process's next job (`ep.estimate`)."""
    options.check()
    log = log or EventLog()
    log.run_id = log.run_id or new_run_id()  # the estimate's own, for its events
    stop = stop or StopSignals()
    price = price_of(config)
    if options.max_cost is not None and price.per_million is None:
        raise ConfigError("--max-cost: the cost is unknown without a price; set pricing.default")
    output = config.output.path
    prepared = prepare(config)
    strata = strata_of(prepared.source, options.by, options.seed, STRATUM)
    full = plan_figures(prepared)
    with opened(prepared, log, keep_service=keep_service) as session:
        sampled = SampleFile(output).ready(prepared.schema, config.fingerprint())
        session.prepared = prepared = replace(prepared, schema=sampled)
        rounds = _Rounds(
            session, strata, options, log, stop, display,
            Spending(price.per_million is not None), _per_row(full, strata),
        )  # fmt: skip
        result, stopped = _run_rounds(rounds, _earlier(output, options, strata, log))
        document = _document(rounds, result, full, stopped)
        weigh(output, prepared.schema, _weights(rounds, result))
        SampleFile(output).write(_design(document))
    return document


def _per_row(full: Mapping[str, Any], strata: Strata) -> float | None:
    cost, rows = full.get("estimated_cost_usd"), sum(strata.sizes.values())
    return None if cost is None or not rows else float(cost) / rows


def _earlier(
    output: Any, options: EstimateOptions, strata: Strata, log: EventLog
) -> dict[str, int] | None:
    """What an earlier estimate drew, when it drew with the same seed and strata."""
    found = SampleFile(output).read()
    if not found:
        return None
    if found.get("seed") != options.seed or list(found.get("by") or []) != list(options.by):
        log.warning(
            f"the output holds a sample drawn with --by {' '.join(found.get('by') or []) or '-'} "
            f"--seed {found.get('seed')}; this one (--by {' '.join(options.by) or '-'} --seed "
            f"{options.seed}) is drawn anew (rows scored before are not paid again)"
        )
        return None
    return {s["stratum"]: int(s["drawn"]) for s in found.get("strata", [])}


def _run_rounds(rounds: _Rounds, earlier: dict[str, int] | None) -> tuple[Sequential, bool]:
    """The rounds (`run_sequential`), each reported; (what they found, stopped by a signal)."""
    o = rounds.options
    sizes = rounds.strata.sizes
    questions = questions_of(rounds.session.prepared.schema)

    def score(drawn: Mapping[str, int]) -> pl.DataFrame:
        rows = rounds.score(drawn)
        found = estimate_sample(rows, sizes, questions, o.confidence)
        rounds.round_done(sum(drawn.values()), found.precision())
        SampleFile(rounds.session.prepared.config.output.path).write(_progress(rounds, drawn))
        return rows

    try:
        result = run_sequential(
            sizes, questions, score, o.margin, o.confidence, o.max_rows, rounds.affordable,
            earlier,
        )  # fmt: skip
        return result, False
    except _Stopped:
        rows = rounds.answered(rounds.strata.positions(rounds.drawn))
        found = estimate_sample(rows, sizes, questions, o.confidence)
        return Sequential(dict(rounds.drawn), found, rounds.number, "stopped"), True


def _progress(rounds: _Rounds, drawn: Mapping[str, int]) -> dict[str, Any]:
    """`_sample.json` between rounds: the design and what is drawn (a killed estimate goes
    on from there)."""
    o = rounds.options
    return {
        "format": SAMPLE_FORMAT,
        "seed": o.seed,
        "by": list(o.by),
        "strata": [
            {"stratum": h, "values": rounds.strata.labels[h], "rows": n, "drawn": drawn.get(h, 0)}
            for h, n in rounds.strata.sizes.items()
        ],
    }


def _document(
    rounds: _Rounds, result: Sequential, full: Mapping[str, Any], stopped: bool
) -> dict[str, Any]:
    o, spent = rounds.options, rounds.spending
    sizes = rounds.strata.sizes
    answered = _answered_per_stratum(result)
    corpus = sum(sizes.values())
    drawn = sum(result.drawn.values())
    return {
        "format": SAMPLE_FORMAT,
        "updated": datetime.now(UTC).isoformat(timespec="seconds"),
        "output": str(rounds.session.prepared.config.output.path),
        "seed": o.seed,
        "by": list(o.by),
        "margin": o.margin,
        "confidence": o.confidence,
        "reached": result.reached and not stopped,
        "stopped_by": result.stopped_by,
        "precision": _finite(result.estimates.precision()),
        "rounds": result.rounds,
        "corpus_rows": corpus,  # with a state to score: the rows the figures are of
        "invalid_state_rows": rounds.strata.invalid,
        "sample_rows": drawn,
        "sample_answered": result.estimates.sample_rows,
        "sample_share": drawn / corpus if corpus else None,
        "strata": [
            {
                "stratum": h,
                "values": rounds.strata.labels[h],
                "rows": n,
                "drawn": result.drawn.get(h, 0),
                "answered": answered.get(h, 0),
            }
            for h, n in sizes.items()
        ],
        "spent": {
            **spent.figures,
            "cost_usd": spent.cost if spent.price_known else None,
            "runs": len(spent.runs),
        },
        "full_run": {
            "rows": full.get("rows"),
            "requests": full.get("requests"),
            "estimated_input_tokens": full.get("estimated_input_tokens"),
            "estimated_cost_usd": full.get("estimated_cost_usd"),
            "price_source": full.get("price_source"),
            "service_token_ratio": full.get("service_token_ratio"),
        },
        "estimates": [_clean(r) for r in result.estimates.rows],
    }


def _finite(value: float) -> float | None:
    return None if math.isinf(value) or math.isnan(value) else value


def _clean(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (_finite(v) if isinstance(v, float) else v) for k, v in row.items()}


def _answered_per_stratum(result: Sequential) -> dict[str, int]:
    """Answered sample rows per stratum: the most any figure of the stratum counted."""
    out: dict[str, int] = {}
    for r in result.estimates.rows:
        if r["stratum"] is not None:
            out[r["stratum"]] = max(out.get(r["stratum"], 0), r["n"])
    return out


def _weights(rounds: _Rounds, result: Sequential) -> pa.Table:
    """(id, weight) of every answered sample row: N_h / (answered sample rows of stratum h)."""
    rows = rounds.answered(rounds.strata.positions(result.drawn))
    id_name = rows.columns[0]
    counts = rows.group_by(STRATUM).len("a")
    sizes = pl.DataFrame(
        {STRATUM: list(rounds.strata.sizes), "N": list(rounds.strata.sizes.values())}
    )
    weighted = rows.select(id_name, STRATUM).join(counts, on=STRATUM).join(sizes, on=STRATUM)
    weighted = weighted.select(id_name, (pl.col("N") / pl.col("a")).alias("w"))
    return weighted.to_arrow()


def _design(document: Mapping[str, Any]) -> dict[str, Any]:
    """`_sample.json`: the document less what belongs to this command alone."""
    return {k: v for k, v in document.items() if k not in ("output",)}
