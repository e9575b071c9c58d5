"""Facts the code holds in one place: the shared tier's address and the API key's variable.

The code is read as Python (its syntax tree): the tier's address is made from a config in one
place, `planning.prepare` (the session's start-up, which hands it down as `PreparedJob.tier`),
and besides it only by `evalpipe run`'s probe before any session (`session.early`); an address is
built nowhere outside `evalpipe.tier`; the API key's variable is read from the environment in one
module (`config.key.api_key_in`), in whichever process needs the key. Then the value is
followed for real: what a prepared job carries is what the learned values are kept with.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
from pathlib import Path

import polars as pl

import evalpipe
from conftest import job_config
from evalpipe.config import parse_config
from evalpipe.planning import Learned, prepare
from evalpipe.tier import TierAddress
from sourcetree import parsed

PACKAGE = Path(evalpipe.__file__).resolve().parent
# Where a job's tier is resolved: the session's start-up, and `evalpipe run`'s early probe
# (before the engine loads; the session then resolves it in `prepare`).
RESOLVERS = {"planning/prepared.py", "session/early.py"}
KEY_READER = {"config/key.py"}


@functools.cache  # the package read once for the module's checks, not once per check
def _modules() -> tuple[tuple[str, ast.AST], ...]:
    return tuple(
        (p.relative_to(PACKAGE).as_posix(), parsed(p)) for p in sorted(PACKAGE.rglob("*.py"))
    )


def _called(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        fn = node.func
        if isinstance(fn, ast.Name):
            return fn.id
        return fn.attr if isinstance(fn, ast.Attribute) else None
    return None


@functools.cache  # one walk of every tree for all the names asked
def _callers() -> dict[str, frozenset[str]]:
    found: dict[str, set[str]] = {}
    for where, tree in _modules():
        for node in ast.walk(tree):
            name = _called(node)
            if name is not None:
                found.setdefault(name, set()).add(where)
    return {name: frozenset(wheres) for name, wheres in found.items()}


def calls_of(name: str) -> set[str]:
    """The modules that call `name` (a function or a class)."""
    return set(_callers().get(name, frozenset()))


def environ_reads(tree: ast.AST) -> list[str]:
    """The variables' expressions `tree` reads from the environment (`os.environ.get(x)`,
    `os.environ[x]`, `os.getenv(x)`; writes are not reads)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            text = ast.unparse(node.func)
            if text in ("os.environ.get", "os.getenv", "environ.get", "getenv"):
                found.append(ast.unparse(node.args[0]))
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and ast.unparse(node.value) in ("os.environ", "environ")
        ):
            found.append(ast.unparse(node.slice))
    return found


def test_the_tier_address_is_made_in_one_place() -> None:
    assert calls_of("job_address") - {"tier/address.py"} == RESOLVERS
    built = {w for w in calls_of("TierAddress") if not w.startswith("tier/")}
    assert not built, f"a TierAddress built outside evalpipe.tier: {sorted(built)}"


def test_the_api_key_is_read_from_the_environment_in_one_module() -> None:
    readers = {
        where
        for where, tree in _modules()
        for variable in environ_reads(tree)
        if "key" in variable.lower()
    }
    assert readers == KEY_READER, "read the key with evalpipe.config.api_key_in"


def test_the_checks_find_what_they_look_for() -> None:
    """The readers above find each way of reading the key, and a call by name."""
    source = (
        "import os\nos.environ.get(settings.api_key_env, '')\nos.environ[key_env]\n"
        "os.getenv(config.service.api_key_env)\nos.environ['X'] = key\njob_address(config)\n"
    )
    tree = ast.parse(source)
    assert environ_reads(tree) == [
        "settings.api_key_env",
        "key_env",
        "config.service.api_key_env",
    ]
    assert [_called(n) for n in ast.walk(tree) if _called(n) == "job_address"] == ["job_address"]


def test_the_prepared_job_hands_its_tier_down(tmp_path: Path) -> None:
    """No `shared.url`: no tier; the address a prepared job carries is the one its learned
    values are kept with (nothing downstream resolves it again from the config)."""
    pl.DataFrame({"id": [1, 2], "text": ["a", "b"]}).write_parquet(tmp_path / "in.parquet")
    prepared = prepare(parse_config(job_config(tmp_path, "embedded")))
    assert prepared.tier is None and Learned.of(prepared).tier is None
    address = TierAddress("redis://127.0.0.1:1", "EVAL_TIER_PASSWORD", "evalpipe:{test}")
    handed = dataclasses.replace(prepared, tier=address)
    assert Learned.of(handed).tier is address
