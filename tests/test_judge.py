"""A judge you can trust, without a process: the service's rehearsal settings, the calibration
(its maps, its held-out figures, its file), the calibrated columns, the abstention's promise
over many label sets, and the canary's verdict over many nights.

Labels here are drawn from true probabilities that are known: the reference evaluator's own
answers (what the service says at overconfidence 1), or a synthetic population. The job-level
tests (an overconfident service over HTTP, a run stopped by its canary) are test_judge_job.py.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import QUESTIONS
from evalpipe.analysis import fit_calibration, maps
from evalpipe.calibration import Calibration, kept_counts
from evalpipe.config import parse_config
from evalpipe.errors import ConfigError, InputError
from evalpipe.output import Sink, output_schema
from evalpipe.output.table import RowResult, to_table
from evalpipe.planning import choose_threshold, clopper_pearson, prepare
from evalpipe.preflight.canary import CanaryRows, verdict
from evalpipe.reading import open_output
from evalpipe.service import ServiceSettings
from evalpipe.service.evaluator import answer, compile_questions
from evalpipe.service.rehearsal import Rehearsal
from judgedata import drawn

MODEL = "model-1.13.0"
SERVICE = "http://127.0.0.1:9"
WORDS = (
    "specific", "details", "about", "the", "product", "praise", "and", "delight", "complaints",
    "vague", "or", "empty", "good", "excellent", "poor", "fair", "sizing", "zipper", "battery",
    "warm", "broke", "quickly", "arrived",
)  # fmt: skip


def texts(n: int, seed: int = 0) -> list[str]:
    """Reviews whose words the reference evaluator's answers move with."""
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(3, 14)))) for _ in range(n)]


# --------------------------------------------------------------------------- the service


def test_overconfidence_sharpens_what_the_truth_says_and_can_be_undone() -> None:
    compiled = compile_questions(QUESTIONS)
    for text in texts(20):
        truth = answer(text, compiled)
        told = answer(text, compiled, rehearsal=Rehearsal(overconfidence=3.0))
        p, q = truth["helpful"]["noul"], told["helpful"]["noul"]
        assert math.log(q / (1 - q)) == pytest.approx(3 * math.log(p / (1 - p)), rel=1e-9)
        for key in ("sentiment", "quality"):
            probs = np.array(list(truth[key]["probabilities"].values()))
            sharp = np.array(list(told[key]["probabilities"].values()))
            assert sharp == pytest.approx(probs**3 / (probs**3).sum())
            assert np.argmax(sharp) == np.argmax(probs)  # the answer itself never changes
            back = sharp ** (1 / 3) / (sharp ** (1 / 3)).sum()
            assert back == pytest.approx(probs)
        assert told["sentiment"]["choice"] == truth["sentiment"]["choice"]
        assert told["quality"]["score"] == pytest.approx(
            sum(i * p for i, p in enumerate(told["quality"]["probabilities"].values()))
        )


def test_drift_answers_a_known_share_of_states_anew_and_the_seed_picks_which() -> None:
    states = [f"review {i}: {t}" for i, t in enumerate(texts(4000, seed=1))]
    picked = [Rehearsal(drift=0.1).drifts(s) for s in states]
    assert 0.085 < np.mean(picked) < 0.115
    assert picked == [Rehearsal(drift=0.1).drifts(s) for s in states]  # the same every night
    other = [Rehearsal(drift=0.1, drift_seed=1).drifts(s) for s in states]
    assert picked != other
    compiled = compile_questions(QUESTIONS)
    moved = next(s for s, d in zip(states, picked, strict=True) if d)
    plain, anew = answer(moved, compiled), answer(moved, compiled, rehearsal=Rehearsal(drift=0.1))
    assert anew["helpful"]["noul"] == pytest.approx(1 - plain["helpful"]["noul"])
    assert anew["sentiment"]["choice"] != plain["sentiment"]["choice"]


