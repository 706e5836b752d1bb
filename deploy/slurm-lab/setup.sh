#!/bin/bash
# Write a self-contained single-machine Slurm lab under $LAB: slurm.conf, gres.conf, topology.conf, a munge
# key, a JWT key and fake GPU device nodes. NNODES nodes (default 4), each with 32 CPUs, 250 GiB and 8 fake
# H100s, and NCLOUD cloud nodes (default 2) of the same shape: State=CLOUD, powered down until something asks
# for them (Slurm's power saving: $LAB/bin/resume-nodes starts their slurmd, suspend-nodes stops it), with the
# feature qm-pool-burst, an elastic pool of Quartermaster's (docs/backends.md, Slurm, "Elastic pools").
# Touches nothing outside $LAB (not /etc/slurm, not /etc/munge). Safe to run again; keys are kept.
#
# VERSION=22.05 (default): the host's Slurm (Debian 12 packages), topology/tree (two leaf switches under a
#   spine), LAB=/tmp/slurm-lab, ports 17000-17004, slurmrestd 17080.
# VERSION=24.11: Slurm 24.11 from Debian 13 in a root filesystem of its own (rootfs.sh builds it once and
#   caches it), topology/block (two blocks of two nodes), LAB=/tmp/slurm-lab-24.11, ports 17100-17104,
#   slurmrestd 17180. Both labs run at once.
set -euo pipefail
VERSION=${VERSION:-22.05}
HERE=$(cd "$(dirname "$0")" && pwd)
case $VERSION in
  22.05) LAB=${LAB:-/tmp/slurm-lab}; BASEPORT=${BASEPORT:-17000}; ROOT="" ;;
  24.11) LAB=${LAB:-/tmp/slurm-lab-24.11}; BASEPORT=${BASEPORT:-17100} ;;
  *) echo "setup.sh: VERSION must be 22.05 or 24.11, not $VERSION" >&2; exit 1 ;;
esac
NNODES=${NNODES:-4}
NCLOUD=${NCLOUD:-2}
# slurmctld listens on BASEPORT, slurmd of node i on BASEPORT+i, of cloud node i on BASEPORT+NNODES+i

if [ "$(id -u)" != 0 ]; then echo "setup.sh: run as root (mknod, munged and slurmd need it)" >&2; exit 1; fi
if [ "$VERSION" = 24.11 ]; then
  ROOT=$("$HERE/rootfs.sh")   # built once (about a minute), then cached
fi
for bin in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/slurmrestd /usr/sbin/munged /usr/bin/sinfo; do
  [ -x "$ROOT$bin" ] || { echo "setup.sh: $ROOT$bin missing: apt-get install -y --no-install-recommends" \
    "slurmctld slurmd slurm-client slurmrestd munge slurm-wlm-jwt-plugin" >&2; exit 1; }
done

mkdir -p $LAB/etc $LAB/state $LAB/log $LAB/run $LAB/munge $LAB/dev $LAB/jobs $LAB/bin
chmod 755 $LAB/munge          # slurmrestd (user slurm) and other non-root clients must reach the munge socket
chmod 1777 $LAB/jobs          # job output of any user
for i in $(seq 1 $NNODES); do mkdir -p $LAB/spool/lab-node$i; done
for i in $(seq 1 $NCLOUD); do mkdir -p $LAB/spool/lab-cloud$i; done
# gres.conf wants character devices (a regular file is rejected and then no CUDA_VISIBLE_DEVICES is set).
for g in $(seq 0 7); do [ -c $LAB/dev/nvidia$g ] || mknod $LAB/dev/nvidia$g c 195 $g; done

# Own munge key and socket, so the lab never talks to a system munged.
if [ ! -f $LAB/munge/munge.key ]; then
  dd if=/dev/urandom bs=1 count=1024 of=$LAB/munge/munge.key status=none
  chmod 400 $LAB/munge/munge.key
