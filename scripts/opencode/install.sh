#!/usr/bin/env bash
# Install OpenCode (npm opencode-ai, pinned) into <repo>/.opencode-bin, idempotently, so the
# end-to-end tests find the same binary on every machine. Override the place with
# ASYNCAGENTS_OPENCODE_PREFIX; the tests also honour ASYNCAGENTS_OPENCODE_BIN.
set -euo pipefail
VERSION="${ASYNCAGENTS_OPENCODE_VERSION:-1.18.33}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PREFIX="${ASYNCAGENTS_OPENCODE_PREFIX:-$ROOT/.opencode-bin}"
BIN="$PREFIX/node_modules/.bin/opencode"

if [ -x "$BIN" ] && [ "$("$BIN" --version 2>/dev/null || true)" = "$VERSION" ]; then
  echo "opencode $VERSION already installed: $BIN"
  exit 0
fi
command -v npm >/dev/null || { echo "npm is required to install opencode-ai" >&2; exit 1; }
mkdir -p "$PREFIX"
# keep the install out of git without touching the repository's .gitignore
[ -f "$PREFIX/.gitignore" ] || printf '*\n' > "$PREFIX/.gitignore"
# the platform binary comes as an optional dependency: never omit optional packages
npm install --prefix "$PREFIX" --no-audit --no-fund --include=optional "opencode-ai@$VERSION"
got="$("$BIN" --version)"
if [ "$got" != "$VERSION" ]; then
  echo "installed opencode reports $got, expected $VERSION" >&2
  exit 1
fi
echo "opencode $VERSION installed: $BIN"