# --------------------------------------------------------------------------- calibration


def scored_output(tmp: Path, n: int, overconfidence: float, seed: int = 0) -> tuple[Path, dict]:
    """An output of `n` rows answered as the service at `overconfidence` answers (written
    with the table's own schema), and the true answers by id."""
    compiled = compile_questions(QUESTIONS)
    told = Rehearsal(overconfidence=overconfidence)
    schema = output_schema("id", pa.int64(), QUESTIONS, SERVICE)
    truths, results = {}, []
    for i, text in enumerate(texts(n, seed)):
        truths[i] = answer(text, compiled)
        results.append(RowResult(i, answer(text, compiled, rehearsal=told), MODEL, 10, position=i))
    written(tmp / "out", schema, results)
    return tmp / "out", truths


def written(out: Path, schema: pa.Schema, rows: list[RowResult]) -> None:
    """`rows` committed into the output `out` by the sink, as a run commits them."""
    sink = Sink.open(out, schema, "fp", run_id="run-1", write_seconds=0)
    sink.resume(None)
    sink.append(rows)
    sink.finish({}, "finished")


@pytest.fixture(scope="module")
def miscalibrated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("miscalibrated")
    out, truths = scored_output(tmp, 1500, overconfidence=3.0)
    return {"tmp": tmp, "out": out, "truths": truths}


def test_the_held_out_ece_falls_by_half_and_brier_does_not_rise(miscalibrated: dict) -> None:
    table = open_output(str(miscalibrated["out"]))
    labels = drawn(miscalibrated["truths"], list(range(1000)), seed=3)
    found, doc = fit_calibration(table, labels)
    assert found is not None and found.service == SERVICE and found.model == MODEL
    for q in doc["questions"]:
        ece, brier = q["held_out"]["ece"], q["held_out"]["brier"]
        assert ece["after"] <= ece["before"] / 2, q
        assert brier["after"] <= brier["before"], q
        assert ece["change_interval"][1] < 0  # the fall is beyond noise
    assert {q["key"]: q["method"] for q in doc["questions"]} == {
        "helpful": "platt", "sentiment": "temperature", "quality": "temperature",
    }  # fmt: skip
    assert found.questions["sentiment"].params["t"] == pytest.approx(3.0, rel=0.35)


def test_the_map_helps_rows_it_never_saw(miscalibrated: dict) -> None:
    """Fitted on 500 labelled rows, applied to the other 1,000 with their own labels."""
    table = open_output(str(miscalibrated["out"]))
    truths = miscalibrated["truths"]
    found, _ = fit_calibration(table, drawn(truths, list(range(500)), seed=5))
    assert found is not None
    rest = table.rows.filter(pl.col("id") >= 500).sort("id")
    y = np.array([int(v) for v in drawn(truths, rest["id"].to_list(), seed=9)["helpful"]])
    raw = rest["helpful__p_true"].to_numpy()
    entry = found.questions["helpful"]
    cal = maps.apply("noul", entry.method, entry.params, raw)
    from evalpipe.analysis import resampled

    assert resampled.ece(y, cal) <= resampled.ece(y, raw) / 2
    assert np.mean((y - cal) ** 2) <= np.mean((y - raw) ** 2)


def test_a_calibration_file_round_trips_and_says_what_it_was_fitted_on(
    miscalibrated: dict, tmp_path: Path
) -> None:
    table = open_output(str(miscalibrated["out"]))
    found, _ = fit_calibration(
        table, drawn(miscalibrated["truths"], list(range(300)), seed=1), target=0.8
    )
    assert found is not None
    found.write(tmp_path / "cal.json")
    back = Calibration.read(tmp_path / "cal.json")
    assert back.questions["helpful"].params == found.questions["helpful"].params
    assert back.questions["helpful"].scores == found.questions["helpful"].scores
    raw = json.loads((tmp_path / "cal.json").read_text())
    assert raw["format"] == "evalpipe-calibration" and raw["version"] == 1
    assert raw["model"] == MODEL and raw["service"] == SERVICE
    fingerprints = Calibration.fingerprints_of(table.schema)
    assert {k: q["fingerprint"] for k, q in raw["questions"].items()} == fingerprints


