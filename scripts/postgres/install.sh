#!/usr/bin/env bash
# Make PostgreSQL's server binaries (initdb, postgres) available, idempotently, for the store
# tests and benchmarks: Debian's `postgresql` package, installed with apt-get when missing (as
# root, like CI). Prints the directory holding the binaries. The tests start their own throwaway
# server from these binaries (tests/pg_server.py); nothing here starts or configures a cluster.
set -euo pipefail

find_bindir() {
  # the newest installed major version wins
  local dir
  dir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
  if [ -n "$dir" ] && [ -x "$dir/initdb" ] && [ -x "$dir/postgres" ]; then
    echo "$dir"
  fi
}

bindir="$(find_bindir)"
if [ -n "$bindir" ]; then
  echo "$bindir"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "PostgreSQL (initdb, postgres) is not installed and this is not root: run" \
    "'apt-get install -y postgresql' as root" >&2
  exit 1
fi
command -v apt-get >/dev/null || { echo "apt-get is required to install PostgreSQL" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >&2
apt-get install -y -q --no-install-recommends postgresql >&2
bindir="$(find_bindir)"
if [ -z "$bindir" ]; then
  echo "apt-get installed postgresql but no /usr/lib/postgresql/*/bin/initdb was found" >&2
  exit 1
fi
echo "$bindir"
