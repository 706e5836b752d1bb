#!/usr/bin/env bash
# JupyterLab for the Slurm labs' interactive sessions: a virtual environment of its own with a pinned
# JupyterLab from PyPI, built once and kept (lab-venv.sh says how).
#
#   deploy/slurm-lab/jupyter-venv.sh        # the 22.05 lab (host): /var/cache/quartermaster/jupyter-venv
#   deploy/slurm-lab/jupyter-venv.sh ROOT   # the 24.11 lab: the same path inside its root filesystem ROOT
#
# The lab's Slurm cluster is then given the option {"session_setup": "source $JUPYTER_VENV/bin/activate"}: the
# command each session runs on its node to put `jupyter` on PATH (docs/jobs.md, "Interactive sessions").
set -euo pipefail
JUPYTERLAB_VERSION=${JUPYTERLAB_VERSION:-4.4.10}
exec "$(dirname "$0")/lab-venv.sh" jupyterlab "$JUPYTERLAB_VERSION" "jupyterlab==$JUPYTERLAB_VERSION" \
  "${JUPYTER_VENV:-/var/cache/quartermaster/jupyter-venv}" "$@"
