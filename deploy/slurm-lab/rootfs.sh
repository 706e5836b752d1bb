#!/bin/bash
# Build, once, a Debian 13 (trixie) root filesystem holding Slurm 24.11, for the second Slurm lab
# (VERSION=24.11 setup.sh / start.sh). The result is cached under $ROOTFS_CACHE, keyed by a stamp made of
# the suite and the package list, so a second run only prints its path. Prints the root's path last.
# Needs root and debootstrap (apt-get install -y --no-install-recommends debootstrap).
set -euo pipefail
ROOTFS_CACHE=${ROOTFS_CACHE:-/var/cache/quartermaster}
SUITE=${SUITE:-trixie}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
# slurmrestd 24.11 and its plugins come with slurm-wlm-basic-plugins (a dependency); the JWT plugin must be
# named, as on bookworm. python3 and python3-venv (trixie's Python 3.13): the lab's jobs run inside the root,
# and a Ray job needs a Python there; ray-venv.sh ROOT puts Ray in a virtual environment of the root's own.
PACKAGES=slurmctld,slurmd,slurm-client,slurmrestd,munge,slurm-wlm-jwt-plugin,python3,python3-venv
STAMP="$SUITE-$(echo "$SUITE $PACKAGES" | sha256sum | cut -c1-12)"
ROOT=$ROOTFS_CACHE/slurm-rootfs-$STAMP

if [ -f "$ROOT/.qm-rootfs-done" ]; then
  echo "rootfs.sh: cached $ROOT (built $(cat "$ROOT/.qm-rootfs-done"))" >&2
  echo "$ROOT"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then echo "rootfs.sh: run as root (debootstrap needs it)" >&2; exit 1; fi
command -v debootstrap >/dev/null || {
  echo "rootfs.sh: debootstrap missing: apt-get install -y --no-install-recommends debootstrap" >&2; exit 1; }

started=$(date +%s.%N)
mkdir -p "$ROOTFS_CACHE"
# One build at a time; a second caller waits for it and then finds the root built.
exec 9> "$ROOTFS_CACHE/.slurm-rootfs.lock"
flock 9
if [ -f "$ROOT/.qm-rootfs-done" ]; then echo "$ROOT"; exit 0; fi
rm -rf "$ROOT"  # a build that stopped half-way
build=$ROOT.building.$$
rm -rf "$build"
trap 'rm -rf "$build"' EXIT
echo "rootfs.sh: building $ROOT with debootstrap ($SUITE, minbase, $PACKAGES); a few minutes" >&2
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$build" "$MIRROR" > "$build.log" 2>&1 || {
  echo "rootfs.sh: debootstrap failed; the end of $build.log:" >&2; tail -20 "$build.log" >&2; exit 1; }
# Name resolution for localhost as on the host; nothing else of the host's configuration goes in.
cp /etc/hosts "$build/etc/hosts"
# Keep only what the lab runs: the package cache and the documentation are dead weight.
rm -rf "$build"/var/cache/apt/archives/*.deb "$build"/usr/share/doc "$build"/usr/share/man
chroot "$build" /usr/sbin/slurmctld -V > "$build/.qm-slurm-version"
date -u +%FT%TZ > "$build/.qm-rootfs-done"
mv "$build" "$ROOT"
mv "$build.log" "$ROOT.log"
trap - EXIT
printf 'rootfs.sh: built %s (%s) in %.0f s\n' "$ROOT" "$(cat "$ROOT/.qm-slurm-version")" \
  "$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN{print b-a}')" >&2
echo "$ROOT"