def test_labels_of_two_models_are_refused_in_one_line(tmp_path: Path) -> None:
    schema = output_schema("id", pa.int64(), QUESTIONS, SERVICE)
    compiled = compile_questions(QUESTIONS)
    results = [RowResult(i, answer(t, compiled), MODEL if i % 2 else "model-1.14.0", 1)
               for i, t in enumerate(texts(40))]  # fmt: skip
    written(tmp_path / "out", schema, results)
    labels = pl.DataFrame({"id": list(range(40)), "helpful": [i % 3 == 0 for i in range(40)]})
    with pytest.raises(InputError, match=re.escape("models model-1.13.0, model-1.14.0")):
        fit_calibration(open_output(str(tmp_path / "out")), labels)


# --------------------------------------------------------------------------- a job's columns


def job(tmp: Path, calibration: dict[str, Any], **changes: Any) -> dict[str, Any]:
    pq.write_table(pa.table({"id": [1, 2], "text": ["a", "b"]}), tmp / "in.parquet")
    config = {
        "input": {"path": str(tmp / "in.parquet"), "id_column": "id", "state": "text"},
        "output": {"path": str(tmp / "job-out")},
        "service": {"base_url": SERVICE}, "model": MODEL, "questions": QUESTIONS,
        "calibration": calibration,
    }  # fmt: skip
    return {**config, **changes}


@pytest.fixture(scope="module")
def calibration_file(miscalibrated: dict) -> Path:
    table = open_output(str(miscalibrated["out"]))
    labels = drawn(miscalibrated["truths"], list(range(600)), seed=2)
    found, _ = fit_calibration(table, labels)
    assert found is not None
    path = miscalibrated["tmp"] / "calibration.json"
    found.write(path)
    return path


def test_calibrated_columns_follow_the_judges_own_and_compute_the_map(
    calibration_file: Path, tmp_path: Path
) -> None:
    prepared = prepare(parse_config(job(tmp_path, {"file": str(calibration_file),
                                                   "target_agreement": 0.6})))  # fmt: skip
    names = prepared.schema.names
    assert names.index("helpful__p_true_calibrated") == names.index("helpful__p_true") + 1
    assert names.index("helpful__abstain") == names.index("helpful__p_true_calibrated") + 1
    assert "quality__score_calibrated" in names and "sentiment__p_calibrated__mixed" in names
    compiled = compile_questions(QUESTIONS)
    rows = [RowResult(i, answer(t, compiled), MODEL, 1) for i, t in enumerate(texts(30))]
    rows.append(RowResult(99, None, error_type="network", error="down"))
    table = to_table(rows, prepared.schema, "r")
    entry = prepared.calibration.questions["helpful"]  # type: ignore[union-attr]
    own = np.array(table.column("helpful__p_true").to_pylist()[:30])
    assert table.column("helpful__p_true_calibrated").to_pylist()[:30] == pytest.approx(
        list(maps.apply("noul", entry.method, entry.params, own))
    )
    assert table.column("helpful__abstain").to_pylist()[30] is None  # no answer, no verdict
    kept, answered = kept_counts(table)["helpful"]
    assert answered == 30 and 0 <= kept <= 30
    levels = np.array([table.column(n).to_pylist()[:30] for n in names
                       if n.startswith("quality__p_calibrated__")]).T  # fmt: skip
    assert levels.sum(axis=1) == pytest.approx(np.ones(30))
    assert table.column("quality__score_calibrated").to_pylist()[:30] == pytest.approx(
        list(levels @ np.arange(levels.shape[1]))
    )
    description = prepared.schema.field("helpful__abstain").metadata[b"description"].decode()
    assert "60.0% agreement with people at 90% confidence" in description


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"model": "model-1.14.0"}, "was fitted on model 'model-1.13.0', this job asks"),
        ({"service": {"base_url": "http://127.0.0.1:10"}}, "was fitted on the answers of service"),
        (
            {"questions": {**QUESTIONS, "helpful": {**QUESTIONS["helpful"], "instructions": "?"}}},
            "question 'helpful' with other instructions or criteria",
        ),
    ],
)
def test_a_calibration_is_refused_for_another_judge_or_question(
    calibration_file: Path, tmp_path: Path, change: dict[str, Any], said: str
) -> None:
    config = parse_config(job(tmp_path, {"file": str(calibration_file)}, **change))
    with pytest.raises(ConfigError, match=re.escape(said)) as refused:
        prepare(config)
    assert "\n" not in refused.value.one_line() and refused.value.exit_code == 2


