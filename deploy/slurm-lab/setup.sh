#!/bin/bash
# Write a self-contained single-machine Slurm lab under $LAB: slurm.conf, gres.conf, topology.conf, a munge
# key, a JWT key and fake GPU device nodes. NNODES nodes (default 4), each with 32 CPUs, 250 GiB and 8 fake
# H100s. Touches nothing outside $LAB (not /etc/slurm, not /etc/munge). Safe to run again; keys are kept.
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
# slurmctld listens on BASEPORT, slurmd of node i on BASEPORT+i

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
CONF
for i in $(seq 1 $NNODES); do
  echo "NodeName=lab-node$i NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((BASEPORT + i))" \
    "CPUs=32 Boards=1 SocketsPerBoard=2 CoresPerSocket=16 ThreadsPerCore=1 RealMemory=256000" \
    "Gres=gpu:h100:8 State=UNKNOWN" >> $LAB/etc/slurm.conf
done
echo "PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >> $LAB/etc/slurm.conf

cat > $LAB/etc/gres.conf <<CONF
AutoDetect=off
NodeName=lab-node[1-$NNODES] Name=gpu Type=h100 File=$LAB/dev/nvidia[0-7]
CONF

# The cluster's network topology, which the backend reads back with `scontrol show topology`: nodes 1-2 and
# 3-4 share a leaf switch (22.05, tree) or a block (24.11, block).
half=$(( (NNODES + 1) / 2 ))
if [ "$VERSION" = 22.05 ]; then
  cat > $LAB/etc/topology.conf <<CONF
SwitchName=leaf1 Nodes=lab-node[1-$half]
SwitchName=leaf2 Nodes=lab-node[$((half + 1))-$NNODES]
SwitchName=spine1 Switches=leaf[1-2]
CONF
else
  cat > $LAB/etc/topology.conf <<CONF
BlockName=block1 Nodes=lab-node[1-$half]
BlockName=block2 Nodes=lab-node[$((half + 1))-$NNODES]
BlockSizes=$half,$NNODES
CONF
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
echo "Slurm $VERSION lab written to $LAB ($NNODES nodes, slurmctld port $BASEPORT${ROOT:+, root $ROOT})"
