"""A job's calibration: its file read, held to the job's judge, and its abstention chosen.

`calibration.file` was fitted by `evalpipe calibrate` on one service, one versioned model and
each question as it was asked; a job that asks another is refused with one line naming which
(the map would be someone else's). A question of the job the file does not calibrate gets no
calibrated columns, and a warning says so. With `calibration.target_agreement`, each question's
threshold is chosen now, on the file's held-out labelled rows (`evalpipe.planning.abstain`), so
`plan` and `run` show the same promise; one that no threshold can keep is warned about (its
rows all abstain, and the warning says how many labels would do).
"""

from __future__ import annotations

from evalpipe.calibration import CalibratedQuestion, Calibration
from evalpipe.config import JobConfig
from evalpipe.contract import question_dicts
from evalpipe.errors import ConfigError
from evalpipe.planning.abstain import choose_threshold

KEY = "calibration.file"


def job_calibration(config: JobConfig, warnings: list[str]) -> Calibration | None:
    """The job's calibration (None without `calibration.file`), checked against the job;
    ConfigError in one line when it is another judge's or another question's."""
    section = config.calibration
    if section.file is None:
        return None
    found = Calibration.read(section.file, KEY)
    shown = f"{KEY}: '{section.file}'"
    if found.service != config.service.identity:
        raise ConfigError(
            f"{shown} was fitted on the answers of service '{found.service}', this job asks "
            f"'{config.service.identity}': fit it again with evalpipe calibrate on this "
            "service's output"
        )
    if found.model != config.model:
        raise ConfigError(
            f"{shown} was fitted on model '{found.model}', this job asks '{config.model}': pin "
            f"model: {found.model}, or fit it again on this model's output"
        )
    asked = question_dicts(config.parsed_questions)
    kept = {}
    for key, entry in found.questions.items():
        if key not in asked:
            warnings.append(f"{shown} calibrates question '{key}', which this job does not ask")
            continue
        if entry.fingerprint != Calibration.fingerprint(asked[key]):
            raise ConfigError(
                f"{shown} was fitted for question '{key}' with other instructions or criteria "
                "than this job's: fit it again with evalpipe calibrate on this job's output"
            )
        kept[key] = _abstaining(config, key, entry, warnings)
    missing = [key for key in asked if key not in kept]
    if missing:
        warnings.append(f"{shown} has no map for {', '.join(missing)}: no calibrated columns")
    return Calibration(found.service, found.model, found.fitted, kept, found.source, found.name)


def _abstaining(
    config: JobConfig, key: str, entry: CalibratedQuestion, warnings: list[str]
) -> CalibratedQuestion:
    """`entry` keeping rows by the job's target agreement, if it has one."""
    target, confidence = config.calibration.target_agreement, config.calibration.confidence
    if target is None:
        return entry
    if not entry.scores:
        raise ConfigError(
            f"{KEY}: question '{key}' has no held-out labelled rows to choose a threshold on: "
            "fit it again with evalpipe calibrate"
        )
    figures = choose_threshold(entry.scores, entry.agreed, target, confidence)
    if figures["threshold"] is None:
        needed = figures["labels_needed"]
        more = (
            f"about {needed:,} labelled rows would" if needed else "more labels would not: "
            "its surest rows agree less than that"
        )  # fmt: skip
        warnings.append(
            f"calibration.target_agreement: no threshold promises {target:.1%} agreement on "
            f"question '{key}' with {confidence:.0%} confidence from its {entry.rows:,} "
            f"labelled rows ({more}); every row of it abstains ({key}__abstain)"
        )
    return entry.abstaining(**figures)
