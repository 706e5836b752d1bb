#!/usr/bin/env bash
# Ray for the Slurm labs' Ray jobs: a virtual environment of its own with a pinned Ray, built once and kept
# (lab-venv.sh says how).
#
#   deploy/slurm-lab/ray-venv.sh        # the 22.05 lab (host): /var/cache/quartermaster/ray-venv (RAY_VENV)
#   deploy/slurm-lab/ray-venv.sh ROOT   # the 24.11 lab: the same path inside its root filesystem ROOT (rootfs.sh)
#
# The lab's Slurm cluster is then given the option {"ray_setup": "source $RAY_VENV/bin/activate"}: the command
# each Ray job runs on its nodes to put `ray` and its Python on PATH (docs/jobs.md, "Ray jobs").
# ray[default] rather than bare ray: the dashboard (the job page's link) and `ray job submit` need it.
set -euo pipefail
RAY_VERSION=${RAY_VERSION:-2.60.0}
exec "$(dirname "$0")/lab-venv.sh" ray "$RAY_VERSION" "ray[default]==$RAY_VERSION" \
  "${RAY_VENV:-/var/cache/quartermaster/ray-venv}" "$@"
