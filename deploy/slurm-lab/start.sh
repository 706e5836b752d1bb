#!/bin/bash
# Start the lab written by setup.sh: munged, slurmctld, one slurmd per NodeName line and slurmrestd (JWT) on
# 127.0.0.1; return once every node is up and slurmrestd answers. RESTD=0 leaves slurmrestd out,
# CLEAN=1 throws away the controller's saved jobs and node states (slurmctld -c).
set -euo pipefail
LAB=${LAB:-/tmp/slurm-lab}
export SLURM_CONF=$LAB/etc/slurm.conf
[ -f $SLURM_CONF ] || { echo "start.sh: $SLURM_CONF missing: run setup.sh first" >&2; exit 1; }
CTLD_PORT=$(sed -n 's/^SlurmctldPort=//p' $SLURM_CONF)
RESTD_PORT=${RESTD_PORT:-$((CTLD_PORT + 80))}
NODES=$(sed -n 's/^NodeName=\([^ ]*\).*/\1/p' $SLURM_CONF)

alive() { [ -e /proc/$1 ] && [ "$(awk '{print $3}' /proc/$1/stat 2>/dev/null)" != Z ]; }
for f in $LAB/run/*.pid; do
  [ -f "$f" ] && alive "$(cat "$f")" && { echo "lab already running ($f); stop.sh first to restart it"; exit 0; }
done

/usr/sbin/munged --socket=$LAB/munge/munge.socket --key-file=$LAB/munge/munge.key \
  --pid-file=$LAB/run/munged.pid --log-file=$LAB/log/munged.log --seed-file=$LAB/munge/munged.seed
/usr/sbin/slurmctld -f $SLURM_CONF ${CLEAN:+-c}                 # daemonizes; writes run/slurmctld.pid
for n in $NODES; do /usr/sbin/slurmd -f $SLURM_CONF -N $n; done  # daemonize; write run/slurmd-<node>.pid

# Ready when every node is in a usable state. sinfo blocks for seconds against a dead controller: timeout 3.
ready=0
for t in $(seq 1 200); do
  pid=$(cat $LAB/run/slurmctld.pid 2>/dev/null || true)
  if [ -z "$pid" ] || ! alive "$pid"; then
    if [ $t -gt 10 ]; then echo "start.sh: slurmctld died:" >&2; tail -5 $LAB/log/slurmctld.log >&2; exit 1; fi
  else
    st=$(timeout 3 sinfo -h -N -o '%T' 2>/dev/null || true)
    if [ -n "$st" ] && ! grep -qvE '^(idle|mixed|allocated|drained|draining)$' <<<"$st"; then ready=1; break; fi
  fi
  sleep 0.1
done
if [ $ready = 0 ]; then echo "start.sh: nodes not ready after 20 s" >&2; timeout 3 sinfo -N >&2 || true; exit 1; fi
echo "slurm ready: $(echo $NODES | wc -w) nodes"

[ "${RESTD:-1}" = 0 ] && exit 0
# slurmrestd refuses to run as root or as SlurmUser (root here): it binds, then becomes user 'slurm'.
# The openapi/dbv0.0.x plugins are fatal without slurmdbd, so load only the slurm ones.
SLURM_JWT=daemon setsid /usr/sbin/slurmrestd -f $SLURM_CONF -u slurm -a rest_auth/jwt \
  -s openapi/v0.0.38,openapi/v0.0.37,openapi/v0.0.36 127.0.0.1:$RESTD_PORT \
  >> $LAB/log/slurmrestd.log 2>&1 < /dev/null &
echo $! > $LAB/run/slurmrestd.pid
for t in $(seq 1 100); do   # an unauthenticated ping answers 401 once it listens
  code=$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$RESTD_PORT/slurm/v0.0.38/ping || true)
  if [ "$code" = 401 ]; then
    echo "slurmrestd ready: http://127.0.0.1:$RESTD_PORT/slurm/v0.0.38 (token: scontrol token username=root)"
    exit 0
  fi
  sleep 0.1
done
echo "start.sh: slurmrestd not ready" >&2; tail -3 $LAB/log/slurmrestd.log >&2; exit 1
