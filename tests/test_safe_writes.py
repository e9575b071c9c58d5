"""Files the job writes in shared folders: a link planted where it writes is refused or replaced,
never written through, and its target is left untouched; a file of another user's is refused;
clean-ups follow no link (evalpipe.stores.private, output.lock, limits.hostpace).
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner

from conftest import job_config
from evalpipe.cache import CacheUnusable, Store
from evalpipe.cli.main import main
from evalpipe.errors import ConfigError
from evalpipe.limits.hostpace import FOLDER, HostPace, host_file
from evalpipe.output.journal import JournalWriter
from evalpipe.output.lock import LOCK_NAME, hold
from evalpipe.stores import open_private, remove_folder, write_bytes

KEPT = b"a file of the user's own, which no run may change\n"
AS_ROOT = os.geteuid() == 0  # only root can make a file of another user's


def victim(tmp: Path) -> Path:
    """A file elsewhere that a planted link points at."""
    target = tmp / "elsewhere" / "precious.txt"
    target.parent.mkdir()
    target.write_bytes(KEPT)
    return target


def test_a_lock_file_planted_as_a_link_is_refused_and_its_target_untouched(
    tmp_path: Path,
) -> None:
    target = victim(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_NAME).symlink_to(target)
    link = r"\.evalpipe\.lock is a symbolic link"
    with pytest.raises(ConfigError, match=link) as refused, hold(out / LOCK_NAME, str(out)):
        pass
    assert refused.value.exit_code == 2
    assert target.read_bytes() == KEPT
    assert (out / LOCK_NAME).is_symlink()  # left as it was found


def test_a_run_on_an_output_with_a_planted_lock_link_exits_2_before_anything(
    tmp_path: Path,
) -> None:
    """`evalpipe run` for real: the lock is taken before the service is contacted (so no Ray
    starts), the link is refused in one line, and what it points at is unchanged."""
    target = victim(tmp_path)
    pq.write_table(pa.table({"id": [1, 2], "text": ["a b", "c d"]}), tmp_path / "in.parquet")
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump(job_config(tmp_path, "embedded")))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / LOCK_NAME).symlink_to(target)
    result = CliRunner().invoke(main, ["run", str(config)])
    assert result.exit_code == 2, result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith("ConfigError: output.path ") and "symbolic link" in line
    assert target.read_bytes() == KEPT
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [LOCK_NAME]


@pytest.mark.skipif(not AS_ROOT, reason="making a file of another user's needs root")
def test_a_lock_file_of_another_user_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_NAME).write_bytes(KEPT)
    os.chown(out / LOCK_NAME, 4242, 4242)
    with pytest.raises(ConfigError, match="another user"), hold(out / LOCK_NAME, str(out)):
        pass
    assert (out / LOCK_NAME).read_bytes() == KEPT


def test_open_private_refuses_what_is_not_a_plain_file_of_ours(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")  # would block an O_WRONLY open without a reader
    (tmp_path / "twice").write_bytes(KEPT)
    os.link(tmp_path / "twice", tmp_path / "again")
    with pytest.raises(OSError):  # ENXIO at once, where a plain open would wait for a reader
        open_private(tmp_path / "fifo", os.O_WRONLY | os.O_APPEND)
    for name, says in (("fifo", "not a regular file"), ("again", "another name")):
        with pytest.raises(OSError, match=says):
            open_private(tmp_path / name, os.O_RDWR | os.O_CREAT)
    fd = open_private(tmp_path / "new", os.O_RDWR | os.O_CREAT, 0o600)
    os.close(fd)
    assert (tmp_path / "new").is_file()


def test_whole_files_replace_a_planted_link_instead_of_writing_through_it(
    tmp_path: Path,
) -> None:
    """The manifest, parts and init's config are written whole and renamed into place; the
    journal is made so, then opened to append: a link at their name is replaced."""
    target = victim(tmp_path)
    (tmp_path / "_manifest.json").symlink_to(target)
    write_bytes(tmp_path / "_manifest.json", b"{}")
    assert not (tmp_path / "_manifest.json").is_symlink()
    (tmp_path / ".journal").symlink_to(target)
    journal = JournalWriter.create(tmp_path / ".journal", pa.schema([("id", pa.int64())]), "f")
    journal.append(pa.table({"id": [1, 2, 3]}))
    journal.close()
    assert not (tmp_path / ".journal").is_symlink()
    assert target.read_bytes() == KEPT


def test_the_host_schedule_follows_no_link(tmp_path: Path) -> None:
    """The first job of a boot removes earlier boots' folders: one planted as a link to a
    folder of the user's is left, with everything in it; a link inside a real one is removed
    as a name. An account's schedule planted as a link: the job paces alone."""
    target = victim(tmp_path)
    path = host_file("evalpipe-budget-x", tmp_path)
    host = path.parent.name.rsplit("-", 1)[0]
    (tmp_path / FOLDER).mkdir()
    (tmp_path / FOLDER / f"{host}-0badb007").symlink_to(target.parent)
    earlier = tmp_path / FOLDER / f"{host}-0123abcd"
    earlier.mkdir()
    (earlier / "evalpipe-budget-x").write_bytes(b"old")
    (earlier / "link").symlink_to(target)
    pace = HostPace.open(path)
    assert pace is not None
    pace.close()
    assert not earlier.exists()
    assert (tmp_path / FOLDER / f"{host}-0badb007").is_symlink()
    assert sorted(p.name for p in target.parent.iterdir()) == ["precious.txt"]
    assert target.read_bytes() == KEPT
    path.unlink()
    path.symlink_to(target)
    assert HostPace.open(path) is None
    assert target.read_bytes() == KEPT