def test_a_calibration_is_part_of_the_jobs_fingerprint(
    calibration_file: Path, tmp_path: Path
) -> None:
    plain = parse_config(job(tmp_path, {}))
    calibrated = parse_config(job(tmp_path, {"file": str(calibration_file)}))
    targeted = parse_config(job(tmp_path, {"file": str(calibration_file), "target_agreement": 0.9}))
    assert len({plain.fingerprint(), calibrated.fingerprint(), targeted.fingerprint()}) == 3


def test_a_target_without_a_file_is_refused(tmp_path: Path) -> None:
    said = "calibration.target_agreement needs calibration.file"
    with pytest.raises(ConfigError, match=re.escape(said)):
        parse_config(job(tmp_path, {"target_agreement": 0.9}))


# --------------------------------------------------------------------------- abstention


def test_agreement_on_the_kept_rows_reaches_the_target_in_the_promised_share_of_label_sets() -> (
    None
):
    """400 label sets of 300 rows from a population whose truth is known, each row scored by
    its true confidence: the threshold each set chooses gives the whole population at least the
    target agreement on the rows it keeps in at least `confidence` of the sets (the maps that
    make the scores are `evalpipe calibrate`'s: bench/trust_judge.py runs it all)."""
    rng = np.random.default_rng(46)
    truth = 1 / (1 + np.exp(-rng.normal(0, 2.5, 20_000)))
    sure = np.maximum(truth, 1 - truth)  # P(a person agrees with the answer), the best score
    by_score = np.argsort(-sure)
    agreement_top = np.cumsum(sure[by_score]) / np.arange(1, len(sure) + 1)
    target, confidence, met, kept = 0.9, 0.9, 0, []
    for _ in range(400):
        idx = rng.choice(len(truth), 300, replace=False)
        agreed = (rng.random(300) < sure[idx]).astype(int)
        found = choose_threshold(sure[idx], agreed, target, confidence)
        if found["threshold"] is None:
            met += 1  # nothing kept: nothing promised wrongly
            continue
        count = int(np.sum(sure >= found["threshold"]))
        met += agreement_top[count - 1] >= target
        kept.append(count / len(sure))
    assert met / 400 >= confidence
    assert np.mean(kept) > 0.3  # and it keeps rows: the promise is not kept by keeping none


def test_the_threshold_is_the_loosest_the_sequence_reaches_and_its_bound_is_exact() -> None:
    scores = np.linspace(1.0, 0.5, 200)
    agreed = np.ones(200, int)
    agreed[[60, 120, 121]] = 0
    agreed[150:] = 0  # past here the judge is wrong: the sequence stops
    found = choose_threshold(scores, agreed, 0.9, 0.9)
    k = found["kept"]
    assert 150 <= k < 170 and found["threshold"] == pytest.approx(scores[k - 1])
    errors = int((1 - agreed[:k]).sum())
    assert found["bound"] == pytest.approx(1 - clopper_pearson(errors, k, 0.9)[1], abs=1e-6)
    assert found["bound"] >= 0.9
    assert clopper_pearson(errors + 1, k + 1, 0.9)[1] > 0.1  # the next threshold fails


