#!/bin/bash
# Stop what start.sh started, by PID file only (never by process name): SIGTERM, then SIGKILL after 10 s.
# slurmrestd first, then the slurmds, the controller, and munged last (the others authenticate through it).
# VERSION=24.11 (or its LAB) stops that lab; its daemons' mount namespaces go with them.
if [ "${VERSION:-22.05}" = 24.11 ]; then LAB=${LAB:-/tmp/slurm-lab-24.11}; else LAB=${LAB:-/tmp/slurm-lab}; fi

# A stopped daemon may linger as a zombie until PID 1 reaps it; kill -0 succeeds on those, so read the state.
alive() { [ -e /proc/$1 ] && [ "$(awk '{print $3}' /proc/$1/stat 2>/dev/null)" != Z ]; }

stop_group() {
  local pids=() f p i left
  for f in "$@"; do
    [ -f "$f" ] || continue
    p=$(cat "$f"); rm -f "$f"
    [ -n "$p" ] && alive "$p" && { kill "$p"; pids+=("$p"); }
  done
  [ ${#pids[@]} = 0 ] && return 0
  for i in $(seq 1 100); do
    left=0
    for p in "${pids[@]}"; do alive "$p" && left=1; done
    [ $left = 0 ] && return 0
    sleep 0.1
  done
  # a slurmd that never registered with a controller ignores SIGTERM
  for p in "${pids[@]}"; do alive "$p" && { echo "stop.sh: SIGKILL $p" >&2; kill -9 "$p"; }; done
  return 0
}

stop_group $LAB/run/slurmrestd.pid
stop_group $LAB/run/slurmd-*.pid
stop_group $LAB/run/slurmctld.pid
stop_group $LAB/run/munged.pid