def test_remove_folder_never_follows_a_link(tmp_path: Path) -> None:
    target = victim(tmp_path)
    (tmp_path / "link").symlink_to(target.parent)
    assert remove_folder(tmp_path / "link") is False
    assert target.read_bytes() == KEPT
    (tmp_path / "gone").mkdir()
    (tmp_path / "gone" / "inner").symlink_to(target)
    assert remove_folder(tmp_path / "gone") is True
    assert target.read_bytes() == KEPT


def test_the_answer_cache_is_never_opened_through_a_link(tmp_path: Path) -> None:
    target = victim(tmp_path)
    (tmp_path / "answers.sqlite3").symlink_to(target)
    with pytest.raises(CacheUnusable, match="symbolic link"):
        Store.open(tmp_path / "answers.sqlite3")
    (tmp_path / "answers.sqlite3").unlink()
    (tmp_path / "answers.sqlite3-wal").symlink_to(target)
    with pytest.raises(CacheUnusable, match="-wal is a symbolic link"):
        Store.open(tmp_path / "answers.sqlite3")
    assert target.read_bytes() == KEPT


def test_init_never_writes_through_a_link_at_out(tmp_path: Path) -> None:
    target = victim(tmp_path)
    pq.write_table(pa.table({"id": [1, 2], "text": ["a b", "c d"]}), tmp_path / "in.parquet")
    (tmp_path / "job.yaml").symlink_to(tmp_path / "elsewhere" / "missing.yaml")  # dangling
    refused = CliRunner().invoke(
        main, ["init", str(tmp_path / "in.parquet"), "--out", str(tmp_path / "job.yaml")]
    )
    assert refused.exit_code == 2 and "exists" in refused.output
    assert not (tmp_path / "elsewhere" / "missing.yaml").exists()
    (tmp_path / "job.yaml").unlink()
    (tmp_path / "job.yaml").symlink_to(target)
    forced = CliRunner().invoke(
        main, ["init", str(tmp_path / "in.parquet"), "--out", str(tmp_path / "job.yaml"), "--force"]
    )
    assert forced.exit_code == 0, forced.output
    assert target.read_bytes() == KEPT and not (tmp_path / "job.yaml").is_symlink()
