# bench/lib.sh: helpers shared by the bench/ scripts (sourced, not run).
#
# The sourcing script sets PROG (its name, for messages) and KEEP_WORKDIR, and runs
# under `set -euo pipefail`. A typical script:
#
#   bench_reset_env                      # unset stray PG* variables, need python3
#   bench_find_pg initdb postgres pg_ctl psql   # PG_BINDIR, PSQL
#   bench_setup_user                     # RUN_USER, AS_USER, SETSID
#   bench_install_traps                  # cleanup on exit, Ctrl-C, SIGTERM
#   bench_make_workdir sock              # WORK (mktemp -d) with subdirectories
#   bench_build_coldwire                 # COLDWIRE_BIN, CW_SOURCE
#   pg_start "-c extra=1"                # PG_PORT, SOCK, PG_VERSION
#   coldwire_start postgres [service-url]   # CW_PORT, CW_PID, UPSTREAM, CW_VERSION, CW_COMMIT
#   coldwire_start_b postgres            # a second coldwire: CWB_PORT, CWB_PID, CWB_VERSION
#   results_open NAME                    # RESULTS, out()
#
# cleanup (the EXIT trap) stops coldwire ($CW_PID, $CWB_PID), a bare relay ($BR_PID),
# PgBouncer ($PGB_PID) and Postgres, prints the tails of the logs on failure and removes $WORK unless KEEP_WORKDIR=1.
# shellcheck shell=bash
# shellcheck disable=SC2034  # globals set here are read by the sourcing scripts

