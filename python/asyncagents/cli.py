"""The ``asyncagents`` command.

- ``asyncagents fork [FILE|-]``: the context a forked child of that session would get, or with
  ``--stats`` a summary of what the fork kept and cut;
- ``asyncagents serve``: run the task service the OpenCode plugin calls;
- ``asyncagents opencode install [DIR]``: install that plugin into an OpenCode project.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from . import __version__
from .config import ForkConfig
from .errors import ForkInputError
from .fork import build_fork_context
from .locations import DEFAULT_SERVICE_URL, default_token_path

if TYPE_CHECKING:
    from .tasks import OpenCodeCredentials

#: A real session recorded from opencode 1.18.33 (compaction, pruning, bash/read tools).
SAMPLE = "sample_session.json"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="asyncagents", description="Background sub-agent tasks and forked context."
    )
    parser.add_argument("--version", action="version", version=f"asyncagents {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    fork = commands.add_parser(
        "fork",
        help="print the context to inject into a forked child session",
        description="Read a session (the JSON of GET /session/{id}/message, or an "
        "`opencode export` file) and print the text to inject into a forked child; with "
        "--stats, a summary of what the fork kept and cut instead. With no FILE, run on a "
        "real sample session shipped with the package.",
    )
    fork.add_argument("file", nargs="?", help="session JSON file, or - for standard input")
    fork.add_argument(
        "--stats",
        action="store_true",
        help="print a summary of what the fork kept and cut instead of the context",
    )
    fork.add_argument(
        "--full", action="store_true", help="print the summary, then the whole context"
    )
    fork.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="FILE",
        help="write the context to FILE and print the summary",
    )
    fork.add_argument(
        "--json",
        action="store_true",
        help="print {text, stats} as JSON (stats in the camelCase names) instead",
    )
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
    from .service.settings import add_options

    serve = commands.add_parser(
        "serve",
        help="run the task service for the OpenCode plugin",
        description="Run the background task manager over an OpenCode server, as an HTTP "
        "service on loopback that the OpenCode plugin calls, with a dashboard at its address. "
        "It is ready when GET /v1/health answers 200. On its first start it creates a bearer "
        "token in a private file ($XDG_STATE_HOME/asyncagents/token). SIGTERM or SIGINT stop "
        "it gracefully; the next start picks the running tasks up again. Every setting is an "
        "option, an ASYNCAGENTS_* environment variable and a key of the --config file; an "
        "option beats the environment, which beats the file.",
    )
    add_options(serve)


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
        default=DEFAULT_SERVICE_URL,
        metavar="URL",
        help=f"the asyncagents service, an http(s) URL (default {DEFAULT_SERVICE_URL})",
    )
    install.add_argument(
        "--opencode-version",
        metavar="X.Y.Z",
        help="OpenCode version to pin @opencode-ai/plugin to (default: the version of "
        "opencode on PATH, else of .opencode-bin/node_modules/.bin/opencode, else the tested "
        "one)",
    )


def _serve(args: argparse.Namespace) -> int:
    from .service.auth import TokenFileError, load_or_create_token
    from .service.server import serve
    from .service.settings import (
        SettingsError,
        dsn_has_password,
        is_postgres_dsn,
        opencode_credentials,
        resolve,
    )

    try:
        settings = resolve(args)
    except SettingsError as exc:
        for line in str(exc).splitlines():
            print(f"asyncagents serve: {line}", file=sys.stderr)
        return 2
    store = settings.serve.store
    if store is not None and is_postgres_dsn(store) and dsn_has_password(store):
        print(
            "asyncagents serve: warning: the --store DSN holds a password, which other users "
            "can read in the process list; put it in PGPASSWORD or ~/.pgpass instead",
            file=sys.stderr,
            flush=True,
        )
    problem = _url_problem(settings.serve.opencode)
    if problem is not None:
        source = settings.sources.get("opencode", "--opencode")
        print(f"asyncagents serve: {source} {problem}", file=sys.stderr)
        return 2
    path = default_token_path()
    try:
        token, created = load_or_create_token(path)
    except TokenFileError as exc:
        print(f"asyncagents serve: {exc}", file=sys.stderr)
        return 2
    print(f"asyncagents serve: token {'created in' if created else 'read from'} {path}", flush=True)
    try:
        credentials = opencode_credentials(settings.serve)
    except ValueError as exc:
        print(f"asyncagents serve: {exc}", file=sys.stderr)
        return 2
    warning = _opencode_down(settings.serve.opencode, credentials)
    if warning is not None:
        print(f"asyncagents serve: warning: {warning}", file=sys.stderr, flush=True)
    try:
        return serve(settings, token)
    except SettingsError as exc:
        print(f"asyncagents serve: {exc}", file=sys.stderr)
        return 2


def _url_problem(url: str) -> str | None:
    """What is wrong with `url` as a server's address, or None."""
    from .opencode import service_url_problem

    return service_url_problem(url)


