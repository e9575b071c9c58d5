"""A calibration file, and the calibrated columns it adds beside the judge's own.

`evalpipe calibrate` (`evalpipe.analysis`) fits, per question, a map from the judge's
probabilities to probabilities that mean what they say, and writes it here, as JSON:

    {"format": "evalpipe-calibration", "version": 1, "service": ..., "model": ...,
     "fitted": ..., "source": {...},
     "questions": {KEY: {"kind", "fingerprint", "method", "params", "labels", "rows",
                         "held_out", "scores", "agreed"}}}

A question's map is one of three (`calibrated`): `platt` (yes/no: p' = sigmoid(a * logit(p) +
b), a logistic regression on the judge's log-odds), `isotonic` (yes/no: a non-decreasing step
map, interpolated between its knots `x` -> `y`) or `temperature` (choice and score: p'_k =
p_k^(1/t) normalised, one number; the choice and the most probable level never change). The
`fingerprint` is the question as the service takes it, digested (`Calibration.fingerprint`),
so a file is refused for another question, and `service` and `model` for another judge.
`scores` and `agreed` are the labelled rows' held-out calibrated confidence (the calibrated
probability of the judge's answer) and whether the person agreed with it: what a job's
abstention threshold is chosen on (`evalpipe.planning`), with the target it is given.

In a table, a question's calibrated columns follow its own (`columns.calibrated_fields`: the
description says the file, the method, the held-out figures and, for `K__abstain`, the
promise); their first field carries the map (`MAP_KEY`), so `calibrated_arrays` needs only the
schema to compute them, in Parquet parts and Delta tables alike.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from evalpipe.contract import canonical
from evalpipe.errors import InputError, OutputError, first_line

FORMAT = "evalpipe-calibration"
VERSION = 1
METHODS = {"noul": ("platt", "isotonic"), "choice": ("temperature",), "score": ("temperature",)}
MAP_KEY = b"evalpipe.calibration"  # field metadata: the question's map, on its first column
FINGERPRINT_KEY = b"evalpipe.fingerprint"  # field metadata of a question's first column
ROLE_KEY = b"evalpipe.role"  # field metadata: `calibrated` or `abstain`
_CLIP = 1e-12


@dataclass(frozen=True)
class Abstention:
    """What `K__abstain` promises: with `confidence`, agreement with people on the rows kept
    is at least `target`. `threshold` is the least calibrated confidence kept (None: none can
    promise it, every answered row abstains); `bound` the lower confidence bound of agreement
    on the `kept` of `rows` labelled rows; `labels_needed` (no threshold only) about how many
    labelled rows would promise it, None when more labels would not help."""

    target: float
    confidence: float
    threshold: float | None
    bound: float | None
    kept: int
    rows: int
    labels_needed: int | None = None

    def shown(self) -> dict[str, Any]:
        return {
            "target_agreement": self.target, "confidence": self.confidence,
            "threshold": self.threshold, "bound": self.bound, "labelled_rows_kept": self.kept,
            "labelled_rows": self.rows,
            "labelled_share_kept": round(self.kept / self.rows, 4) if self.rows else None,
            "labels_needed": self.labels_needed,
        }  # fmt: skip


@dataclass(frozen=True)
class CalibratedQuestion:
    """One question's map and what it was fitted on (module docstring); `abstain` is set by a
    job with a target (`abstaining`)."""

    kind: str
    fingerprint: str
    method: str
    params: dict[str, Any]
    labels: tuple[str, ...]  # options, or levels (their indices as the table keys them)
    rows: int
    held_out: dict[str, Any] = field(default_factory=dict)
    scores: tuple[float, ...] = ()
    agreed: tuple[int, ...] = ()
    abstain: Abstention | None = None

    def abstaining(self, **figures: Any) -> CalibratedQuestion:
        """This question keeping rows as `figures` say (`Abstention`'s fields)."""
        return replace(self, abstain=Abstention(**figures))

    def apply(self, probs: np.ndarray) -> np.ndarray:
        """Calibrated probabilities of judge's `probs` (p(yes) of shape (n,), or (n, k)
        distributions); NaN rows (no answer) stay NaN."""
        return calibrated(self.method, self.params, probs)

    def as_json(self) -> dict[str, Any]:
        out = {
            "kind": self.kind, "fingerprint": self.fingerprint, "method": self.method,
            "params": self.params, "labels": list(self.labels), "rows": self.rows,
            "held_out": self.held_out, "scores": list(self.scores), "agreed": list(self.agreed),
        }  # fmt: skip
        return out


@dataclass(frozen=True)
class Calibration:
    """A calibration file: the judge it was fitted on (`service`, `model`), when, from what
    (`source`), and each question's map."""

    service: str
    model: str
    fitted: str
    questions: dict[str, CalibratedQuestion]
    source: dict[str, Any] = field(default_factory=dict)
    name: str = ""  # the file it was read from, as given

    @staticmethod
    def fingerprint(question: Mapping[str, Any]) -> str:
        """A question as the service takes it (`question_dicts`), digested."""
        return hashlib.blake2b(canonical(dict(question)), digest_size=8).hexdigest()

    @staticmethod
    def fingerprints_of(schema: pa.Schema) -> dict[str, str]:
        """The question fingerprints an output's schema records (none before this field)."""
        found = {}
        for f in schema:
            meta = f.metadata or {}
            if FINGERPRINT_KEY in meta and b"evalpipe.question" in meta:
                found[meta[b"evalpipe.question"].decode()] = meta[FINGERPRINT_KEY].decode()
        return found

    def as_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "version": VERSION, "service": self.service, "model": self.model,
            "fitted": self.fitted, "source": self.source,
            "questions": {k: q.as_json() for k, q in self.questions.items()},
        }  # fmt: skip

    def write(self, path: Path) -> None:
        """The file, written whole (a temporary file renamed); OutputError in one line."""
        data = orjson.dumps(self.as_json(), option=orjson.OPT_INDENT_2)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        except OSError as exc:
            raise _unwritable(path, exc) from None
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
            os.replace(temp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise _unwritable(path, exc) from None

    @classmethod
    def read(cls, path: Path, key: str = "calibration.file") -> Calibration:
        """The file at `path`; InputError (one line naming `key`) if it is not one."""
        try:
            data = orjson.loads(Path(path).read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            raise InputError(f"{key}: '{path}' cannot be read: {first_line(exc)}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise InputError(f"{key}: '{path}' is not a calibration file of evalpipe calibrate")
        if data.get("version") != VERSION:
            raise InputError(
                f"{key}: '{path}' is a calibration file of version {data.get('version')!r}; "
                f"this evalpipe reads version {VERSION}: fit it again with evalpipe calibrate"
            )
        questions = {}
        for k, q in (data.get("questions") or {}).items() if isinstance(data, dict) else ():
            try:
                questions[k] = _question(q)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                why = f"missing {exc}" if isinstance(exc, KeyError) else first_line(exc)
                raise InputError(f"{key}: '{path}', question {k!r}: {why}") from None
        try:
            return cls(
                str(data["service"]), str(data["model"]), str(data["fitted"]), questions,
                dict(data.get("source") or {}), str(path),
            )  # fmt: skip
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InputError(f"{key}: '{path}' is damaged ({first_line(exc)})") from None


def _unwritable(path: Path, exc: OSError) -> OutputError:
    return OutputError(f"calibration file '{path}' cannot be written: {first_line(exc)}")


def _question(raw: dict[str, Any]) -> CalibratedQuestion:
    kind, method = str(raw["kind"]), str(raw["method"])
    if method not in METHODS.get(kind, ()):
        raise ValueError(f"method {method!r} is not one for a {kind} question")
    params = dict(raw["params"])
    _check_map(method, params)
    return CalibratedQuestion(
        kind, str(raw["fingerprint"]), method, params,
        tuple(str(x) for x in raw["labels"]), int(raw["rows"]), dict(raw.get("held_out") or {}),
        tuple(float(x) for x in raw.get("scores") or ()),
        tuple(int(x) for x in raw.get("agreed") or ()),
    )  # fmt: skip


# --------------------------------------------------------------------------- the maps


def _finite(params: Mapping[str, Any], name: str) -> float:
    value = params[name]
    if isinstance(value, bool) or not isinstance(value, int | float) or not np.isfinite(value):
        raise ValueError(f"params.{name} must be a finite number (got {str(value)[:40]!r})")
    return float(value)


def _check_map(method: str, params: Mapping[str, Any]) -> None:
    """ValueError (one line naming the parameter) unless `params` is a map `calibrated` can
    apply and whose output is a probability: a file is checked when it is read, before
    anything is sent, never after the corpus was paid for."""
    if method == "platt":
        _finite(params, "a"), _finite(params, "b")
    elif method == "temperature":
        if _finite(params, "t") <= 0:
            raise ValueError(f"params.t must be above 0 (got {params['t']})")
    elif method == "isotonic":
        x, y = params["x"], params["y"]
        if not isinstance(x, list) or not isinstance(y, list) or not x or len(x) != len(y):
            raise ValueError("params.x and params.y must be lists of one length, not empty")
        xs = [_finite({"x": v}, "x") for v in x]
        ys = [_finite({"y": v}, "y") for v in y]
        if any(not 0 <= v <= 1 for v in (*xs, *ys)):
            raise ValueError("params.x and params.y must lie in [0, 1]: they are probabilities")
        if any(b < a for v in (xs, ys) for a, b in itertools.pairwise(v)):
            raise ValueError("params.x and params.y must be sorted (an isotonic map only rises)")


def logit(p: np.ndarray) -> np.ndarray:
    q = np.clip(p, _CLIP, 1 - _CLIP)
    return np.log(q / (1 - q))


def calibrated(method: str, params: Mapping[str, Any], probs: np.ndarray) -> np.ndarray:
    """`probs` through a map (module docstring)."""
    probs = np.asarray(probs, dtype=float)
    with np.errstate(all="ignore"):
        if method == "platt":
            z = float(params["a"]) * logit(probs) + float(params["b"])
            return 1.0 / (1.0 + np.exp(-np.clip(z, -500, 500)))
        if method == "isotonic":
            x, y = np.asarray(params["x"], float), np.asarray(params["y"], float)
            out = np.interp(probs, x, y)
            return np.where(np.isnan(probs), np.nan, out)
        if method == "temperature":
            logs = np.log(np.clip(probs, _CLIP, 1.0)) / float(params["t"])
            logs -= np.max(logs, axis=1, keepdims=True)
            weights = np.exp(logs)
            return weights / weights.sum(axis=1, keepdims=True)
    raise ValueError(f"unknown calibration method {method!r}")


def confidence_of(kind: str, calibrated_probs: np.ndarray) -> np.ndarray:
    """The calibrated probability of the judge's answer: max(p, 1 - p) for yes/no, the largest
    of a distribution (its choice, its most probable level) otherwise. NaN for no answer."""
    if kind == "noul":
        return np.maximum(calibrated_probs, 1 - calibrated_probs)
    return np.max(calibrated_probs, axis=1)


# --------------------------------------------------------------------------- the columns


def map_metadata(entry: CalibratedQuestion, file: str) -> bytes:
    """The map a question's first calibrated field carries (what `calibrated_arrays` reads)."""
    abstain = entry.abstain
    threshold = None if abstain is None else abstain.threshold
    return orjson.dumps({
        "file": file, "kind": entry.kind, "method": entry.method, "params": entry.params,
        "abstain": abstain is not None, "threshold": threshold,
    })  # fmt: skip


def _spec(schema: pa.Schema, key: str) -> dict[str, Any] | None:
    for f in schema:
        meta = f.metadata or {}
        if MAP_KEY in meta and meta.get(b"evalpipe.question") == key.encode():
            spec: dict[str, Any] = orjson.loads(meta[MAP_KEY])
            return spec
    return None


def calibrated_arrays(schema: pa.Schema, key: str, own: Sequence[pa.Array]) -> list[pa.Array]:
    """The calibrated columns of question `key` in `schema` (none when it has none), from the
    question's own columns `own` as the table orders them (p(yes); or the choice or score, the
    confidence, then one probability per option or level)."""
    spec = _spec(schema, key)
    if spec is None:
        return []
    kind = spec["kind"]
    noul = kind == "noul"
    probs = _floats(own[0]) if noul else np.column_stack([_floats(a) for a in own[2:]])
    values = calibrated(spec["method"], spec["params"], probs)
    missing = np.isnan(values) if noul else np.isnan(values).any(axis=1)
    found = [values] if noul else [values[:, i] for i in range(values.shape[1])]
    if kind == "score":  # the expected level first, as the judge's own score comes first
        found.insert(0, values @ np.arange(values.shape[1], dtype=float))
    columns = [pa.array(v, pa.float64(), mask=missing) for v in found]
    if spec["abstain"]:
        threshold = spec["threshold"]
        sure = confidence_of(kind, values)
        abstain = np.ones(len(sure), bool) if threshold is None else ~(sure >= threshold)
        columns.append(pa.array(abstain, pa.bool_(), mask=missing))
    return columns


def _floats(array: pa.Array) -> np.ndarray:
    return np.asarray(array.to_numpy(zero_copy_only=False), dtype=float)


def kept_counts(table: pa.Table) -> dict[str, tuple[int, int]]:
    """(rows kept, rows answered) per question of a table's `K__abstain` columns."""
    found = {}
    for f in table.schema:
        meta = f.metadata or {}
        if meta.get(ROLE_KEY) == b"abstain":
            column = table.column(f.name)
            answered = len(column) - column.null_count
            abstained = int(pc.sum(column).as_py() or 0)
            found[meta[b"evalpipe.question"].decode()] = (answered - abstained, answered)
    return found
