#!/bin/bash
# Start the lab written by setup.sh: munged, slurmctld, one slurmd per NodeName line and slurmrestd (JWT) on
# 127.0.0.1; return once every node is up and slurmrestd answers. RESTD=0 leaves slurmrestd out,
# CLEAN=1 throws away the controller's saved jobs and node states (slurmctld -c). VERSION=24.11 (or the
# LAB of such a lab) starts the daemons inside its root filesystem (in-root). Prints how long it took.
set -euo pipefail
started=$(date +%s.%N)
HERE=$(cd "$(dirname "$0")" && pwd)
if [ "${VERSION:-22.05}" = 24.11 ]; then LAB=${LAB:-/tmp/slurm-lab-24.11}; else LAB=${LAB:-/tmp/slurm-lab}; fi
export SLURM_CONF=$LAB/etc/slurm.conf
[ -f $SLURM_CONF ] && [ -f $LAB/etc/lab.env ] || { echo "start.sh: $LAB is not set up: run setup.sh first" >&2; exit 1; }
VERSION=$(sed -n 's/^VERSION=//p' $LAB/etc/lab.env)
ROOT=$(sed -n 's/^ROOT=//p' $LAB/etc/lab.env)
# how the daemons run: on the host (22.05), or inside the root filesystem (24.11)
RUN=()
[ -n "$ROOT" ] && RUN=("$HERE/in-root" "$ROOT")
elapsed() { awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }
CTLD_PORT=$(sed -n 's/^SlurmctldPort=//p' $SLURM_CONF)
RESTD_PORT=${RESTD_PORT:-$((CTLD_PORT + 80))}
# the fixed nodes; the cloud ones (State=CLOUD) start powered down, and Slurm's power saving starts them
NODES=$(sed -n '/State=CLOUD/!s/^NodeName=\([^ ]*\).*/\1/p' $SLURM_CONF)

alive() { [ -e /proc/$1 ] && [ "$(awk '{print $3}' /proc/$1/stat 2>/dev/null)" != Z ]; }
for f in $LAB/run/*.pid; do
  [ -f "$f" ] && alive "$(cat "$f")" && { echo "lab already running ($f); stop.sh first to restart it"; exit 0; }
done

"${RUN[@]}" /usr/sbin/munged --socket=$LAB/munge/munge.socket --key-file=$LAB/munge/munge.key \
  --pid-file=$LAB/run/munged.pid --log-file=$LAB/log/munged.log --seed-file=$LAB/munge/munged.seed
"${RUN[@]}" /usr/sbin/slurmctld -f $SLURM_CONF ${CLEAN:+-c}                 # daemonizes; writes run/slurmctld.pid
for n in $NODES; do "${RUN[@]}" /usr/sbin/slurmd -f $SLURM_CONF -N $n; done  # daemonize; write run/slurmd-<node>.pid

# Ready when every node is in a usable state. sinfo blocks for seconds against a dead controller: timeout 3.
ready=0
for t in $(seq 1 200); do
  pid=$(cat $LAB/run/slurmctld.pid 2>/dev/null || true)
  if [ -z "$pid" ] || ! alive "$pid"; then
    if [ $t -gt 10 ]; then echo "start.sh: slurmctld died:" >&2; tail -5 $LAB/log/slurmctld.log >&2; exit 1; fi
  else
    st=$(timeout 3 $LAB/bin/sinfo -h -N -n "$(echo $NODES | tr ' ' ,)" -o '%T' 2>/dev/null || true)
    if [ -n "$st" ] && ! grep -qvE '^(idle|mixed|allocated|drained|draining)$' <<<"$st"; then ready=1; break; fi
  fi
  sleep 0.1
done
if [ $ready = 0 ]; then echo "start.sh: nodes not ready after 20 s" >&2; timeout 3 $LAB/bin/sinfo -N >&2 || true; exit 1; fi
echo "slurm $VERSION ready: $(echo $NODES | wc -w) nodes in $(elapsed) s"

[ "${RESTD:-1}" = 0 ] && exit 0
# slurmrestd refuses to run as root or as SlurmUser (root here): it binds, then becomes user 'slurm'.
# The slurmdbd plugins are fatal without slurmdbd, so load only the slurmctld ones: 22.05 names a plugin per
# API version; 24.11 has one plugin (openapi/slurmctld) served in every data parser it has (v0.0.40-42).
if [ "$VERSION" = 22.05 ]; then PLUGINS=openapi/v0.0.38,openapi/v0.0.37,openapi/v0.0.36 API=v0.0.38
else PLUGINS=openapi/slurmctld API=v0.0.42; fi
SLURM_JWT=daemon setsid "${RUN[@]}" /usr/sbin/slurmrestd -f $SLURM_CONF -u slurm -a rest_auth/jwt \
  -s $PLUGINS 127.0.0.1:$RESTD_PORT >> $LAB/log/slurmrestd.log 2>&1 < /dev/null &
echo $! > $LAB/run/slurmrestd.pid
for t in $(seq 1 100); do   # an unauthenticated ping answers 401 once it listens
  code=$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$RESTD_PORT/slurm/$API/ping || true)
  if [ "$code" = 401 ]; then
    echo "slurmrestd ready: http://127.0.0.1:$RESTD_PORT/slurm/$API (token: $LAB/bin/scontrol token username=root);" \
      "lab up in $(elapsed) s"
    exit 0
  fi
  sleep 0.1
done
echo "start.sh: slurmrestd not ready" >&2; tail -3 $LAB/log/slurmrestd.log >&2; exit 1