def _opencode_down(url: str, credentials: OpenCodeCredentials) -> str | None:
    """Why the OpenCode server does not answer its health check yet, or None when it does
    (only a warning: the service reconnects once it is up)."""
    import httpx

    from .tasks.opencode import auth_refused

    health = str(httpx.URL(url).join("/global/health"))
    try:
        response = httpx.get(health, timeout=3.0, auth=credentials.auth())
    except httpx.HTTPError as exc:
        return (
            f"OpenCode at {url} does not answer yet ({type(exc).__name__}); tool calls fail "
            "until it does"
        )
    if response.status_code in (401, 403):
        return auth_refused(url.rstrip("/"), response.status_code, "GET", health, credentials)
    if response.status_code != 200:
        return f"{url}/global/health answered HTTP {response.status_code}"
    return None


def _opencode_install(args: argparse.Namespace) -> int:
    from .opencode import InstallError, install_plugin

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
    print(
        f"Pinned @opencode-ai/plugin@{done.opencode_version} in {done.plugin_path.parents[1]}: "
        f"{done.version_source}"
    )
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


def _source_name(source: str | None) -> str:
    if source is None:
        return "the sample session shipped with the package"
    return "standard input" if source == "-" else source


def _fork(args: argparse.Namespace) -> int:
    if args.json and (args.stats or args.full or args.output):
        print("asyncagents: --json goes alone, without --stats, --full or -o", file=sys.stderr)
        return 2
    try:
        data = _read(args.file)
    except OSError as exc:
        print(f"asyncagents: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    config = ForkConfig()
    try:
        ctx = build_fork_context(data, config, engine=args.engine)
    except ForkInputError as exc:
        print(f"asyncagents: bad session input: {exc}", file=sys.stderr)
        return 2
    text = ctx.text + "\n" if ctx.text else ""
    if args.json:
        stats = ctx.stats.model_dump(by_alias=True)
        out = json.dumps({"text": ctx.text, "stats": stats}, ensure_ascii=False) + "\n"
    elif args.stats or args.full or args.output:
        from .summary import fork_summary

        out = fork_summary(ctx, _source_name(args.file), len(data), config)
        if args.output is not None:
            try:
                args.output.write_bytes(text.encode("utf-8"))
            except OSError as exc:
                print(
                    f"asyncagents: cannot write {args.output}: {exc.strerror or exc}",
                    file=sys.stderr,
                )
                return 2
            out += f"context: {len(ctx.text):,} characters written to {args.output}\n"
        if args.full:
            out += "\n" + text
        elif args.output is None and ctx.text:
            out += "context: not shown (--full prints it, -o FILE writes it to a file)\n"
    else:
        out = text
    try:
        # UTF-8 whatever the locale: the text is for a model, not for a terminal's code page.
        sys.stdout.buffer.write(out.encode("utf-8"))
        sys.stdout.flush()
    except BrokenPipeError:  # `asyncagents fork | head` is fine
        sys.stderr.close()
        return 0
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
