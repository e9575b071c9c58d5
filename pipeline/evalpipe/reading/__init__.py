"""The one reader of an output: a folder of Parquet parts (local or on an object store) or a
Delta table (`TABLE`, `TABLE@VERSION`, `TABLE/dt=...`), of any schema version, with its manifest.

    output.py     `open_output`: where an output is, its schema, questions and manifest; its
                  rows, lazily (`Output.scan`) or at once (`Output.rows`)
    questions.py  `Question`: one question's key, type, columns and labels, for any schema
                  version (`questions_of` a schema)
    nightly.py    `nights`: the outputs of a nightly series (`dt=*` folders, `dt` partitions)

`ep.read` (`evalpipe.api`), `describe`, `diff`, `agree`, the nightly series (`evalpipe.analysis`)
and the report (`evalpipe.report`) all read through here; how the output is written is
`evalpipe.output`'s, whose door (`stored_at`) this asks what a location holds, in its format.
"""

from evalpipe.output import scan_files
from evalpipe.reading.nightly import nights
from evalpipe.reading.output import Output, open_output
from evalpipe.reading.questions import Question, questions_of

__all__ = [
    "Output",
    "Question",
    "nights",
    "open_output",
    "questions_of",
    "scan_files",
]
