"""The settings of ``asyncagents serve``: command-line options, environment, a TOML file.

Every setting is a field of a pydantic model: `ServeSettings` (the service's own: the OpenCode
server, where to listen, the store) or `TaskManagerConfig` (the manager's knobs). Each field
gives one option (``--poll-interval``), one environment variable
(``ASYNCAGENTS_POLL_INTERVAL``) and one key of the config file (``poll_interval``), with the
field's ``description`` as its help, so a field added to either model is a setting at once.

An option beats the environment, which beats the file, which beats the default. Pydantic
validates every value wherever it came from; an error names the setting and where its value
came from.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tomllib
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo

from ..locations import DEFAULT_HOST, DEFAULT_PORT
from ..tasks.config import TaskManagerConfig
from ..tasks.opencode import OpenCodeCredentials
from ..tasks.store import SQLiteTaskStore, TaskStore

ENV_PREFIX = "ASYNCAGENTS_"
#: what ``--store`` reads as a PostgreSQL DSN rather than a SQLite file
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_DEST_PREFIX = "setting_"
#: "(default: ...)" in a field's description: a default that is not a plain value
_STATED_DEFAULT = re.compile(r" ?\(default: ([^()]*)\)")


class ServeSettings(BaseModel):
    """What the service itself needs: the OpenCode server, where to listen, the store."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    opencode: str = Field(
        description="the OpenCode server (`opencode serve`) the tasks run on, as an http(s) URL",
        json_schema_extra={"metavar": "URL"},
    )
    host: str = Field(
        default=DEFAULT_HOST,
        description="the address to listen on",
        json_schema_extra={"metavar": "ADDRESS"},
    )
    port: int = Field(default=DEFAULT_PORT, ge=1, le=65535, description="the TCP port")
    allowed_host: tuple[str, ...] = Field(
        default=(),
        description="also answer requests whose Host header is NAME or NAME:PORT (by default "
        "only the bound address, and localhost when it is loopback)",
        json_schema_extra={"metavar": "NAME"},
    )
    opencode_username: str | None = Field(
        default=None,
        description="OpenCode's server username (default: $OPENCODE_SERVER_USERNAME, else "
        "opencode)",
        json_schema_extra={"metavar": "NAME"},
    )
    opencode_password_file: Path | None = Field(
        default=None,
        description="a file holding OpenCode's server password (default: "
        "$OPENCODE_SERVER_PASSWORD; the password itself is never an option)",
        json_schema_extra={"metavar": "PATH"},
    )
    store: str | None = Field(
        default=None,
        description="where the tasks are kept: a SQLite file, or a PostgreSQL DSN "
        "(postgresql://user@host/db; the password from PGPASSWORD or ~/.pgpass) "
        "(default: $XDG_STATE_HOME/asyncagents/tasks.sqlite3)",
        json_schema_extra={"metavar": "PATH|DSN"},
    )


#: the models whose fields are settings, in the order the help and the docs list them
MODELS: tuple[type[BaseModel], ...] = (ServeSettings, TaskManagerConfig)


class SettingsError(Exception):
    """A setting is missing or wrong; each line of the message names one setting."""


@dataclass(frozen=True)
class Settings:
    """The service's settings and the manager's config, each validated."""

    serve: ServeSettings
    manager: TaskManagerConfig
    #: where each given setting came from (``--port``, ``ASYNCAGENTS_PORT``, ``port in FILE``)
    sources: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Setting:
    name: str
    model: type[BaseModel]
    info: FieldInfo

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def kind(self) -> str:
        """``bool``, ``choice``, ``mapping`` or ``scalar``: how an option takes its value."""
        annotation = _without_none(self.info.annotation)
        if annotation is bool:
            return "bool"
        if typing.get_origin(annotation) is Literal:
            return "choice"
        if typing.get_origin(annotation) is dict:
            return "mapping"
        if typing.get_origin(annotation) is tuple:
            return "list"
        return "scalar"

    @property
    def choices(self) -> tuple[str, ...]:
        return tuple(str(c) for c in typing.get_args(_without_none(self.info.annotation)))

    @property
    def metavar(self) -> str:
        extra = self.info.json_schema_extra
        if isinstance(extra, dict) and isinstance(extra.get("metavar"), str):
            return str(extra["metavar"])
        annotation = _without_none(self.info.annotation)
        if self.kind == "mapping":
            value = typing.get_args(annotation)[1]
            return "KEY=N" if value in (int, float) else "KEY=VALUE"
        return {int: "N", float: "NUMBER"}.get(annotation, "TEXT")

    @property
    def default(self) -> Any:
        if self.info.is_required():
            return None
        factory = self.info.default_factory
        if factory is None:
            return self.info.default
        # called without arguments: pydantic before 2.11 wants validated data for that otherwise
        return typing.cast(typing.Callable[[], Any], factory)()


