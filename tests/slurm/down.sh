#!/usr/bin/env bash
# Stop the daemons tests/slurm/up.sh DIR started (listed in DIR/daemons.pid), munged last, and
# wait until they are gone. A pid that no longer runs that daemon is left alone. DIR stays (logs).
set -uo pipefail

DIR=${1:?usage: down.sh DIR (the directory given to up.sh)}
PIDS=$DIR/daemons.pid
[ -e "$PIDS" ] || { echo "down.sh: nothing to stop ($PIDS absent)"; exit 0; }

status=0
# slurmd and slurmctld together (each takes 1-2 s to exit), then munged, which their last messages need
stop() {  # daemon names: SIGTERM to each, then wait up to 10 s for all
    local name pid pids=()
    for name in "$@"; do
        pid=$(awk -v n="$name" '$1 == n {print $2}' "$PIDS")
        [ -n "$pid" ] || continue
        # the pid must still be that daemon (not a reused pid)
        tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$name" || continue
        kill -TERM "$pid"
        pids+=("$name:$pid")
    done
    for _ in $(seq 100); do
        local alive=0
        for np in "${pids[@]}"; do kill -0 "${np#*:}" 2>/dev/null && alive=1; done
        [ $alive = 0 ] && return 0
        sleep 0.1
    done
    for np in "${pids[@]}"; do
        if kill -0 "${np#*:}" 2>/dev/null; then
            echo "down.sh: ${np%%:*} (${np#*:}) ignored SIGTERM for 10 s; sending SIGKILL" >&2
            kill -KILL "${np#*:}"
            status=1
        fi
    done
}
stop slurmd slurmctld
stop munged
rm -f "$PIDS"
exit $status
