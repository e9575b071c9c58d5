"""A calibration file (what `evalpipe calibrate` fitted on people's labels), and the calibrated
columns' values it gives beside the judge's own: a room of its own below `evalpipe.output`,
whose schema and sink carry those columns, and above nothing but the contract.

    file.py    `Calibration`: the file, read, checked and written; each question's map
               (`CalibratedQuestion`, `Abstention`), applied to a table's arrays
               (`calibrated_arrays`), and the rows a run kept per question (`kept_counts`)
"""

from evalpipe.calibration.file import (
    FINGERPRINT_KEY,
    MAP_KEY,
    ROLE_KEY,
    Abstention,
    CalibratedQuestion,
    Calibration,
    calibrated_arrays,
    kept_counts,
    map_metadata,
)

__all__ = [
    "FINGERPRINT_KEY",
    "MAP_KEY",
    "ROLE_KEY",
    "Abstention",
    "CalibratedQuestion",
    "Calibration",
    "calibrated_arrays",
    "kept_counts",
    "map_metadata",
]
