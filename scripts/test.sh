#!/usr/bin/env bash
# Runs coldwire's whole test suite. Installs what the build and the tests need first when
# it is missing: libclang (Debian's `libclang-dev`, for pg_query's bindings) and PostgreSQL
# server binaries (Debian's `postgresql` package) for the real clusters the tests start
# themselves. Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

have_pg() {
  [ -n "${COLDWIRE_PG_BINDIR:-}" ] && [ -x "$COLDWIRE_PG_BINDIR/initdb" ] && return 0
  command -v initdb >/dev/null 2>&1 && return 0
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1
}

have_libclang() {
  [ -n "${LIBCLANG_PATH:-}" ] && return 0
  ls /usr/lib/llvm-*/lib/libclang*.so* /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1
}

missing=()
have_libclang || missing+=(libclang-dev)
have_pg || missing+=(postgresql)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
fi
if ! have_libclang; then
  echo "test.sh: libclang is needed to build pg_query (Debian/Ubuntu: apt-get install libclang-dev)" >&2
  exit 1
fi
if ! have_pg; then
  echo "test.sh: PostgreSQL server binaries (initdb, postgres, psql, pgbench) are needed;" >&2
  echo "         install them (Debian/Ubuntu: apt-get install postgresql) or set COLDWIRE_PG_BINDIR" >&2
  exit 1
fi

cargo test --locked --all-targets "$@"