SCRIPT_DIR=${SCRIPT_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
REPO_ROOT=${REPO_ROOT:-$(cd "$SCRIPT_DIR/.." && pwd)}

die() { echo "$PROG: error: $*" >&2; exit 1; }
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

# Checks that each named variable holds a positive integer.
require_positive_ints() { # var...
    local v
    for v in "$@"; do
        [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
    done
}

# Stray libpq settings would skew or break the runs; every connection is explicit.
bench_reset_env() {
    unset PGHOST PGHOSTADDR PGPORT PGUSER PGDATABASE PGSERVICE PGSERVICEFILE PGOPTIONS \
          PGPASSWORD PGPASSFILE PGSSLMODE PGREQUIRESSL PGTARGETSESSIONATTRS PGGSSENCMODE
    export PGCONNECT_TIMEOUT=10
    command -v python3 >/dev/null || die "python3 is needed (to pick free ports)"
}

# ---------------------------------------------------------------- PostgreSQL binaries
find_pg_bindir() {
    if [[ -n ${PG_BINDIR:-} ]]; then
        [[ -x $PG_BINDIR/initdb ]] || die "PG_BINDIR=$PG_BINDIR has no initdb"
        echo "$PG_BINDIR"; return
    fi
    local d
    if command -v pg_config >/dev/null && d=$(pg_config --bindir 2>/dev/null) && [[ -x $d/initdb ]]; then
        echo "$d"; return
    fi
    d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    [[ -n $d && -x $d/initdb ]] || die "no PostgreSQL binaries found; install postgresql or set PG_BINDIR"
    echo "$d"
}

# Sets PG_BINDIR and PSQL and checks that the named programs are there.
bench_find_pg() { # program...
    PG_BINDIR=$(find_pg_bindir) || exit 1
    local b
    for b in "$@"; do
        [[ -x $PG_BINDIR/$b ]] || die "$PG_BINDIR/$b not found (PG_BINDIR=$PG_BINDIR)"
    done
    PSQL=$PG_BINDIR/psql
}

# ---------------------------------------------------------------- unprivileged user
RUN_USER=""
AS_USER=()
SETSID=()
bench_setup_user() {
    RUN_USER=""
    if [[ $(id -u) -eq 0 ]]; then
        if id -u postgres >/dev/null 2>&1; then RUN_USER=postgres
        elif id -u nobody >/dev/null 2>&1; then RUN_USER=nobody
        else die "running as root but neither a 'postgres' nor a 'nobody' user exists"; fi
        RUN_UID=$(id -u "$RUN_USER"); RUN_GID=$(id -g "$RUN_USER")
    fi

    # Command prefix that runs a command as RUN_USER when we are root. setpriv execs in
    # place (so the pid of an exec'd, backgrounded call is the daemon itself); runuser forks.
    AS_USER=()
    if [[ -n $RUN_USER ]]; then
        if command -v setpriv >/dev/null; then
            AS_USER=(setpriv --reuid="$RUN_UID" --regid="$RUN_GID" --clear-groups --)
        elif command -v runuser >/dev/null; then
            AS_USER=(runuser -u "$RUN_USER" --)
        else
            die "running as root but neither setpriv nor runuser is available"
        fi
    fi

    # Daemons go into their own session so that a Ctrl-C reaches only the script and its
    # clients; the EXIT trap then stops them in order. (setsid execs in place here, since
    # a backgrounded subshell of a non-interactive shell is not a process-group leader.)
    SETSID=()
    if command -v setsid >/dev/null; then SETSID=(setsid); fi
}
as_user() { "${AS_USER[@]}" "$@"; }

free_port() {
    python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'
}

# ---------------------------------------------------------------- cleanup
WORK=""
PG_STARTED=0
PGB_PID=""
CW_PID=""
CWB_PID=""
BR_PID=""

stop_pid() { # pid name timeout_secs
    local pid=$1 name=$2 t=${3:-10} i
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < t * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
        sleep 0.1
    done
    log "$name (pid $pid) did not exit after SIGTERM within ${t}s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

cleanup() {
    local rc=$?
    set +e
    trap - EXIT INT TERM
    if [[ -n $CW_PID ]]; then log "stopping coldwire"; stop_pid "$CW_PID" coldwire 15; fi
    if [[ -n $CWB_PID ]]; then log "stopping coldwire-b"; stop_pid "$CWB_PID" coldwire-b 15; fi
    if [[ -n $BR_PID ]]; then log "stopping bare-relay"; stop_pid "$BR_PID" bare-relay 5; fi
    if [[ -n $PGB_PID ]]; then log "stopping pgbouncer"; stop_pid "$PGB_PID" pgbouncer 10; fi
    if [[ $PG_STARTED -eq 1 ]]; then
        log "stopping postgres"
        if ! (cd "$WORK" && as_user "$PG_BINDIR/pg_ctl" -D "$WORK/data" -m fast -w -t 30 stop >/dev/null 2>&1); then
            local pmpid
            pmpid=$(head -n 1 "$WORK/data/postmaster.pid" 2>/dev/null)
            [[ -n $pmpid ]] && stop_pid "$pmpid" postgres 10
        fi
    fi
    if [[ -n $WORK && -d $WORK ]]; then
        if [[ $rc -ne 0 && $rc -ne 130 && $rc -ne 143 ]]; then
            for f in postgres.log pgbouncer.log coldwire.log coldwire-b.log; do
                [[ -s $WORK/$f ]] || continue
                echo "---- last lines of $f ----" >&2
                tail -n 15 "$WORK/$f" >&2
            done
        fi
        if [[ $KEEP_WORKDIR == 1 ]]; then
            log "keeping work dir $WORK"
        else
            rm -rf "$WORK"
        fi
    fi
    exit "$rc"
}
bench_install_traps() {
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# Creates WORK (readable by RUN_USER) with the given subdirectories.
bench_make_workdir() { # subdir...
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/coldwire-bench.XXXXXX")
    chmod 755 "$WORK"
    local d
    for d in "$@"; do mkdir -p "$WORK/$d"; done
    if [[ -n $RUN_USER ]]; then chown -R "$RUN_USER:" "$WORK"; fi
}

# ---------------------------------------------------------------- coldwire binary
bench_build_coldwire() {
    if [[ -n ${COLDWIRE_BIN:-} ]]; then
        [[ -x $COLDWIRE_BIN ]] || die "COLDWIRE_BIN=$COLDWIRE_BIN is not an executable"
        CW_SOURCE="COLDWIRE_BIN=$COLDWIRE_BIN"
    else
        command -v cargo >/dev/null || die "cargo not found; install Rust or set COLDWIRE_BIN"
        log "building coldwire (cargo build --release)"
        (cd "$REPO_ROOT" && cargo build --release >&2) || die "cargo build --release failed"
        local target=${CARGO_TARGET_DIR:-target}
        [[ $target == /* ]] || target=$REPO_ROOT/$target
        COLDWIRE_BIN=$target/release/coldwire
        [[ -x $COLDWIRE_BIN ]] || die "build finished but $COLDWIRE_BIN is missing"
        CW_SOURCE="cargo build --release"
    fi
}

# ---------------------------------------------------------------- postgres
PG_BASE_OPTS="-c max_connections=200 -c shared_buffers=256MB -c synchronous_commit=off"

# initdb + start a throwaway cluster in $WORK/data, listening on 127.0.0.1:$PG_PORT and on
# a Unix socket in $WORK/sock. Settings: PG_BASE_OPTS, then the extra options given.
# shellcheck disable=SC2120  # the argument is optional
pg_start() { # [extra postgres -c options]
    local extra=${1:-}
    PG_PORT=$(free_port)
    SOCK=$WORK/sock
    mkdir -p "$SOCK"
    if [[ -n $RUN_USER ]]; then chown "$RUN_USER:" "$SOCK"; fi
    log "initdb in $WORK/data${RUN_USER:+ (as $RUN_USER)}"
    (cd "$WORK" && as_user "$PG_BINDIR/initdb" -D "$WORK/data" -U postgres -A trust -E UTF8 --locale=C \
        >"$WORK/initdb.log" 2>&1) || { cat "$WORK/initdb.log" >&2; die "initdb failed"; }

    log "starting postgres on 127.0.0.1:$PG_PORT (socket dir $SOCK)"
    local opts="-c listen_addresses=127.0.0.1 -c port=$PG_PORT -c unix_socket_directories=$SOCK"
    opts+=" $PG_BASE_OPTS${extra:+ $extra}"
    PG_STARTED=1
    (cd "$WORK" && as_user "$PG_BINDIR/pg_ctl" -D "$WORK/data" -l "$WORK/postgres.log" -w -t 60 \
        -o "$opts" start >/dev/null) || die "postgres did not start (see log below)"
    PG_VERSION=$(psql_at "$PG_PORT" "show server_version") || die "cannot query postgres"
}

pg_alive() {
    local pmpid
    pmpid=$(head -n 1 "$WORK/data/postmaster.pid" 2>/dev/null)
    [[ -n $pmpid ]] && kill -0 "$pmpid" 2>/dev/null
}

psql_at() { # port sql [database]
    "$PSQL" -X -q -At -h 127.0.0.1 -p "$1" -U postgres -d "${3:-postgres}" -c "$2"
}

wait_sql() { # port name pid
    local port=$1 name=$2 pid=$3 i
    for ((i = 0; i < 300; i++)); do
        kill -0 "$pid" 2>/dev/null || die "$name exited during startup"
        psql_at "$port" "select 1" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    die "$name did not answer 'select 1' on port $port within 30s"
}

# ---------------------------------------------------------------- coldwire
# Starts `coldwire serve` on a free port with upstream database DB over the Unix socket
# (and --service-url SERVICE_URL if given); waits until it prints that it listens and
# answers SQL. Sets CW_PORT, CW_PID, UPSTREAM, CW_VERSION, CW_COMMIT. COLDWIRE_ARGS adds
# words to the command line (e.g. "--worker-threads 1").
coldwire_start() { # db [service-url]
    local db=$1 service=${2:-}
    UPSTREAM="postgres://127.0.0.1:$PG_PORT/$db?host=$SOCK"
    local args=(--upstream "$UPSTREAM")
    [[ -n $service ]] && args+=(--service-url "$service")
    # shellcheck disable=SC2206  # COLDWIRE_ARGS holds words on purpose
    args+=(${COLDWIRE_ARGS:-})
    coldwire_launch coldwire "$COLDWIRE_BIN" "${args[@]}"
    CW_PORT=$LAUNCHED_PORT
    CW_PID=$LAUNCHED_PID
    CW_VERSION=$("$COLDWIRE_BIN" --version 2>/dev/null | head -n 1 || echo unknown)
    CW_COMMIT=$(git -C "$REPO_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
    if [[ $CW_COMMIT != unknown ]] && [[ -n $(git -C "$REPO_ROOT" status --porcelain --untracked-files=no 2>/dev/null) ]]; then
        CW_COMMIT+=" (working tree has uncommitted changes)"
    fi
}

# Starts a second coldwire, "coldwire-b", from COLDWIRE_BIN_B (default: COLDWIRE_BIN) with
# COLDWIRE_ARGS_B, in front of the same database: for A/B runs of two builds or two
# settings side by side. Sets CWB_PORT, CWB_PID, CWB_VERSION.
coldwire_start_b() { # db
    local db=$1 bin=${COLDWIRE_BIN_B:-$COLDWIRE_BIN}
    [[ -x $bin ]] || die "COLDWIRE_BIN_B=$bin is not an executable"
    local args=(--upstream "postgres://127.0.0.1:$PG_PORT/$db?host=$SOCK")
    # shellcheck disable=SC2206  # COLDWIRE_ARGS_B holds words on purpose
    args+=(${COLDWIRE_ARGS_B:-})
    coldwire_launch coldwire-b "$bin" "${args[@]}"
    CWB_PORT=$LAUNCHED_PORT
    CWB_PID=$LAUNCHED_PID
    CWB_VERSION=$("$bin" --version 2>/dev/null | head -n 1 || echo unknown)
}

# Runs BIN serve on a free loopback port with ARGS, logs in $WORK/NAME.{out,log}; waits
# until it listens and answers SQL. Sets LAUNCHED_PORT, LAUNCHED_PID.
coldwire_launch() { # name bin args...
    local name=$1 bin=$2 i
    shift 2
    LAUNCHED_PORT=$(free_port)
    log "starting $name on 127.0.0.1:$LAUNCHED_PORT ($bin $*)"
    mkdir -p "$WORK/$name"
    (cd "$WORK/$name" && RUST_LOG=${COLDWIRE_LOG:-coldwire=warn} exec "${SETSID[@]}" "$bin" serve \
        --listen "127.0.0.1:$LAUNCHED_PORT" "$@" </dev/null >"$WORK/$name.out" 2>"$WORK/$name.log") &
    LAUNCHED_PID=$!
    for ((i = 0; i < 300; i++)); do
        grep -q "coldwire listening on" "$WORK/$name.out" 2>/dev/null && break
        kill -0 "$LAUNCHED_PID" 2>/dev/null || die "$name exited during startup"
        sleep 0.1
    done
    grep -q "coldwire listening on" "$WORK/$name.out" || die "$name did not print 'coldwire listening on' within 30s"
    wait_sql "$LAUNCHED_PORT" "$name" "$LAUNCHED_PID"
}

# ---------------------------------------------------------------- output
# Opens bench/results/NAME-YYYYmmdd-HHMMSS.txt as RESULTS; out() prints a line and
# appends it there.
results_open() { # name
    mkdir -p "$REPO_ROOT/bench/results"
    RESULTS=$REPO_ROOT/bench/results/$1-$(date +%Y%m%d-%H%M%S).txt
    : >"$RESULTS"
}
out() { printf '%s\n' "$*" | tee -a "$RESULTS"; }

machine_line() {
    local cpu
    cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //' || true)
    echo "$(hostname) | nproc=$(nproc) | ${cpu:-cpu unknown} | $(uname -sr)"
}

# Appends the first lines of coldwire's stderr (and coldwire-b's) to the output, if any.
report_coldwire_stderr() {
    local name
    for name in coldwire coldwire-b; do
        if [[ -s $WORK/$name.log ]]; then
            out "$name stderr (RUST_LOG=${COLDWIRE_LOG:-coldwire=warn}) had $(wc -l <"$WORK/$name.log") line(s); first lines:"
            head -n 10 "$WORK/$name.log" | sed 's/^/    /' | tee -a "$RESULTS"
        fi
    done
}

# ---------------------------------------------------------------- statistics
# Median of the values, printed with printf format FMT (empty output for no values).
median_fmt() { # fmt values...
    local fmt=$1; shift
    [[ $# -gt 0 ]] || return 0
    printf '%s\n' "$@" | sort -g | awk -v f="$fmt\n" '{v[NR]=$1} END {
        if (NR == 0) { print ""; exit }
        if (NR % 2) printf f, v[(NR+1)/2]; else printf f, (v[NR/2] + v[NR/2+1]) / 2 }'
}
median() { median_fmt %.1f "$@"; } # values...
ratio() { # a b
    [[ -n $1 && -n $2 ]] || { echo "n/a"; return; }
    awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f\n", a / b; else print "n/a" }'
}
