#!/bin/bash
# Write a self-contained single-machine Slurm 22.05 lab under $LAB: slurm.conf, gres.conf, a munge key, a JWT
# key and fake GPU device nodes. NNODES nodes (default 4), each with 32 CPUs, 250 GiB and 8 fake H100s.
# Touches nothing outside $LAB (not /etc/slurm, not /etc/munge). Safe to run again; keys are kept.
set -euo pipefail
LAB=${LAB:-/tmp/slurm-lab}
NNODES=${NNODES:-4}
BASEPORT=${BASEPORT:-17000}   # slurmctld listens on BASEPORT, slurmd of node i on BASEPORT+i

if [ "$(id -u)" != 0 ]; then echo "setup.sh: run as root (mknod, munged and slurmd need it)" >&2; exit 1; fi
for bin in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/slurmrestd /usr/sbin/munged /usr/bin/sinfo; do
  [ -x $bin ] || { echo "setup.sh: $bin missing: apt-get install -y --no-install-recommends" \
    "slurmctld slurmd slurm-client slurmrestd munge slurm-wlm-jwt-plugin" >&2; exit 1; }
done

mkdir -p $LAB/etc $LAB/state $LAB/log $LAB/run $LAB/munge $LAB/dev $LAB/jobs
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
echo "lab written to $LAB ($NNODES nodes, slurmctld port $BASEPORT)"
