#!/usr/bin/env bash
# Stop the daemons tests/slurm/up.sh DIR started (listed in DIR/daemons.pid), slurmd first, and
# wait until they are gone. A pid that no longer runs that daemon is left alone. DIR stays (logs).
set -uo pipefail

DIR=${1:?usage: down.sh DIR (the directory given to up.sh)}
PIDS=$DIR/daemons.pid
[ -e "$PIDS" ] || { echo "down.sh: nothing to stop ($PIDS absent)"; exit 0; }

status=0
for name in slurmd slurmctld munged; do
    pid=$(awk -v n="$name" '$1 == n {print $2}' "$PIDS")
    [ -n "$pid" ] || continue
    # the pid must still be that daemon (not a reused pid)
    if ! tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$name"; then
        continue
    fi
    kill -TERM "$pid"
    for _ in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "down.sh: $name ($pid) ignored SIGTERM for 10 s; sending SIGKILL" >&2
        kill -KILL "$pid"
        status=1
    fi
done
rm -f "$PIDS"
exit $status
