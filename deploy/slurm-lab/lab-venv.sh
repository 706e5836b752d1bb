#!/usr/bin/env bash
# A tool for the Slurm labs' jobs (Ray, JupyterLab) in a virtual environment of its own, pinned, built once
# and kept; ray-venv.sh and jupyter-venv.sh name what and where.
#
#   deploy/slurm-lab/lab-venv.sh MODULE VERSION REQUIREMENT VENV        # the 22.05 lab (host)
#   deploy/slurm-lab/lab-venv.sh MODULE VERSION REQUIREMENT VENV ROOT   # the 24.11 lab: VENV inside ROOT
#
# Either is skipped when it is there (a stamp, written last: a venv without it was cut short and is built
# again). The 24.11 lab's jobs run inside its root filesystem (rootfs.sh), so the tool is installed there, for
# the root's Python, at the same path: one setup line serves both labs, as a tool at one path on every node
# of a real cluster does. Nothing is downloaded when a job runs.
#
# ROOT: the host's pip downloads the wheels for the root's Python, platform and C library, with the host's
# own package index configuration (pip.conf, PIP_*), into MODULE-wheels-VERSION-cpXY next to VENV (kept: a
# rebuilt root installs from them again); the root's pip then installs from those wheels alone, offline, with
# nothing of the host's environment (the root has neither the host's certificates nor its local indexes).
set -euo pipefail

MODULE=$1 VERSION=$2 REQUIREMENT=$3 VENV=$4 ROOT=${5:-}
PYTHON=${PYTHON:-/usr/bin/python3}
HERE=$(cd "$(dirname "$0")" && pwd)

STAMP="$ROOT$VENV/.qm-$MODULE-$VERSION"
if [ -e "$STAMP" ]; then
  echo "$MODULE $VERSION is already in $ROOT$VENV"
  exit 0
fi
check="import $MODULE, sys; print('$MODULE $VERSION for Python', sys.version.split()[0], 'in $ROOT$VENV')"

started=$(date +%s)
if [ -z "$ROOT" ]; then
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "$REQUIREMENT"
  "$VENV/bin/python" -c "$check"
  touch "$STAMP"
  echo "built in $(( $(date +%s) - started )) s"
  exit 0
fi

[ -x "$ROOT/usr/bin/python3" ] || { echo "lab-venv.sh: $ROOT has no python3 (rootfs.sh installs it)" >&2; exit 1; }
# The root's programs with nothing of the host's environment (no PIP_*, no host PATH).
in_root() { "$HERE/in-root" "$ROOT" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root "$@"; }
# cp313 manylinux_2_41_x86_64: what the root's interpreter accepts
read -r tag glibc machine < <(in_root python3 -c 'import platform, sys
print(f"{sys.version_info[0]}{sys.version_info[1]}", platform.libc_ver()[1].replace(".", "_"), platform.machine())')
WHEELS=$(dirname "$VENV")/$MODULE-wheels-$VERSION-cp$tag
staged=/var/tmp/qm-$MODULE-wheels
# The host's pip, which reads the host's package index configuration. A bare venv gives one where the
# host's python3 has none (Debian's python3 comes without pip).
downloader=$(mktemp -d)
trap 'rm -rf "$downloader" "$ROOT$staged"' EXIT
"$PYTHON" -m venv "$downloader"
# every manylinux tag the root's C library accepts, newest first (pip before 23.1 does not expand one itself),
# and pure-Python wheels
platforms=()
for minor in $(seq "${glibc#2_}" -1 5); do platforms+=(--platform "manylinux_2_${minor}_$machine"); done
platforms+=(--platform "manylinux2014_$machine" --platform "manylinux2010_$machine" --platform "manylinux1_$machine")
platforms+=(--platform any)
"$downloader/bin/pip" download --quiet --disable-pip-version-check --dest "$WHEELS" --only-binary=:all: \
  --python-version "$tag" --implementation cp --abi "cp$tag" --abi abi3 --abi none "${platforms[@]}" \
  "$REQUIREMENT"
echo "wheels for cp$tag in $WHEELS after $(( $(date +%s) - started )) s"
rm -rf "$ROOT$VENV" "$ROOT$staged"
cp -al "$WHEELS" "$ROOT$staged" 2>/dev/null || cp -a "$WHEELS" "$ROOT$staged"
mkdir -p "$ROOT$(dirname "$VENV")"
in_root python3 -m venv "$VENV"
in_root "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-index --find-links "$staged" "$REQUIREMENT"
in_root "$VENV/bin/python" -c "$check"
touch "$STAMP"
echo "built in $(( $(date +%s) - started )) s"
