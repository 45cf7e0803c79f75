"""The ``asyncagents`` command.

- ``asyncagents fork [FILE|-]``: print the context a forked child of that session would get;
- ``asyncagents serve --opencode URL``: run the task service the OpenCode plugin calls;
- ``asyncagents opencode install [DIR]``: install that plugin into an OpenCode project.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from .errors import ForkInputError
from .fork import build_fork_context

#: A real session recorded from opencode 1.18.33 (compaction, pruning, bash/read tools).
SAMPLE = "sample_session.json"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="asyncagents", description="Background sub-agent tasks and forked context."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    fork = commands.add_parser(
        "fork",
        help="print the context to inject into a forked child session",
        description="Read a session (the JSON of GET /session/{id}/message, or an "
        "`opencode export` file) and print the text to inject into a forked child. "
        "With no FILE, run on a real sample session shipped with the package.",
    )
    fork.add_argument("file", nargs="?", help="session JSON file, or - for standard input")
    output = fork.add_mutually_exclusive_group()
    output.add_argument(
        "--stats", action="store_true", help="also print the stats as JSON to stderr"
    )
    output.add_argument("--json", action="store_true", help="print {text, stats} as JSON instead")
    fork.add_argument(
        "--engine",
        choices=("rust", "python"),
        default="rust",
        help="pipeline engine (default rust)",
    )
    _serve_parser(commands)
    _opencode_parser(commands)
    return parser


def _serve_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = commands.add_parser(
        "serve",
        help="run the task service for the OpenCode plugin",
        description="Run the background task manager over an OpenCode server, as an HTTP "
        "service on loopback that the OpenCode plugin calls. It is ready when GET /v1/health "
        "answers 200. On its first start it creates a bearer token in a private file "
        "($XDG_STATE_HOME/asyncagents/token). SIGTERM or SIGINT stop it gracefully; the next "
        "start picks the running tasks up again.",
    )
    serve.add_argument(
        "--opencode", required=True, metavar="URL", help="the OpenCode server (opencode serve)"
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=4097, help="port (default 4097)")
    serve.add_argument(
        "--store",
        type=Path,
        metavar="PATH",
        help="SQLite file of the tasks (default $XDG_STATE_HOME/asyncagents/tasks.sqlite3)",
    )
    serve.add_argument(
        "--wake",
        choices=("each", "all_done", "never"),
        default="each",
        help="how a parent hears of its ended tasks: woken by each notice (default), once all "
        "its tasks are done, or never (the notice is added without a reply)",
    )
    _limit_options(serve)


#: the `TaskManagerConfig` fields `asyncagents serve` takes as options (named as the fields)
LIMIT_FIELDS = (
    "max_runtime",
    "idle_timeout",
    "max_tool_calls",
    "max_cost",
    "max_tokens",
    "notice_result_chars",
)


def _limit_value(name: str) -> Callable[[str], float | int | None]:
    """The parser of one limit option: a number (whole for counts), or ``off`` when the field
    may be None."""
    from .tasks.config import TaskManagerConfig

    field = TaskManagerConfig.model_fields[name]
    whole = field.annotation in (int, int | None)
    may_be_off = type(None) in getattr(field.annotation, "__args__", ())

    def parse(raw: str) -> float | int | None:
        text = raw.strip().lower()
        if text == "off" and may_be_off:
            return None
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{raw!r} is not a number" + (" (or off)" if may_be_off else "")
            ) from None
        if whole:
            if not value.is_integer():
                raise argparse.ArgumentTypeError(f"{raw!r} is not a whole number")
            return int(value)
        return value

    return parse


def _limit_options(serve: argparse.ArgumentParser) -> None:
    from .tasks.config import TaskManagerConfig

    for name in LIMIT_FIELDS:
        field = TaskManagerConfig.model_fields[name]
        unit = "SECONDS" if name in ("max_runtime", "idle_timeout") else "N"
        unit = "USD" if name == "max_cost" else unit
        may_be_off = type(None) in getattr(field.annotation, "__args__", ())
        off = "; off: no limit" if may_be_off else ""
        default = field.default
        shown = f"{default:g}" if isinstance(default, float) else str(default)
        serve.add_argument(
            f"--{name.replace('_', '-')}",
            dest=name,
            type=_limit_value(name),
            metavar=unit,
            default=argparse.SUPPRESS,
            help=f"{field.description} (default {shown}{off})",
        )


def _opencode_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    opencode = commands.add_parser("opencode", help="OpenCode integration")
    actions = opencode.add_subparsers(dest="action", required=True)
    install = actions.add_parser(
        "install",
        help="install the asyncagents plugin into an OpenCode project",
        description="Write the asyncagents plugin into DIR/.opencode/plugins/ and install the "
        "@opencode-ai/plugin package it needs (pinned to your OpenCode version) with npm, so "
        "that OpenCode started in DIR offers its model the five asyncagents tools.",
    )
    install.add_argument("dir", nargs="?", type=Path, default=Path("."), help="default: cwd")
    install.add_argument(
        "--service",
        default="http://127.0.0.1:4097",
        metavar="URL",
        help="the asyncagents service (default http://127.0.0.1:4097)",
    )
    install.add_argument(
        "--opencode-version",
        metavar="X.Y.Z",
        help="OpenCode version to pin @opencode-ai/plugin to (default: `opencode --version`)",
    )


def _serve(args: argparse.Namespace) -> int:
    from .service.auth import TokenFileError, default_token_path, load_or_create_token
    from .service.server import ServeOptions, serve

    if not 0 < args.port < 65536:
        print(f"asyncagents serve: --port {args.port} is not a TCP port", file=sys.stderr)
        return 2
    problem = _opencode_url_problem(args.opencode)
    if problem is not None:
        print(f"asyncagents serve: {problem}", file=sys.stderr)
        return 2
    limits = {name: getattr(args, name) for name in LIMIT_FIELDS if hasattr(args, name)}
    problem = _limits_problem(limits)
    if problem is not None:
        print(f"asyncagents serve: {problem}", file=sys.stderr)
        return 2
    path = default_token_path()
    try:
        token, created = load_or_create_token(path)
    except TokenFileError as exc:
        print(f"asyncagents serve: {exc}", file=sys.stderr)
        return 2
    print(f"asyncagents serve: token {'created in' if created else 'read from'} {path}", flush=True)
    warning = _opencode_down(args.opencode)
    if warning is not None:
        print(f"asyncagents serve: warning: {warning}", file=sys.stderr, flush=True)
    options = ServeOptions(
        opencode_url=args.opencode,
        host=args.host,
        port=args.port,
        store_path=args.store,
        wake=args.wake,
        limits=limits,
    )
    return serve(options, token)


def _limits_problem(limits: dict[str, Any]) -> str | None:
    """What is wrong with the limit options given, naming the option, or None."""
    from pydantic import ValidationError

    from .tasks.config import TaskManagerConfig

    try:
        TaskManagerConfig.model_validate(limits)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        name = str(err["loc"][0]) if err["loc"] else "?"
        return f"--{name.replace('_', '-')} {limits.get(name)!r}: {err['msg']}"
    return None


def _opencode_url_problem(url: str) -> str | None:
    """What is wrong with `url` as an OpenCode server's address, or None."""
    import httpx

    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as exc:
        return f"--opencode {url!r} is not a URL: {exc}"
    if parsed.scheme not in ("http", "https") or not parsed.host:
        return f"--opencode {url!r} is not an http(s) URL with a host"
    return None


