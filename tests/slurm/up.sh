#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for tests: munged, slurmctld and slurmd with their
# configuration, state, spool, sockets and logs under DIR; the one node is this host at 127.0.0.1,
# no accounting (accounting_storage/none), ports chosen free. Nothing outside DIR is touched but
# the Debian packages, installed with apt-get when a binary is missing.
#
#   tests/slurm/up.sh DIR          # prints SLURM_CONF=DIR/slurm.conf when the node is idle
#   export SLURM_CONF=DIR/slurm.conf; srun hostname; sbatch --wrap 'echo hi'
#   tests/slurm/down.sh DIR        # stops exactly the daemons this script started
#
# Exit status: 0 the node is idle; 2 SLURM cannot be had here (not root, packages not
# installable); 3 a daemon did not start or the node did not become idle (the logs' tails
# are printed). On 3 the daemons already started are stopped again.
set -euo pipefail

DIR=${1:?usage: up.sh DIR (an empty directory for config, state, spool and logs)}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)

fail() { echo "up.sh: $2" >&2; exit "$1"; }

[ "$(id -u)" = 0 ] || fail 2 "needs root (slurmd runs jobs as their users; munged and the packages need root)"

# -- packages ------------------------------------------------------------------------------
missing=()
for bin in munged:munge slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client; do
    command -v "${bin%%:*}" >/dev/null 2>&1 || [ -x "/usr/sbin/${bin%%:*}" ] || missing+=("${bin#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
    command -v apt-get >/dev/null 2>&1 || fail 2 "missing ${missing[*]} and no apt-get to install them"
    export DEBIAN_FRONTEND=noninteractive
    apt_install() { apt-get install -y --no-install-recommends "${missing[@]}" >"$DIR/apt.log" 2>&1; }
    apt_install || { apt-get update >>"$DIR/apt.log" 2>&1 && apt_install; } ||
        fail 2 "cannot install ${missing[*]} with apt-get (see $DIR/apt.log): $(tail -n 3 "$DIR/apt.log" | tr '\n' ' ')"
fi

# -- configuration ---------------------------------------------------------------------------
[ -e "$DIR/daemons.pid" ] && fail 3 "$DIR/daemons.pid exists: a cluster from this directory may be running (down.sh $DIR)"
NODE=$(hostname -s)
# The node offers at least 8 CPUs and 64 GB whatever this machine has (slurmd takes the configured
# counts: SlurmdParameters=config_overrides; nothing enforces them, TaskPlugin=task/none): the tiny
# workflow's jobs, which ask for profiles/slurm's 2 threads and up to 16 GB but are mostly process
# start, run side by side as on a cluster, not one by one as a 2-core, 24 GB machine would have them.
CPUS=$(( $(nproc) > 8 ? $(nproc) : 8 ))
MEM_MB=$(awk '/^MemTotal:/ {m = $2 / 1024 * 0.9; printf "%d", (m > 64000 ? m : 64000)}' /proc/meminfo)
read -r CTLD_PORT SLURMD_PORT < <(python3 - <<'PY'
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
PY
)
# munged runs as the munge user and must reach its files: DIR is root's and not writable by others
chmod 755 "$DIR"
install -d -o munge -g munge -m 755 "$DIR/munge"  # the socket needs execute permission for all
dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
chown munge:munge "$DIR/munge/munge.key"
chmod 400 "$DIR/munge/munge.key"
mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log"

cat >"$DIR/slurm.conf" <<CONF
# written by tests/slurm/up.sh
ClusterName=vlbias-test
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdParameters=config_overrides
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
SchedulerType=sched/backfill
# a batch job is scheduled when submitted, not up to 3 s later (the default batch_sched_delay): seconds
# per layer of dependent jobs
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# without a default a job that gives no --mem takes the node's whole memory
DefMemPerCPU=1000
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
# one stand-in GPU (the device file is /dev/null) so that jobs asking for a GPU are scheduled
# and see CUDA_VISIBLE_DEVICES; they find no CUDA device and run on the CPU
GresTypes=gpu
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB Gres=gpu:1 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
echo "NodeName=$NODE Name=gpu File=/dev/null" >"$DIR/gres.conf"
export SLURM_CONF=$DIR/slurm.conf

# -- daemons --------------------------------------------------------------------------------
# each forks and writes its pid file; daemons.pid lists "name pid" of those started here
started() {  # name pidfile
    local pid
    for _ in $(seq 100); do
        [ -s "$2" ] && pid=$(cat "$2") && kill -0 "$pid" 2>/dev/null && { echo "$1 $pid" >>"$DIR/daemons.pid"; return 0; }
        sleep 0.1
    done
    return 1
}
give_up() {
    echo "up.sh: $1" >&2
    for log in "$DIR"/log/*.log "$DIR"/munge/munged.log; do
        [ -s "$log" ] && { echo "--- $log" >&2; tail -n 15 "$log" >&2; }
    done
    [ -e "$DIR/daemons.pid" ] && "$HERE/down.sh" "$DIR" >&2
    exit 3
}

: >"$DIR/daemons.pid"
runuser -u munge -- /usr/sbin/munged --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" \
    --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/munge/munged.log" --seed-file="$DIR/munge/munged.seed" \
    2>>"$DIR/log/start.log" || give_up "munged did not start"
started munged "$DIR/munge/munged.pid" || give_up "munged did not write its pid"
/usr/sbin/slurmctld -f "$SLURM_CONF" 2>>"$DIR/log/start.log" || give_up "slurmctld did not start"
started slurmctld "$DIR/slurmctld.pid" || give_up "slurmctld did not write its pid"
/usr/sbin/slurmd -f "$SLURM_CONF" 2>>"$DIR/log/start.log" || give_up "slurmd did not start"
started slurmd "$DIR/slurmd.pid" || give_up "slurmd did not write its pid"

for _ in $(seq 120); do
    state=$(sinfo -h -n "$NODE" -o %T 2>/dev/null || true)
    [ "$state" = idle ] && { echo "SLURM_CONF=$SLURM_CONF"; exit 0; }
    sleep 0.5
done
give_up "node $NODE is '${state:-unknown}', not idle, after 60 s"
