#!/usr/bin/env bash
# Runs coldwire's whole test suite. Installs what the build and the tests need first when
# it is missing: libclang and PostgreSQL server binaries (scripts/prereqs.sh), moto's S3
# server (PyPI's `moto[server]`, into a virtualenv under ~/.cache/coldwire) for
# tests/s3.rs, psycopg 3 and asyncpg (another virtualenv there) for
# tests/python_clients.rs, node-postgres (npm, under ~/.cache/coldwire too) for
# tests/node_clients.rs, and pgjdbc with a JDK (Debian) for tests/jdbc_clients.rs. Extra
# arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/prereqs.sh
source scripts/prereqs.sh
ensure_prereqs test.sh || exit 1

# A virtualenv at $1 (with Debian's venv module first, when root and it is missing).
make_venv() {
  if ! python3 -m venv "$1" >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv python3-pip >/dev/null
    fi
    rm -rf "$1"
    python3 -m venv "$1"
  fi
}

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
    make_venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "moto[server]"
  fi
  export COLDWIRE_MOTO_SERVER="$venv/bin/moto_server"
fi
if ! have_moto; then
  echo "test.sh: moto's S3 server is needed for tests/s3.rs: pip install \"moto[server]\"" >&2
  exit 1
fi

# Real Python drivers for tests/python_clients.rs (psycopg 3, asyncpg), in a virtualenv of
# our own, named to the tests by COLDWIRE_PYTHON.
clients_venv="${XDG_CACHE_HOME:-$HOME/.cache}/coldwire/clients-venv"
if [ -z "${COLDWIRE_PYTHON:-}" ]; then
  if ! "$clients_venv/bin/python" -c "import psycopg, asyncpg" >/dev/null 2>&1; then
    echo "test.sh: installing psycopg and asyncpg into $clients_venv"
    rm -rf "$clients_venv"
    make_venv "$clients_venv"
    "$clients_venv/bin/pip" install -q --disable-pip-version-check "psycopg[binary]" asyncpg
  fi
  export COLDWIRE_PYTHON="$clients_venv/bin/python"
fi

# node-postgres (with pg-copy-streams, its COPY) for tests/node_clients.rs, from npm into
# a folder of our own, named to the tests by COLDWIRE_NODE_PATH.
if [ -z "${COLDWIRE_NODE_PATH:-}" ]; then
  node_dir="${XDG_CACHE_HOME:-$HOME/.cache}/coldwire/node-clients"
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
    else
      echo "test.sh: node and npm are needed for tests/node_clients.rs: apt-get install nodejs npm" >&2
      exit 1
    fi
  fi
  if [ ! -d "$node_dir/node_modules/pg" ] || [ ! -d "$node_dir/node_modules/pg-copy-streams" ]; then
    echo "test.sh: installing node-postgres and pg-copy-streams into $node_dir"
    mkdir -p "$node_dir"
    (cd "$node_dir" && npm install --silent --no-audit --no-fund --no-save pg@8 pg-copy-streams@7)
  fi
  export COLDWIRE_NODE_PATH="$node_dir/node_modules"
fi

# pgjdbc and a JDK for tests/jdbc_clients.rs (Debian's packages).
if [ -z "${COLDWIRE_JDBC_JAR:-}" ] && { [ ! -f /usr/share/java/postgresql.jar ] || ! command -v java >/dev/null 2>&1; }; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: installing pgjdbc and a JDK"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      libpostgresql-jdbc-java default-jdk-headless >/dev/null
  else
    echo "test.sh: tests/jdbc_clients.rs needs pgjdbc and a JDK: apt-get install libpostgresql-jdbc-java default-jdk-headless" >&2
    exit 1
  fi
fi

# The house rules before the tests: modules import only downwards, the code is formatted,
# and clippy has nothing to say.
bash scripts/layers.sh
cargo fmt --check
cargo clippy --locked --all-targets -- -D warnings

cargo test --locked --all-targets "$@"
