#!/usr/bin/env bash
# Runs coldwire's whole test suite. Installs what the build and the tests need first when
# it is missing: libclang (Debian's `libclang-dev`, for pg_query's bindings), PostgreSQL
# server binaries (Debian's `postgresql` package) for the real clusters the tests start
# themselves, and moto's S3 server (PyPI's `moto[server]`, into a virtualenv under
# ~/.cache/coldwire) for tests/s3.rs. Extra arguments go to `cargo test`.
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

# moto's S3 server: on PATH, named by COLDWIRE_MOTO_SERVER, or installed into a
# virtualenv of our own (which needs no --break-system-packages and leaves the system's
# Python alone).
have_moto() {
  [ -n "${COLDWIRE_MOTO_SERVER:-}" ] && [ -x "$COLDWIRE_MOTO_SERVER" ] && return 0
  command -v moto_server >/dev/null 2>&1
}
if ! have_moto; then
  venv="${XDG_CACHE_HOME:-$HOME/.cache}/coldwire/moto-venv"
  if [ ! -x "$venv/bin/moto_server" ]; then
    echo "test.sh: installing moto's S3 server into $venv"
    if ! python3 -m venv "$venv" >/dev/null 2>&1; then
      if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv python3-pip >/dev/null
      fi
      rm -rf "$venv"
      python3 -m venv "$venv"
    fi
    "$venv/bin/pip" install -q --disable-pip-version-check "moto[server]"
  fi
  export COLDWIRE_MOTO_SERVER="$venv/bin/moto_server"
fi
if ! have_moto; then
  echo "test.sh: moto's S3 server is needed for tests/s3.rs: pip install \"moto[server]\"" >&2
  exit 1
fi

# The house rules before the tests: modules import only downwards, the code is formatted,
# and clippy has nothing to say.
bash scripts/layers.sh
cargo fmt --check
cargo clippy --locked --all-targets -- -D warnings

cargo test --locked --all-targets "$@"
