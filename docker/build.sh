#!/usr/bin/env bash
# The build stage of docker/Dockerfile, as a script CI runs too (no Docker engine there):
# the system packages the build needs (libclang for the Postgres parser, pg_query's
# bindgen), then the release binary. Run from the repository root.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 && ! ldconfig -p 2>/dev/null | grep -q libclang; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libclang-dev >/dev/null
    else
        echo "docker/build.sh: libclang is needed to build coldwire: apt-get install libclang-dev" >&2
        exit 1
    fi
fi
cargo build --release --locked
