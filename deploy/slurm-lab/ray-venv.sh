#!/usr/bin/env bash
# Ray for the Slurm lab's Ray jobs: a virtual environment of its own with a pinned Ray, built once and kept.
#
#   deploy/slurm-lab/ray-venv.sh        # -> /var/cache/quartermaster/ray-venv (RAY_VENV), skipped if it is there
#
# The lab's Slurm cluster is then given the option {"ray_setup": "source $RAY_VENV/bin/activate"}: the command
# each Ray job runs on its nodes to put `ray` and its Python on PATH (docs/jobs.md, "Ray jobs").
# ray[default] rather than bare ray: the dashboard (the job page's link) and `ray job submit` need it.
# PIP_FIND_LINKS=DIR takes the wheel from DIR when it is already downloaded (about 80 MB from PyPI otherwise).
set -euo pipefail

RAY_VERSION=${RAY_VERSION:-2.60.0}
RAY_VENV=${RAY_VENV:-/var/cache/quartermaster/ray-venv}
PYTHON=${PYTHON:-/usr/bin/python3}

STAMP="$RAY_VENV/.qm-ray-$RAY_VERSION"   # written last: a venv without it was cut short and is built again
if [ -e "$STAMP" ]; then
  echo "Ray $RAY_VERSION is already in $RAY_VENV"
  exit 0
fi

started=$(date +%s)
rm -rf "$RAY_VENV"
mkdir -p "$(dirname "$RAY_VENV")"
"$PYTHON" -m venv "$RAY_VENV"
"$RAY_VENV/bin/pip" install --quiet --disable-pip-version-check "ray[default]==$RAY_VERSION"
"$RAY_VENV/bin/python" -c "import ray; print('Ray', ray.__version__, 'in', '$RAY_VENV')"
touch "$STAMP"
echo "built in $(( $(date +%s) - started )) s"