def _opencode_down(url: str) -> str | None:
    """Why the OpenCode server does not answer its health check yet, or None when it does
    (only a warning: the service reconnects once it is up)."""
    import httpx

    try:
        response = httpx.get(str(httpx.URL(url).join("/global/health")), timeout=3.0)
    except httpx.HTTPError as exc:
        return (
            f"OpenCode at {url} does not answer yet ({type(exc).__name__}); tool calls fail "
            "until it does"
        )
    if response.status_code != 200:
        return f"{url}/global/health answered HTTP {response.status_code}"
    return None


def _opencode_install(args: argparse.Namespace) -> int:
    from .opencode import InstallError, install_plugin
    from .service.auth import default_token_path

    try:
        done = install_plugin(
            args.dir.resolve(),
            args.service,
            default_token_path(),
            opencode_version=args.opencode_version,
        )
    except InstallError as exc:
        print(f"asyncagents opencode install: {exc}", file=sys.stderr)
        return 2
    print(f"Installed the asyncagents plugin: {done.plugin_path}")
    print(f"It calls the service at {args.service.rstrip('/')} (start it with `asyncagents serve`)")
    print(f"@opencode-ai/plugin@{done.opencode_version} is in {done.plugin_path.parents[1]}")
    return 0


def _read(source: str | None) -> bytes:
    if source is None:
        return (resources.files("asyncagents") / "data" / SAMPLE).read_bytes()
    if source == "-":
        return sys.stdin.buffer.read()
    with open(source, "rb") as handle:
        return handle.read()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``asyncagents`` command; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if args.command == "opencode":
        return _opencode_install(args)
    return _fork(args)


def _fork(args: argparse.Namespace) -> int:
    try:
        data = _read(args.file)
    except OSError as exc:
        print(f"asyncagents: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    try:
        ctx = build_fork_context(data, engine=args.engine)
    except ForkInputError as exc:
        print(f"asyncagents: bad session input: {exc}", file=sys.stderr)
        return 2
    stats = ctx.stats.model_dump(by_alias=True)
    if args.json:
        out = json.dumps({"text": ctx.text, "stats": stats}, ensure_ascii=False) + "\n"
    else:
        out = ctx.text + "\n" if ctx.text else ""
    try:
        # UTF-8 whatever the locale: the text is for a model, not for a terminal's code page.
        sys.stdout.buffer.write(out.encode("utf-8"))
        sys.stdout.flush()
    except BrokenPipeError:  # `asyncagents fork | head` is fine
        sys.stderr.close()
        return 0
    if args.stats and not args.json:
        print(json.dumps(stats), file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
