"""What each output column is called and what it means: the one source of truth for both.

The writer (`table.output_schema`) builds every field here, with its description in the
Parquet field metadata (`description`), so a table explains itself wherever it goes; `evalpipe
describe` reads the descriptions back from a part's footer, and the docs' output reference is
generated from the same fields. A column's meaning is written once, here.

Probability columns are named by their option or level *label*, made safe to type in SQL and
dataframe code by `safe_names` (the rule is in its docstring and the output reference); the
label itself stays in the field metadata (`evalpipe.label`), so the map is never ambiguous.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from evalpipe.calibration import (
    FINGERPRINT_KEY,
    MAP_KEY,
    ROLE_KEY,
    Abstention,
    CalibratedQuestion,
    map_metadata,
)

SCHEMA_VERSION = 2  # 1: unversioned (`K__noul`, `K__p__0`, `_cached` int); see the changelog
VERSION_KEY = b"evalpipe.schema_version"  # schema metadata: the table's schema version
DESCRIPTION = b"description"  # field metadata: what the column means
QUESTION = b"evalpipe.question"  # field metadata: the question key a column answers
LABEL = b"evalpipe.label"  # field metadata: the option or level a probability column is for
MAX_NAME = 40  # longest safe label (long level descriptions are cut)

CONFIDENCE = (
    "How concentrated the distribution is, from 0 (every {what} equally likely) to 1 (one "
    "{what} certain): (n * p_max - 1) / (n - 1) for n {what}s. It is not a probability of being "
    "right, and it is not calibrated: check the judge against labels with `evalpipe agree`."
)
META = {
    "_row": "The row's position in the input corpus (0-based, in file order: files sorted by "
    "name, rows in file order). Sort by it for input order: parts hold rows in the order they "
    "were answered.",
    "_model": "The versioned model ID that answered (never an alias).",
    "_service": "Who answered: the service's origin (`https://host:port`, no path, no key), or "
    "`embedded` for the reference service's made-up answers.",
    "_input_tokens": "The input tokens billed for this row: 0 when its answer was reused from "
    "an identical state, answered whole from the answer cache, or never sent.",
    "_error_type": "Null when the row was answered, otherwise why it was not: invalid_state, "
    "context_limit, rejected, rate_limited, overloaded, server_error, network or "
    "invalid_response.",
    "_error": "Null when the row was answered, otherwise one sentence for a human.",
    "_run_id": "The run that scored the row: its start in UTC and a random suffix "
    "(`20261123T020001Z-3fa9c1`). The manifest's `runs` says how each run ended.",
    "_scored_at": "When the row's answer (or error) came back (UTC).",
    "_state_hash": "A digest of the state as sent (its canonical JSON). A resumed run compares "
    "it with the corpus, so a row whose text changed under the same id is scored again. Null "
    "for an invalid state.",
    "_cached": "True when at least one of the row's questions was answered from the answer "
    "cache of earlier runs, not by a request.",
    "_reused": "True when the answers were copied from an identical state's request in the "
    "same run (not billed).",
    "_pack": "How many rows shared the request that answered this row (`packing.rows`): 1 when "
    "it was sent alone, k when k rows were packed into one request. Null when no request of "
    "the run answered it (the answer cache, or an error found before sending).",
    "_sample_weight": "Only in an output `evalpipe estimate` sampled: how many rows of the "
    "corpus this answered sample row stands for, N_h / n_h of its stratum (the stratum's rows "
    "over its answered sample rows), so sum(_sample_weight * x) / sum(_sample_weight) is the "
    "stratified estimate of x's mean. Null for a row outside the sample (a full run's, or one "
    "scored by --limit or --sample) and for a sample row that ended in an error; after a full "
    "run the sample's rows keep their weights (the census is then the plain mean of every row).",
}


def safe_names(labels: Sequence[str]) -> list[str]:
    """Column-name parts for a question's option or level labels, one per label, all distinct.

    The rule: letters are folded to ASCII (accents dropped: `café` -> `cafe`) and lower-cased;
    every run of other characters (spaces, punctuation, non-Latin scripts) becomes one `_`;
    leading and trailing `_` are dropped and the result is cut to 40 characters. A label that
    leaves nothing (empty, `???`, `日本`) is named by its position (`0`, `1`, ...). Labels that
    end up with the same name (`Good` and `good`) each get `_<position>` appended (`good_0`,
    `good_1`). The label itself stays in the column's field metadata (`evalpipe.label`).
    """
    names = [_safe(label) or str(i) for i, label in enumerate(labels)]
    counts = Counter(names)
    return [f"{n}_{i}" if counts[n] > 1 else n for i, n in enumerate(names)]


def _safe(label: str) -> str:
    folded = unicodedata.normalize("NFKD", label).encode("ascii", "ignore").decode()
    name = re.sub(r"[^a-z0-9]+", "_", folded.lower()).strip("_")
    return name[:MAX_NAME].rstrip("_")


def _field(
    name: str, type_: pa.DataType, description: str, extra: dict[bytes, bytes] | None = None,
    **meta: str,
) -> pa.Field:  # fmt: skip
    metadata = {DESCRIPTION: description.encode(), **(extra or {})}
    if "question" in meta:
        metadata[QUESTION] = meta["question"].encode()
    if "label" in meta:
        metadata[LABEL] = meta["label"].encode()
    return pa.field(name, type_, metadata=metadata)


def fingerprinted(field: pa.Field, fingerprint: str) -> pa.Field:
    """A question's first field, with the question's fingerprint (what a calibration file is
    tied to: `evalpipe.calibration`)."""
    return field.with_metadata({**(field.metadata or {}), FINGERPRINT_KEY: fingerprint.encode()})


def id_field(name: str, type_: pa.DataType) -> pa.Field:
    return _field(name, type_, f"The row's id: column '{name}' of the input, unique per row.")


def _brief(instructions: str) -> str:
    text = " ".join(instructions.split())
    return text if len(text) <= 120 else text[:117] + "..."


def noul_fields(key: str, instructions: str) -> list[pa.Field]:
    """A yes/no question: one column, the probability of yes."""
    text = (
        f"Question '{key}' (yes/no: {_brief(instructions)}): the probability that the answer "
        "is yes (its criteria 'true'), from 0 to 1. Above 0.5 reads as yes."
    )
    return [_field(f"{key}__p_true", pa.float64(), text, question=key)]


def choice_fields(key: str, instructions: str, options: Sequence[str]) -> list[pa.Field]:
    """A choice question: the chosen option, its confidence, a probability per option."""
    shown = ", ".join(options)
    head = (
        f"Question '{key}' (choice: {_brief(instructions)}): the option with the highest "
        f"probability, one of: {shown}."
    )
    fields = [
        _field(f"{key}__choice", pa.string(), head, question=key),
        _field(f"{key}__confidence", pa.float64(), CONFIDENCE.format(what="option"), question=key),
    ]
    for option, name in zip(options, safe_names(options), strict=True):
        text = f"Question '{key}': the probability of option '{option}', from 0 to 1."
        fields.append(_field(f"{key}__p__{name}", pa.float64(), text, question=key, label=option))
    return fields


def score_fields(key: str, instructions: str, levels: Sequence[str]) -> list[pa.Field]:
    """A score question: the expected level, its confidence, a probability per level."""
    top = len(levels) - 1
    scale = ", ".join(f"{i} = {level}" for i, level in enumerate(levels))
    head = (
        f"Question '{key}' (score: {_brief(instructions)}): the expected level, the sum of "
        f"level index times its probability, from 0 to {top} (levels {scale}); it can fall "
        "between levels. The most probable level is the largest of the probability columns."
    )
    fields = [
        _field(f"{key}__score", pa.float64(), head, question=key),
        _field(f"{key}__confidence", pa.float64(), CONFIDENCE.format(what="level"), question=key),
    ]
    for i, (level, name) in enumerate(zip(levels, safe_names(levels), strict=True)):
        text = f"Question '{key}': the probability of level {i}, '{level}', from 0 to 1."
        fields.append(_field(f"{key}__p__{name}", pa.float64(), text, question=key, label=level))
    return fields


METHOD = {
    "platt": "Platt scaling: a logistic regression on the judge's log-odds",
    "isotonic": "isotonic regression: a non-decreasing step map",
    "temperature": "temperature scaling: p^(1/t) normalised, t = {t:.3g}",
}


def _fitted(entry: CalibratedQuestion, file: str) -> str:
    """How a question's map was made, and what it did to labelled rows it was not fitted on."""
    how = METHOD[entry.method].format(t=float(entry.params.get("t", 1.0)))
    said = f"calibrated by '{file}' ({how}; {entry.rows:,} labelled rows)"
    figures = [
        f"{name} {before:.3f} -> {after:.3f}"
        for name, key in (("ECE", "ece"), ("Brier", "brier"))
        if isinstance(found := entry.held_out.get(key), dict)
        and isinstance(before := found.get("before"), float | int)
        and isinstance(after := found.get("after"), float | int)
    ]
    return said + (f"; held out: {', '.join(figures)}" if figures else "")


