#!/usr/bin/env bash
# Runs `coldwire demo` — a throwaway local Postgres, a local cold folder, and coldwire in
# front of them — after installing what the build and the demo need when it is missing
# (scripts/prereqs.sh: libclang and PostgreSQL server binaries). Extra arguments go to
# `coldwire demo` (`scripts/demo.sh --help` lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/prereqs.sh
source scripts/prereqs.sh
ensure_prereqs demo.sh || exit 1
exec cargo run --release -- demo "$@"
