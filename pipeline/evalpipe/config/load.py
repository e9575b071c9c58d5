"""Reading a job config: the file's text, its YAML, `--set` overrides, and validation errors
turned into one line that names the key path (`limits.requests_per_minute: must be greater than
0`), with a likely spelling for an unknown key or a missing one. A config given by mistake (a
Parquet file, a folder, a YAML syntax error) is one line too, before anything is sent.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from evalpipe.config.endpoints import ServiceConfig
from evalpipe.config.model import JobConfig, LimitsConfig
from evalpipe.contract import path_of
from evalpipe.errors import ConfigError, ContractError


def _is_model(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, BaseModel)


def _suggest(loc: tuple[str | int, ...], model: type[BaseModel]) -> str:
    """'did you mean ...' for an unknown key, from the fields of the section it sits in."""
    section: Any = model
    for part in loc[:-1]:
        fields = section.model_fields if _is_model(section) else {}
        field = fields.get(str(part))
        if field is None or not isinstance(field.annotation, type):
            return ""
        section = field.annotation
    if not (isinstance(section, type) and issubclass(section, BaseModel)):
        return ""
    close = difflib.get_close_matches(str(loc[-1]), list(section.model_fields), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


BASE_URL_KINDS = (
    "the evaluation service's URL (https://host[:port]), or 'embedded' for the reference "
    "service that ships with evalpipe (made-up answers, for demos and tests)"
)


def _loc(error: Any) -> tuple[str | int, ...]:
    # Union members add their type names to the path; the user never wrote them.
    return tuple(
        p for p in error["loc"] if not (isinstance(p, str) and p.startswith(("str", "tuple[")))
    )


def _misspelled(missing: tuple[str | int, ...], errors: list[Any]) -> str:
    """' (is 'id_colum' a misspelling of it?)' when an unknown key of the same section is close
    to the missing one."""
    unknown = [
        str(loc[-1])
        for loc in (_loc(e) for e in errors if e["type"] == "extra_forbidden")
        if loc[:-1] == missing[:-1]
    ]
    close = difflib.get_close_matches(str(missing[-1]), unknown, n=1)
    return f" (is {close[0]!r} a misspelling of it?)" if close else ""


def _config_error(exc: ValidationError) -> ConfigError:
    errors = exc.errors(include_url=False)
    # A missing required key first: an unknown key beside it is most likely its misspelling.
    error = next((e for e in errors if e["type"] == "missing"), errors[0])
    loc = _loc(error)
    kind = error["type"]
    if kind == "extra_forbidden":
        message = "unknown key" + _suggest(loc, JobConfig)
    elif kind == "missing" and loc in (("service",), ("service", "base_url")):
        loc, message = ("service", "base_url"), f"required key is missing: {BASE_URL_KINDS}"
    elif kind == "missing":
        message = "required key is missing" + _misspelled(loc, errors)
    else:
        message = error["msg"].removeprefix("Value error, ")
    more = len(errors) - 1
    return ConfigError(f"{path_of(loc)}: {message}" + (f" (and {more} more)" if more else ""))


def parse_config(data: Any, source: str = "config") -> JobConfig:
    """Validate a config mapping; raises ConfigError naming the key path."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of keys (input, output, ...)")
    try:
        config = JobConfig.model_validate(data)
    except ValidationError as exc:
        raise _config_error(exc) from None
    try:
        config.parsed_questions  # noqa: B018 - validates the questions with the contract module
    except ContractError as exc:
        raise ConfigError(exc.message) from None
    check_guards(config)
    return config


def check_guards(config: JobConfig) -> None:
    """A cost cap needs a price to count by: without one it is a ConfigError, not ignored."""
    pricing = config.pricing
    if config.limits.max_cost_usd is None or pricing.default is not None:
        return
    if config.model not in pricing.models:
        raise ConfigError(
            "limits.max_cost_usd: a cost cap needs the model's price: set pricing.default (or "
            f"pricing.models.{config.model}) in dollars per million input tokens"
        )


def with_limits(config: JobConfig, **values: Any) -> JobConfig:
    """`config` with these `limits` keys set (those not None), validated as in the file: the
    Python API's `max_cost=`, `max_duration=`, `deadline=`."""
    given = {key: value for key, value in values.items() if value is not None}
    if not given:
        return config
    try:
        limits = LimitsConfig.model_validate({**config.limits.model_dump(), **given})
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        message = error["msg"].removeprefix("Value error, ")
        raise ConfigError(f"limits.{path_of(_loc(error))}: {message}") from None
    changed = config.model_copy(update={"limits": limits})
    check_guards(changed)
    return changed


def parse_service(data: dict[str, Any]) -> ServiceConfig:
    """A `service` section on its own (for `evalpipe models --base-url ...`)."""
    try:
        return ServiceConfig.model_validate(data)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        message = error["msg"].removeprefix("Value error, ")
        raise ConfigError(f"service.{path_of(tuple(error['loc']))}: {message}") from None


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """`data` with each `KEY=VALUE` of `overrides` set, KEY a dotted path (`limits.headroom`)
    and VALUE parsed as YAML (`600` is a number, `[a, b]` a list). The result is validated like
    the file, so an unknown key gets the same message as one in the file."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        parts = key.split(".")
        if not sep or not all(parts):
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. output.path=out/today")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            raise ConfigError(f"--set {key}: the value is not valid YAML") from None
        node = data
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                section = ".".join(parts[: depth + 1])
                raise ConfigError(f"--set {key}: {section} is a value, not a section of keys")
            node = child
        node[parts[-1]] = value
    return data


def load_config(path: Path | str, overrides: Sequence[str] = ()) -> JobConfig:
    """Read a YAML job config, apply `--set` overrides, and validate the result."""
    path = Path(path)
    data = yaml_mapping(path, read_text(path))
    if overrides and isinstance(data, dict):
        data = apply_overrides(data, overrides)
    return parse_config(data, str(path))


def read_text(path: Path) -> str:
    """The config file's text; a folder, a binary file (a Parquet file given by mistake) or
    one that cannot be read is a one-line ConfigError."""
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder; give the job's YAML config file")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from None
    if raw.startswith(b"PAR1"):
        raise ConfigError(
            f"{path}: is a Parquet file, not a job config; name it in the config's input.path "
            f"(`evalpipe init {path}` writes a config for it)"
        )
    try:
        if b"\0" in raw[:8192]:
            raise UnicodeDecodeError("utf-8", raw[:1], 0, 1, "binary")
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: is a binary file, not a YAML job config") from None


def yaml_mapping(path: Path, text: str) -> Any:
    """The YAML document of `text`; a syntax error is one line with its line, column and
    reason."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None)
        reason = f": {problem}" if problem else ""
        raise ConfigError(f"{path}: not valid YAML{where}{reason}") from None