def test_no_threshold_says_how_many_labels_would_or_that_none_would() -> None:
    rng = np.random.default_rng(1)
    scores = rng.random(60)
    agreed = (rng.random(60) < 0.97).astype(int)
    few = choose_threshold(scores, agreed, 0.95, 0.95)
    assert few["threshold"] is None and few["labels_needed"] > 60
    weak = choose_threshold(scores, (rng.random(60) < 0.6).astype(int), 0.95, 0.9)
    assert weak["threshold"] is None and weak["labels_needed"] is None


# --------------------------------------------------------------------------- the canary


@pytest.fixture(scope="module")
def canary_job(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("canary")
    return prepare(parse_config(job(tmp, {}, canary={"labels": str(tmp / "canary.parquet"),
                                                     "min_agreement": 0.7})))  # fmt: skip


def night(prepared: Any, rng: Any, agree: float, noise: float, moved: float, n: int = 100,
          last: dict | None = None) -> tuple[dict[str, Any], dict[str, Any]]:  # fmt: skip
    """One night's verdict: each question's answer agrees with its label with probability
    `agree`; a share `noise` of answers flips on its own, a share `moved` of rows is answered
    anew (every question); `last` is the last night's kept answers."""
    keys = list(QUESTIONS)
    ids = [str(i) for i in range(n)]
    base = {i: {k: bool(int(i) % 2) for k in keys} for i in ids}
    labels = {k: [base[i][k] if rng.random() < agree else not base[i][k] for i in ids]
              for k in keys}  # fmt: skip
    anew = rng.random(n) < moved
    answers = [{k: (not base[i][k]) if (a or rng.random() < noise) else base[i][k] for k in keys}
               for i, a in zip(ids, anew, strict=True)]  # fmt: skip
    rows = CanaryRows(ids, [None] * n, ["h"] * n, labels, "d")
    kept = {"run_id": "x", "rows": {i: {"state": "h", "answers": base[i]} for i in ids}}
    return verdict(prepared, rows, answers, last if last is not None else kept), kept


def test_an_unchanged_service_passes_at_least_19_nights_in_20(canary_job: Any) -> None:
    """400 nights of a service that flips 0.5% of its answers on its own and whose agreement
    with the labels sits just above the floor (0.75 against 0.7)."""
    rng = np.random.default_rng(19)
    passed = sum(night(canary_job, rng, 0.75, 0.005, 0.0)[0]["passed"] for _ in range(400))
    assert passed / 400 >= 0.95


def test_a_service_answering_a_tenth_anew_is_stopped_and_told_in_one_line(canary_job: Any) -> None:
    rng = np.random.default_rng(10)
    results = [night(canary_job, rng, 0.9, 0.0, 0.1)[0] for _ in range(100)]
    assert sum(not r["passed"] for r in results) >= 97
    failed = next(r for r in results if not r["passed"])
    assert "answers changed since the last run on model-1.13.0" in failed["message"]
    assert "'helpful'" in failed["message"] and "\n" not in failed["message"]


def test_a_canary_below_its_floor_beyond_noise_is_stopped(canary_job: Any) -> None:
    rng = np.random.default_rng(3)
    result, _ = night(canary_job, rng, 0.5, 0.0, 0.0)
    assert not result["passed"]
    assert "agreement with the labels fell below canary.min_agreement 70.0%" in result["message"]


def test_the_service_is_told_its_rehearsal_at_run_time_and_refuses_a_bad_one() -> None:
    import httpx

    from conftest import auth, embedded, evaluate_body

    body = evaluate_body(model=MODEL)
    with embedded() as service:
        plain = httpx.post(service.base_url + "/v1/evaluate", json=body, headers=auth()).json()
        admin = service.base_url + "/_admin/faults"
        told = httpx.post(admin, json={"overconfidence": 2.0}, headers=auth())
        assert told.status_code == 200 and told.json()["overconfidence"] == 2.0
        sharp = httpx.post(service.base_url + "/v1/evaluate", json=body, headers=auth()).json()
        bad = httpx.post(admin, json={"drift": 1.5}, headers=auth())
        assert bad.status_code == 422 and "drift" in bad.text
    p, q = plain["answers"]["helpful"]["noul"], sharp["answers"]["helpful"]["noul"]
    assert math.log(q / (1 - q)) == pytest.approx(2 * math.log(p / (1 - p)))
    assert "--overconfidence" in ServiceSettings(api_key="k", overconfidence=2.0).to_args()


def test_the_canary_metrics_read_its_result() -> None:
    from evalpipe.observe import METRICS, RunFacts
    from evalpipe.observe.metrics import Reading

    reading = Reading(RunFacts("r", "job", "out", MODEL, SERVICE, 1200, 250_000))
    by_name = {m.name: m for m in METRICS}
    assert by_name["evalpipe_canary_passed"].values(reading) == []  # no canary: absent
    reading.canary = {
        "passed": False,
        "tests": [{"question": "helpful", "against": "labels", "share": 0.8}],
        "changed": {"helpful": {"changed": 12, "rows": 100}},
    }
    assert by_name["evalpipe_canary_passed"].values(reading) == [({}, 0.0)]
    assert by_name["evalpipe_canary_agreement"].values(reading) == [
        ({"question": "helpful", "against": "labels"}, 0.8),
        ({"question": "helpful", "against": "last_run"}, pytest.approx(0.88)),
    ]


def hand_made(tmp: Path, method: str, params: Any, kind: str = "noul") -> Path:
    """A calibration file as `evalpipe calibrate` writes it, with one question's map given."""
    question = {"kind": kind, "fingerprint": "f" * 16, "method": method, "params": params,
                "labels": ["yes", "no"], "rows": 100}  # fmt: skip
    data = {"format": "evalpipe-calibration", "version": 1, "service": "embedded",
            "model": "model-1.13.0", "fitted": "2026-11-27",
            "questions": {"helpful": question}}  # fmt: skip
    path = tmp / "hand.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("method", "params", "kind", "said"),
    [
        ("temperature", {"t": -1.5}, "choice", "params.t must be above 0"),
        ("temperature", {"t": 0}, "score", "params.t must be above 0"),
        ("temperature", {}, "choice", "missing 't'"),
        ("platt", {"a": 1.0}, "noul", "missing 'b'"),
        ("platt", {"a": "big", "b": 0}, "noul", "params.a must be a finite number"),
        ("isotonic", {"x": [0, 0.5, 1], "y": [0, 1.4, 1]}, "noul", "must lie in [0, 1]"),
        ("isotonic", {"x": [0, 0.7, 0.5], "y": [0, 0.5, 1]}, "noul", "must be sorted"),
        ("isotonic", {"x": [0, 0.5, 1], "y": [0.9, 0.2, 1]}, "noul", "must be sorted"),
        ("isotonic", {"x": [0, 1], "y": [0.1]}, "noul", "lists of one length"),
    ],
)
def test_a_calibration_file_whose_map_is_no_probability_is_refused_on_load_in_one_line(
    tmp_path: Path, method: str, params: Any, kind: str, said: str
) -> None:
    with pytest.raises(InputError) as refused:
        Calibration.read(hand_made(tmp_path, method, params, kind))
    line = refused.value.one_line()
    assert "question 'helpful'" in line and said in line and "\n" not in line, line
    assert refused.value.exit_code == 2


def test_a_sound_hand_made_map_is_read() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        found = Calibration.read(hand_made(Path(tmp), "isotonic", {"x": [0, 1], "y": [0.1, 0.9]}))
    assert found.questions["helpful"].params == {"x": [0, 1], "y": [0.1, 0.9]}