def _promise(key: str, a: Abstention) -> str:
    head = (
        f"Question '{key}': true when the judge is not sure enough to keep the row (send it to "
        "a person), false when it is kept; null without an answer. "
    )
    promise = f"{a.target:.1%} agreement with people at {a.confidence:.0%} confidence"
    if a.threshold is None:
        more = (
            f"about {a.labels_needed:,} labelled rows would"
            if a.labels_needed
            else "more labels would not: the judge's surest rows agree less than that"
        )
        return head + (
            f"No threshold could promise {promise} from {a.rows:,} labelled rows ({more}), so "
            "every answered row abstains."
        )
    return head + (
        f"Kept: calibrated confidence in its answer >= {a.threshold:.4f}, chosen on {a.rows:,} "
        f"labelled rows to promise {promise} on the rows kept (Clopper-Pearson lower bound "
        f"{a.bound:.3f} over {a.kept:,} kept rows, {a.kept / a.rows:.0%} of them)."
    )


def calibrated_fields(
    key: str, entry: CalibratedQuestion, file: str, labels: Sequence[str], names: Sequence[str]
) -> list[pa.Field]:
    """A question's calibrated columns (after its own), from `entry` of calibration `file`:
    p(yes) calibrated (noul), or a calibrated probability per option or level (choice, score:
    `labels` and their safe `names`), with the expected level (score); and `K__abstain` when
    the job keeps rows by a target agreement. The first carries the map (`map_metadata`)."""
    fitted = _fitted(entry, file)
    role = {ROLE_KEY: b"calibrated"}
    if entry.kind == "noul":
        text = (
            f"Question '{key}': the probability of yes made to mean what it says, {fitted}: of "
            f"rows near 0.8, about 80% were labelled yes. The judge's own is {key}__p_true."
        )
        fields = [_field(f"{key}__p_true_calibrated", pa.float64(), text, role, question=key)]
    else:
        fields = []
        if entry.kind == "score":
            text = (
                f"Question '{key}': the expected level under the calibrated probabilities, "
                f"{fitted}. The judge's own is {key}__score."
            )
            fields.append(
                _field(f"{key}__score_calibrated", pa.float64(), text, role, question=key)
            )
        what = "option" if entry.kind == "choice" else "level"
        for label, name in zip(labels, names, strict=True):
            text = f"Question '{key}': the probability of {what} '{label}', {fitted}."
            fields.append(_field(f"{key}__p_calibrated__{name}", pa.float64(), text, role,
                                 question=key, label=label))  # fmt: skip
    if entry.abstain is not None:
        text = _promise(key, entry.abstain)
        fields.append(_field(f"{key}__abstain", pa.bool_(), text, {ROLE_KEY: b"abstain"},
                             question=key))  # fmt: skip
    head = fields[0]
    fields[0] = head.with_metadata({**head.metadata, MAP_KEY: map_metadata(entry, file)})
    return fields


def meta_field(name: str, type_: pa.DataType) -> pa.Field:
    return _field(name, type_, META[name])


def describe(schema: pa.Schema) -> list[dict[str, Any]]:
    """The data dictionary of a table written with these fields: one entry per column, in
    order, with its type, description, question, label and role (`calibrated` or `abstain`
    for the columns a calibration adds; None where a field has none)."""
    out = []
    for field in schema:
        meta = field.metadata or {}
        out.append(
            {
                "column": field.name,
                "type": str(field.type),
                "description": _text(meta.get(DESCRIPTION)),
                "question": _text(meta.get(QUESTION)),
                "label": _text(meta.get(LABEL)),
                "role": _text(meta.get(ROLE_KEY)),
            }
        )
    return out


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode()


def schema_version(schema: pa.Schema) -> int:
    """The schema version a table was written with (1 for tables written before versions)."""
    raw = (schema.metadata or {}).get(VERSION_KEY)
    return int(raw) if raw is not None else 1
