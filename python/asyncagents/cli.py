"""`asyncagents fork [FILE|-]`: print the context a forked child of that session would get."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from importlib import resources

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
    return parser


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
