#!/usr/bin/env bash
# Runs coldwire's whole test suite. Installs what the tests need first when it is missing:
# PostgreSQL server binaries (Debian's `postgresql` package) for the real clusters the
# tests start themselves. Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

have_pg() {
  [ -n "${COLDWIRE_PG_BINDIR:-}" ] && [ -x "$COLDWIRE_PG_BINDIR/initdb" ] && return 0
  command -v initdb >/dev/null 2>&1 && return 0
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1
}

if ! have_pg; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: installing PostgreSQL server binaries (Debian package postgresql)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  else
    echo "test.sh: PostgreSQL server binaries (initdb, postgres, psql, pgbench) are needed;" >&2
    echo "         install them (Debian/Ubuntu: apt-get install postgresql) or set COLDWIRE_PG_BINDIR" >&2
    exit 1
  fi
fi

cargo test --locked --all-targets "$@"