fi
# HS256 key for auth/jwt: slurmrestd's tokens (scontrol token, or minted from this file).
if [ ! -f $LAB/etc/jwt_hs256.key ]; then
  dd if=/dev/urandom bs=32 count=1 of=$LAB/etc/jwt_hs256.key status=none
  chmod 600 $LAB/etc/jwt_hs256.key
fi

cat > $LAB/etc/slurm.conf <<CONF
ClusterName=lab
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$BASEPORT
AuthType=auth/munge
AuthInfo=socket=$LAB/munge/munge.socket
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$LAB/etc/jwt_hs256.key
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$LAB/state
SlurmdSpoolDir=$LAB/spool/%n
SlurmctldPidFile=$LAB/run/slurmctld.pid
SlurmdPidFile=$LAB/run/slurmd-%n.pid
SlurmctldLogFile=$LAB/log/slurmctld.log
SlurmdLogFile=$LAB/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LAB/log/jobcomp.txt
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
# the fake nodes claim more CPUs and memory than this machine has: trust slurm.conf, do not drain them
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
MailProg=/bin/true
CommunicationParameters=NoInAddrAny
GresTypes=gpu
TopologyPlugin=topology/$([ "$VERSION" = 22.05 ] && echo tree || echo block)
# fast turnaround for tests
SchedulerParameters=sched_interval=1,bf_interval=1
MinJobAge=300
MaxJobCount=100000
KillWait=5
# Power saving, for the cloud nodes only (the fixed ones are excluded): whoever runs the pool (Quartermaster)
# asks with scontrol update State=POWER_UP / POWER_DOWN; a cloud node idle for a day goes by itself (a backstop,
# and SuspendTime=INFINITE would switch power saving off altogether). The programs start and stop the node's
# slurmd on this machine, where a cloud would create and delete an instance. PrivateData=cloud: a powered-down
# cloud node is listed (sinfo, GET nodes); 22.05 hides it otherwise.
ResumeProgram=$LAB/bin/resume-nodes
SuspendProgram=$LAB/bin/suspend-nodes
SuspendTime=86400
SuspendExcNodes=lab-node[1-$NNODES]
ResumeTimeout=60
SuspendTimeout=10
PrivateData=cloud
CONF
for i in $(seq 1 $NNODES); do
  echo "NodeName=lab-node$i NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((BASEPORT + i))" \
    "CPUs=32 Boards=1 SocketsPerBoard=2 CoresPerSocket=16 ThreadsPerCore=1 RealMemory=256000" \
    "Gres=gpu:h100:8 State=UNKNOWN" >> $LAB/etc/slurm.conf
done
for i in $(seq 1 $NCLOUD); do  # a heavier weight: Slurm's own choice takes the fixed nodes first
  echo "NodeName=lab-cloud$i NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((BASEPORT + NNODES + i))" \
    "CPUs=32 Boards=1 SocketsPerBoard=2 CoresPerSocket=16 ThreadsPerCore=1 RealMemory=256000" \
    "Gres=gpu:h100:8 Weight=100 Features=qm-pool-burst State=CLOUD" >> $LAB/etc/slurm.conf
done
echo "PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >> $LAB/etc/slurm.conf

cat > $LAB/etc/gres.conf <<CONF
AutoDetect=off
NodeName=lab-node[1-$NNODES] Name=gpu Type=h100 File=$LAB/dev/nvidia[0-7]
CONF
[ "$NCLOUD" -gt 0 ] && echo "NodeName=lab-cloud[1-$NCLOUD] Name=gpu Type=h100 File=$LAB/dev/nvidia[0-7]" >> $LAB/etc/gres.conf

# The cluster's network topology, which the backend reads back with `scontrol show topology`: nodes 1-2 and
# 3-4 share a leaf switch (22.05, tree) or a block (24.11, block); the cloud nodes have one of their own.
half=$(( (NNODES + 1) / 2 ))
if [ "$VERSION" = 22.05 ]; then
  cat > $LAB/etc/topology.conf <<CONF
