#!/usr/bin/env bash
# The one-node cluster of tests/slurm/up.sh in DIR, held for as long as this script's stdin stays
# open: at its end (the test process closed it, or ended however it ended: a timeout's SIGKILL,
# Ctrl-C twice, a crash) the daemons are stopped (down.sh) and DIR is removed. The SLURM fixture
# (tests/slurm/conftest.py) starts it in a session of its own, out of reach of the signals that
# end pytest; its daemons fork away from any process group, so only such a watcher ends them.
#
#   tests/slurm/hold.sh DIR    # prints up.sh's exit status on a line (its output: DIR/up.out, DIR/up.err)
set -uo pipefail

DIR=${1:?usage: hold.sh DIR (an empty directory, removed at the end)}
HERE=$(cd "$(dirname "$0")" && pwd)
"$HERE/up.sh" "$DIR" </dev/null >"$DIR/up.out" 2>"$DIR/up.err"
status=$?
# pytest may be gone already: a write to its closed pipe must not end this script before down.sh
# (ignored only now: up.sh's daemons keep the default)
trap '' PIPE
echo "$status"
cat >/dev/null
"$HERE/down.sh" "$DIR" >/dev/null 2>&1
rm -rf "$DIR"