def _without_none(annotation: Any) -> Any:
    """``X`` for ``X | None``, else the annotation itself."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def settings() -> list[_Setting]:
    """Every setting, the service's first, then the manager's."""
    found = [
        _Setting(name, model, info) for model in MODELS for name, info in model.model_fields.items()
    ]
    names = [s.name for s in found]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:  # pragma: no cover (a programming error, caught by the tests)
        raise RuntimeError(f"settings named twice: {duplicates}")
    return found


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "none"
    if isinstance(value, tuple):
        return ", ".join(map(str, value)) or "none"
    return str(value)


def _help(setting: _Setting) -> str:
    text = setting.info.description or setting.name.replace("_", " ")
    if setting.kind == "mapping":
        text += "; repeat for each key"
    if setting.kind == "list":
        text += "; repeatable"
    default = setting.default
    if default not in (None, {}, ()) and "(default" not in text:
        text += f" (default: {_show(default)})"
    return f"{text} [env {setting.env}]"


def add_options(parser: argparse.ArgumentParser) -> None:
    """One option per setting, and ``--config FILE``; none has an argparse default, so
    `resolve` can tell a given option from the environment and the file beneath it."""
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="a TOML file of settings (keys as the options' names with underscores: "
        "poll_interval = 10); options and ASYNCAGENTS_* variables override it",
    )
    service = parser.add_argument_group("the service")
    manager = parser.add_argument_group("the task manager (TaskManagerConfig)")
    for setting in settings():
        group = service if setting.model is ServeSettings else manager
        common: dict[str, Any] = {
            "dest": _DEST_PREFIX + setting.name,
            "default": argparse.SUPPRESS,
            "help": _help(setting),
        }
        if setting.kind == "bool":
            group.add_argument(setting.option, action=argparse.BooleanOptionalAction, **common)
        elif setting.kind == "choice":
            group.add_argument(setting.option, choices=setting.choices, **common)
        elif setting.kind in ("mapping", "list"):
            group.add_argument(setting.option, action="append", metavar=setting.metavar, **common)
        else:
            group.add_argument(setting.option, metavar=setting.metavar, **common)


def _pairs(items: Sequence[str], label: str) -> dict[str, str]:
    """``["a=1", "b=2"]`` as ``{"a": "1", "b": "2"}``."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SettingsError(f"{label}: {item!r} is not KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def _from_env(setting: _Setting, text: str) -> Any:
    if setting.kind == "list":
        return [item.strip() for item in text.split(",") if item.strip()]
    if setting.kind != "mapping":
        return text
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except ValueError as exc:
            raise SettingsError(f"{setting.env}: not a JSON object: {exc}") from None
    return _pairs([p for p in text.split(",") if p.strip()], setting.env)


