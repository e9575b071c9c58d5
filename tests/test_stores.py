"""`evalpipe.stores.location.Folder` on a filesystem whose uploads are not atomic (HDFS, as pyarrow
sees it): a file goes through a temporary name and a rename, so a reader or a resume never sees half
of one, and the manifest can be replaced. A local subtree filesystem stands in for HDFS (no
Hadoop here): it is a pyarrow filesystem outside the atomic-upload list, with real files."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from evalpipe.output.outdir import remove_temp_files
from evalpipe.stores.location import Folder


def folder_on_subtree(tmp: Path) -> Folder:
    folder = Folder(tmp / "out")
    folder.local = None  # as for a store: every call goes through the pyarrow filesystem
    folder.fs = pafs.SubTreeFileSystem(str(tmp), pafs.LocalFileSystem())
    folder.root = "out"
    (tmp / "out").mkdir()
    return folder


def test_a_store_without_atomic_uploads_writes_through_a_temporary_name(tmp_path: Path) -> None:
    folder = folder_on_subtree(tmp_path)
    assert folder.fs.type_name == "subtree"
    folder.write_bytes("_manifest.json", b"{}")
    folder.write_bytes("_manifest.json", b'{"rows": 2}')  # replaced, as the manifest is
    folder.write_parquet("part-00000-" + "a" * 32 + ".parquet", pa.table({"id": [1, 2]}))
    assert folder.names() == ["_manifest.json", "part-00000-" + "a" * 32 + ".parquet"]
    assert folder.read_bytes("_manifest.json") == b'{"rows": 2}'
    assert folder.read_table(folder.names()[1])["id"].to_pylist() == [1, 2]
    assert folder.read_bytes("absent") is None

    def broken(stream: object) -> None:
        raise OSError("the connection dropped")

    with pytest.raises(OSError, match="dropped"):
        folder._put("_manifest.json", broken)
    assert folder.names() == ["_manifest.json", "part-00000-" + "a" * 32 + ".parquet"]
    assert folder.read_bytes("_manifest.json") == b'{"rows": 2}'  # the old one, whole
    (tmp_path / "out" / f".part-00001-{'b' * 32}.parquet.{'c' * 32}.tmp").write_bytes(b"half")
    assert remove_temp_files(folder) == 1  # what a kill mid-write leaves, a resume deletes
    folder.delete("_manifest.json")
    folder.delete("_manifest.json")  # already gone: no matter
    assert folder.names() == ["part-00000-" + "a" * 32 + ".parquet"]
