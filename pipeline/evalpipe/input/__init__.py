"""Parquet in: a corpus (a file, a folder or an object-store prefix) as bounded batches of
(id, state) rows.
"""

from evalpipe.input.corpus import corpus_files
from evalpipe.input.source import Row, Selection, Source, SourceSpec

__all__ = ["Row", "Selection", "Source", "SourceSpec", "corpus_files"]