def read_file(path: Path) -> dict[str, Any]:
    """The settings of a TOML file; `SettingsError` for an unreadable file or unknown key."""
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise SettingsError(f"cannot read the config file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"the config file {path} is not valid TOML: {exc}") from None
    known = {s.name for s in settings()}
    unknown = sorted(set(data) - known)
    if unknown:
        raise SettingsError(
            f"the config file {path} has unknown settings: {', '.join(unknown)} "
            f"(known: {', '.join(sorted(known))})"
        )
    return data


def resolve(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Settings:
    """The settings from `args` (made by a parser with `add_options`), the environment and
    the config file, in that order of precedence, validated. Raises `SettingsError`."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    labels: dict[str, str] = {}
    config_file: Path | None = getattr(args, "config", None)
    if config_file is not None:
        for name, value in read_file(config_file).items():
            values[name], labels[name] = value, f"{name} in {config_file}"
    for setting in settings():
        text = environ.get(setting.env)
        if text:  # an empty variable counts as unset
            values[setting.name] = _from_env(setting, text)
            labels[setting.name] = setting.env
        given = getattr(args, _DEST_PREFIX + setting.name, None)
        if given is not None:
            if setting.kind == "mapping":
                given = _pairs(given, setting.option)
            values[setting.name], labels[setting.name] = given, setting.option
    problems: list[str] = []
    validated: list[BaseModel] = []
    for model in MODELS:
        own = {k: v for k, v in values.items() if k in model.model_fields}
        try:
            validated.append(model.model_validate(own))
        except ValidationError as exc:
            problems.extend(_problems(exc, labels))
    if problems:
        raise SettingsError("\n".join(problems))
    serve, manager = validated
    assert isinstance(serve, ServeSettings) and isinstance(manager, TaskManagerConfig)
    return Settings(serve=serve, manager=manager, sources=labels)


def _problems(exc: ValidationError, labels: Mapping[str, str]) -> Iterator[str]:
    for error in exc.errors(include_url=False):
        name = str(error["loc"][0]) if error["loc"] else "?"
        if error["type"] == "missing":
            option = "--" + name.replace("_", "-")
            yield (
                f"{option} is required (or {ENV_PREFIX}{name.upper()}, or {name} in the "
                "config file)"
            )
            continue
        where = labels.get(name, name)
        inner = ".".join(str(part) for part in error["loc"][1:])
        subject = f"{where} [{inner}]" if inner else where
        yield f"{subject}: {error['msg']} (got {error['input']!r})"


def is_postgres_dsn(store: str) -> bool:
    """Whether ``--store`` names a PostgreSQL database rather than a SQLite file."""
    return store.startswith(POSTGRES_SCHEMES)


def dsn_has_password(dsn: str) -> bool:
    """Whether a ``postgresql://`` DSN carries its password (visible in the process list)."""
    try:
        parts = urlsplit(dsn)
        return bool(parts.password) or "password" in parse_qs(parts.query)
    except ValueError:
        return False


def open_store(store: str | None, default: Path) -> TaskStore:
    """The task store `store` names: a PostgreSQL DSN, a SQLite file, or None for `default`.

    Opening happens on first use; `SettingsError` when PostgreSQL is asked for and psycopg is
    not installed."""
    if store is None:
        return SQLiteTaskStore(default)
    if is_postgres_dsn(store):
        try:
            from ..tasks.store.postgres import PostgresTaskStore
        except ImportError:
            raise SettingsError(
                "--store is a PostgreSQL DSN, and psycopg 3 with its pool is not installed: "
                "python3 -m pip install '.[postgres]' (from the clone), or psycopg[binary,pool]"
            ) from None
        return PostgresTaskStore(store)
    return SQLiteTaskStore(Path(store).expanduser())


def settings_table() -> str:
    """The Markdown table of every setting, for the docs."""
    rows = [
        "| setting: TOML key, option, environment | default | what it does |",
        "|---|---|---|",
    ]
    for setting in settings():
        option = setting.option
        if setting.kind == "bool":
            option += f"`, `--no-{setting.option[2:]}"
        elif setting.kind == "choice":
            option += " " + "|".join(setting.choices)
        else:
            option += f" {setting.metavar}"
        text = setting.info.description or ""
        default = "required" if setting.info.is_required() else _show(setting.default)
        stated = _STATED_DEFAULT.search(text)
        if stated is not None:  # a default the description states in words
            default, text = stated.group(1), text[: stated.start()] + text[stated.end() :]
        elif setting.default is None and not setting.info.is_required():
            default = "none"
        # a pipe inside a code span stays as it is (Python-Markdown's tables skip code spans)
        words = [c.replace("|", "\\|") for c in (default, text.strip())]
        names = f"`{setting.name}`<br>`{option}`<br>`{setting.env}`"
        rows.append(f"| {names} | {' | '.join(words)} |")
    return "\n".join(rows) + "\n"


def opencode_credentials(serve: ServeSettings) -> OpenCodeCredentials:
    """OpenCode's credentials: the password file when given, else the environment (as
    ``opencode serve`` reads it); ``opencode_username`` over ``$OPENCODE_SERVER_USERNAME``.
    Raises `ValueError` for a password file that cannot be used."""
    if serve.opencode_password_file is not None:
        return OpenCodeCredentials.from_file(serve.opencode_password_file, serve.opencode_username)
    found = OpenCodeCredentials.from_env() or OpenCodeCredentials()
    if serve.opencode_username:
        return OpenCodeCredentials(serve.opencode_username, found.password)
    return found
