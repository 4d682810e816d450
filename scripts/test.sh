#!/usr/bin/env bash
# Runs coldwire's whole test suite. Installs what the build and the tests need first when
# it is missing: libclang and PostgreSQL server binaries (scripts/prereqs.sh), and moto's
# S3 server (PyPI's `moto[server]`, into a virtualenv under ~/.cache/coldwire) for
# tests/s3.rs. Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/prereqs.sh
source scripts/prereqs.sh
ensure_prereqs test.sh || exit 1

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
