"""`evalpipe cache stats | prune`: what the answer cache holds, and making it smaller.

Both find the cache as a run does (`cache.path` of `--config`, else `--path`, else the default
place), and both work while jobs use it: `stats` only reads, `prune` deletes in short
transactions. A file that cannot be used (another program's, damaged, a newer format) is exit 2
with one line saying why; a cache that does not exist yet is no error.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from evalpipe.cache import DAY, CacheUnusable, Store, cache_file
from evalpipe.cli.options import reports_errors
from evalpipe.errors import ConfigError

_WHERE = [
    click.option(
        "--config",
        "config_path",
        type=click.Path(path_type=Path),
        help="Take cache.path (and cache.max_age_days) from this job config.",
    ),
    click.option(
        "--path",
        type=click.Path(path_type=Path),
        help="The cache directory or file [default: $XDG_CACHE_HOME/evalpipe].",
    ),
]


def _where(options: Any) -> Any:
    for option in reversed(_WHERE):
        options = option(options)
    return options


def _located(config_path: Path | None, path: Path | None) -> tuple[Path, float | None]:
    """The cache file, and the config's `cache.max_age_days` (None without a config)."""
    if config_path is not None and path is not None:
        raise ConfigError("--config and --path name the cache twice: give one of them")
    if config_path is None:
        return cache_file(path), None
    from evalpipe.config import load_config

    settings = load_config(config_path).cache
    return cache_file(settings.path), settings.max_age_days


def _open(file: Path, write: bool) -> Store:
    try:
        return Store.open(file, write=write)
    except CacheUnusable as exc:
        raise ConfigError(f"cache.path: {exc}") from None


def _when(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _size(n: int) -> str:
    if n < 1024:
        return f"{n:,} bytes"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024 or unit == "TiB":
            break
    return f"{size:,.1f} {unit}"


def format_stats(s: dict[str, Any]) -> str:
    lines = [
        f"evalpipe answer cache  {s['path']} (format {s['format']})",
        f"  entries   {s['entries']:,} answers, {_size(s['bytes'])} on disk",
        f"  oldest    {_when(s['oldest'])}",
        f"  newest    {_when(s['newest'])}",
    ]
    for title, key in (("by service", "services"), ("by model", "models")):
        for i, (name, m) in enumerate(s.get(key, {}).items()):
            label = title if i == 0 else ""
            lines.append(f"  {label:<10} {name}: {m['entries']:,} answers ({m['tokens']:,} tokens)")
    return "\n".join(lines)


@click.group()
def cache() -> None:
    """The answer cache that runs share: answers are paid once per content, not per run."""


@cache.command()
@_where
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@reports_errors
def stats(config_path: Path | None, path: Path | None, as_json: bool) -> None:
    """Entries, size on disk, answers by service and by model, oldest and newest. Answers
    kept before the cache named the service are under 'unknown' (never served)."""
    file, _ = _located(config_path, path)
    if not file.exists():
        click.echo(f"No answer cache at {file} yet (a run with a versioned model makes it).")
        return
    store = _open(file, write=False)
    try:
        figures = store.stats()
    finally:
        store.close()
    click.echo(json.dumps(figures, indent=2) if as_json else format_stats(figures))


@cache.command()
@_where
@click.option(
    "--older-than",
    "days",
    type=click.FloatRange(min=0),
    default=None,
    metavar="DAYS",
    help="Delete answers older than this many days [default: the config's cache.max_age_days].",
)
@click.option("--vacuum", is_flag=True, help="Then give the freed space back to the disk.")
@reports_errors
def prune(config_path: Path | None, path: Path | None, days: float | None, vacuum: bool) -> None:
    """Delete answers older than DAYS (a job then pays for them again)."""
    file, max_age = _located(config_path, path)
    days = max_age if days is None else days
    if days is None:
        raise ConfigError("--older-than: say how many days to keep (or set cache.max_age_days)")
    if not file.exists():
        click.echo(f"No answer cache at {file}: nothing to prune.")
        return
    store = _open(file, write=True)
    try:
        removed = store.prune(int(time.time() - days * DAY))
        if vacuum:
            store.vacuum()
    finally:
        store.close()
    click.echo(f"Pruned {removed:,} answers older than {days:g} days from {file}.")
