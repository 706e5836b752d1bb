"""What a service replica on the simulated cluster may see of the Quartermaster host: its own working directory,
the system, the network, and nothing of the portal's.

A replica runs a team's program on the machine the portal runs on. Unconfined, it ran as the portal's user and
read the portal's secret key, its database and its environment, and so every organization's data. It is
started inside namespaces of its own (util-linux's ``unshare``, on every Debian):

- **a mount namespace** in which the portal's ``QM_VAR_DIR`` (database file, secret key, broker, cache,
  artifacts) and the replica root (the other replicas' scripts, which hold their job tokens) are covered by
  empty file systems, the replica's own directory mounted back in its place, and each file a ``*_FILE``
  setting names (container secrets) covered by ``/dev/null``;
- **a PID namespace** with its own ``/proc``: the portal's processes, and their environments, are not there;
- **an unprivileged user**: where the portal runs as root, the program runs as ``SIMULATED_RUN_AS`` (``nobody``)
  with no capabilities and ``no_new_privs``; elsewhere inside a user namespace whose root is the portal's user
  and holds no power outside it;
- **an environment of its own**: a few harmless variables and the job's (``replicas.INHERITED``).

Where none of this can be made (no ``unshare``, user namespaces turned off for non-root users), a replica is
refused with the reason: the simulated cluster never runs a tenant's program unconfined. What a replica can
still read is what any local user can: the system's files, and the portal's code (which holds no secret) —
keep the portal's own credentials in its environment, ``QM_VAR_DIR`` or ``*_FILE`` files, and, where the
portal does not run as root, none in its user's home directory.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from django.conf import settings

#: Run inside the namespaces: hide what the replica must not see, then become the replica's supervisor.
#: Arguments: the working directory, the replica root, QM_VAR_DIR, then the secret files to cover.
ISOLATE = """set -eu
work=$1 root=$2 var=$3; shift 3
stash=$(mktemp -d)
mount --bind "$work" "$stash"
mount -t tmpfs -o mode=0755,size=64k qm-replicas "$root"
mkdir -p "$work"
mount --bind "$stash" "$work"
umount "$stash"
rmdir "$stash"
if [ -d "$var" ]; then mount -t tmpfs -o mode=0755,size=64k qm-var "$var"; fi
for secret in "$@"; do if [ -f "$secret" ]; then mount --bind /dev/null "$secret"; fi; done
cd "$work"
"""


class Unavailable(Exception):
    """This machine cannot run a replica isolated from the portal; the message says why."""


def _as_root() -> bool:
    return os.geteuid() == 0


def _namespaces() -> list[str]:
    user = [] if _as_root() else ["--user", "--map-root-user"]
    return ["unshare", *user, "--mount", "--pid", "--fork", "--mount-proc", "--propagation", "private"]


def _run_as() -> tuple[int, int]:
    uid, _, gid = str(settings.SIMULATED_RUN_AS).partition(":")
    return int(uid), int(gid or uid)


def _become() -> str:
    """The last line of the script: the supervisor, as the replica's user where the portal is root."""
    if not _as_root():
        return "exec /bin/sh ./supervise.sh\n"
    uid, gid = _run_as()
    return (
        f"exec setpriv --reuid={uid} --regid={gid} --clear-groups --inh-caps=-all --bounding-set=-all "
        "--no-new-privs /bin/sh ./supervise.sh\n"
    )


def _secret_files() -> list[str]:
    """The files the portal's ``*_FILE`` settings name (``portal/env.py``): its container secrets."""
    return sorted({value for name, value in os.environ.items() if name.endswith("_FILE") and value.startswith("/")})


@functools.cache
def check() -> None:
    """Raise ``Unavailable`` unless a replica can be isolated here (tried once per process)."""
    if shutil.which("unshare") is None or (_as_root() and shutil.which("setpriv") is None):
        raise Unavailable("util-linux's unshare and setpriv are not installed")
    with tempfile.TemporaryDirectory(prefix="qm-sandbox-check-") as scratch:
        inner = Path(scratch) / "inner"
        inner.mkdir()
        (inner / "supervise.sh").write_text("exit 0\n", encoding="utf-8")
        if _as_root():
            uid, gid = _run_as()
            os.chown(inner, uid, gid)
        try:
            subprocess.run(  # noqa: S603 - the argv is made here
                [*_namespaces(), "--", "/bin/sh", "-c", ISOLATE + _become(), "isolate", str(inner), scratch, "-"],
                capture_output=True,
                timeout=10,
                check=True,
            )
        except (OSError, subprocess.SubprocessError) as error:
            detail = getattr(error, "stderr", b"") or b""
            raise Unavailable(
                "it cannot make the namespaces that keep a replica from the portal's files "
                f"({detail.decode(errors='replace').strip() or error}): run the portal as root, or allow "
                "unprivileged user namespaces"
            ) from None


def command(workdir: Path, root: Path) -> list[str]:
    """The argv that starts the replica's supervisor (``supervise.sh`` in ``workdir``) isolated."""
    if _as_root():
        uid, gid = _run_as()
        os.chown(workdir, uid, gid)
        for name in os.listdir(workdir):
            os.chown(workdir / name, uid, gid)
    var = str(Path(settings.VAR_DIR).resolve())
    script = ISOLATE + _become()
    return [*_namespaces(), "--", "/bin/sh", "-c", script, "isolate", str(workdir), str(root), var, *_secret_files()]
