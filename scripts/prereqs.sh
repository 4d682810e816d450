# Sourced by scripts/demo.sh and scripts/test.sh: makes sure what building and running
# coldwire needs is there, installing it when run as root on Debian/Ubuntu, and says
# what to install otherwise. libclang (Debian's `libclang-dev`) builds pg_query's
# bindings; PostgreSQL server binaries (Debian's `postgresql`) run the throwaway clusters
# of the demo and the tests.

have_pg() {
  [ -n "${COLDWIRE_PG_BINDIR:-}" ] && [ -x "$COLDWIRE_PG_BINDIR/initdb" ] && return 0
  command -v initdb >/dev/null 2>&1 && return 0
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1
}

# bindgen loads libclang.so or libclang-N.so; libclang-cpp (the C++ library, which stays
# behind when libclang-dev is removed) does not count.
have_libclang() {
  [ -n "${LIBCLANG_PATH:-}" ] && return 0
  local f
  for f in /usr/lib/llvm-*/lib/libclang.so* /usr/lib/llvm-*/lib/libclang-[0-9]*.so* \
           /usr/lib/*-linux-gnu/libclang.so* /usr/lib/*-linux-gnu/libclang-[0-9]*.so*; do
    [ -e "$f" ] && return 0
  done
  return 1
}

# Installs the missing ones (as root with apt-get), or fails naming them. $1: who asks.
ensure_prereqs() {
  local who=$1 missing=()
  have_libclang || missing+=(libclang-dev)
  have_pg || missing+=(postgresql)
  if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "$who: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  if ! have_libclang; then
    echo "$who: libclang is needed to build pg_query (Debian/Ubuntu: apt-get install libclang-dev)" >&2
    return 1
  fi
  if ! have_pg; then
    echo "$who: PostgreSQL server binaries (initdb, postgres, psql, pgbench) are needed;" >&2
    echo "         install them (Debian/Ubuntu: apt-get install postgresql) or set COLDWIRE_PG_BINDIR" >&2
    return 1
  fi
}