SwitchName=leaf1 Nodes=lab-node[1-$half]
SwitchName=leaf2 Nodes=lab-node[$((half + 1))-$NNODES]
CONF
  [ "$NCLOUD" -gt 0 ] && echo "SwitchName=leaf3 Nodes=lab-cloud[1-$NCLOUD]" >> $LAB/etc/topology.conf
  echo "SwitchName=spine1 Switches=leaf[1-$([ "$NCLOUD" -gt 0 ] && echo 3 || echo 2)]" >> $LAB/etc/topology.conf
else
  cat > $LAB/etc/topology.conf <<CONF
BlockName=block1 Nodes=lab-node[1-$half]
BlockName=block2 Nodes=lab-node[$((half + 1))-$NNODES]
CONF
  [ "$NCLOUD" -gt 0 ] && echo "BlockName=block3 Nodes=lab-cloud[1-$NCLOUD]" >> $LAB/etc/topology.conf
  echo "BlockSizes=$half,$NNODES" >> $LAB/etc/topology.conf
fi

# What start.sh and stop.sh need to know, and the Slurm commands of this lab's version: $LAB/bin/sinfo and
# the others run the root filesystem's programs for 24.11 (a 22.05 client cannot talk to a 24.11 controller).
cat > $LAB/etc/lab.env <<ENV
VERSION=$VERSION
ROOT=$ROOT
BASEPORT=$BASEPORT
ENV
for cmd in sinfo squeue scontrol sbatch scancel srun; do
  if [ -n "$ROOT" ]; then
    printf '#!/bin/bash\nSLURM_CONF=%s exec %s %s /usr/bin/%s "$@"\n' "$LAB/etc/slurm.conf" "$HERE/in-root" "$ROOT" $cmd
  else
    printf '#!/bin/bash\nSLURM_CONF=%s exec /usr/bin/%s "$@"\n' "$LAB/etc/slurm.conf" $cmd
  fi > $LAB/bin/$cmd
  chmod +x $LAB/bin/$cmd
done
# Slurm's power saving runs these as SlurmUser, with a host list, from where slurmctld runs (inside the root
# filesystem for 24.11, so they call the root's programs directly). A node's slurmd starts as start.sh's do.
cat > $LAB/bin/resume-nodes <<SCRIPT
#!/bin/bash
# ResumeProgram: "power up" the cloud nodes in \$1 (a host list): start their slurmd, which registers them.
export SLURM_CONF=$LAB/etc/slurm.conf
echo "\$(date -Is) resume \$1" >> $LAB/log/power.log
# slurmctld runs this with most signals blocked, and a blocked mask outlives exec: a slurmd inheriting it never
# reaps its job steps (Python clears the mask first). With slurmctld's pipe for its output, its job launches
# failed (requeued, held): it writes to its log file only. -b: the node reports a boot now, as a new instance
# would (Slurm ignores a node that comes up booted before the power-up request).
unblocked='import os, signal, sys; signal.pthread_sigmask(signal.SIG_SETMASK, []); os.execv(sys.argv[1], sys.argv[1:])'
for n in \$(/usr/bin/scontrol show hostnames "\$1"); do
  setsid /usr/bin/python3 -c "\$unblocked" /usr/sbin/slurmd -b -f \$SLURM_CONF -N \$n < /dev/null > /dev/null 2>&1
done
SCRIPT
cat > $LAB/bin/suspend-nodes <<SCRIPT
#!/bin/bash
# SuspendProgram: "power down" the cloud nodes in \$1: stop their slurmd (by PID file).
export SLURM_CONF=$LAB/etc/slurm.conf
echo "\$(date -Is) suspend \$1" >> $LAB/log/power.log
for n in \$(/usr/bin/scontrol show hostnames "\$1"); do
  [ -f $LAB/run/slurmd-\$n.pid ] && kill \$(cat $LAB/run/slurmd-\$n.pid) 2> /dev/null
done
exit 0
SCRIPT
chmod +x $LAB/bin/resume-nodes $LAB/bin/suspend-nodes
echo "Slurm $VERSION lab written to $LAB ($NNODES nodes and $NCLOUD cloud nodes, slurmctld port $BASEPORT${ROOT:+, root $ROOT})"
