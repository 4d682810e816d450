#!/usr/bin/env bash
# Checks that coldwire's modules import only downwards. The layers, bottom first; a module
# may name (`crate::module`, in code or doc links) only modules of its own layer or below,
# and modules of one layer may not name each other. Run by scripts/test.sh; prints the
# offending lines and exits 1 when a module reaches up.
set -euo pipefail
cd "$(dirname "$0")/.."

layers=(
  "wire metrics failpoint values store"  # protocol codec, metric names, Postgres values as Arrow, object store
  "segment"                             # the segment file format: write, read, prune, page cache
  "sql"                                 # statement analysis and rewriting, quoting
  "catalog config"                      # the coldwire schema in Postgres: migrations, typed access, policies, locks
  "cold"                                # cold reads over segments
  "flush"                               # flush jobs
  "admin"                               # admin calls
  "error"                               # coldwire's errors as clients see them
  "session"                             # one client connection
  "server"                              # listeners, accept loop, shutdown
  "demo cli"                            # the embedded default; the operator's command line
)

declare -A level
for i in "${!layers[@]}"; do
  for m in ${layers[$i]}; do level[$m]=$i; done
done

status=0
for path in src/*; do
  name=$(basename "$path" .rs)
  case "$name" in lib | main) continue ;; esac
  if [ -z "${level[$name]+x}" ]; then
    echo "layers: src/$name is in no layer; add it to scripts/layers.sh" >&2
    status=1
    continue
  fi
  while IFS= read -r hit; do
    target=$(grep -oE 'crate::[a-z_]+' <<<"${hit#*:*:}" | sed 's/crate:://' | sort -u)
    for t in $target; do
      [ "$t" = "$name" ] && continue
      if [ -z "${level[$t]+x}" ]; then continue; fi
      if [ "${level[$t]}" -ge "${level[$name]}" ]; then
        echo "layers: $name (layer ${level[$name]}) reaches $t (layer ${level[$t]}): $hit" >&2
        status=1
      fi
    done
  done < <(grep -rnHE 'crate::[a-z_]+' "$path" || true)
done
[ $status = 0 ] && echo "layers: every module imports only downwards (${#layers[@]} layers)"
exit $status
