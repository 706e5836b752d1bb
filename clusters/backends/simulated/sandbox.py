"""What a service replica on the simulated cluster may see of the Quartermaster host: its own working directory,
the system, the portal's code and Python, the network, and nothing of the portal's data or secrets.

A replica runs a team's program on the machine the portal runs on. Unconfined, it ran as the portal's user and
read the portal's secret key, its database and its environment, and so every organization's data. It is
started inside namespaces of its own (util-linux's ``unshare``, on every Debian):

- **a mount namespace** in which empty file systems cover the portal user's home directory (where credentials
  of every kind live: ``.pgpass``, cloud keys), the replica root (the other replicas' scripts hold their job
  tokens) and ``QM_VAR_DIR`` (database file, secret key, broker, cache, artifacts); ``/dev/null`` covers each
  file a ``*_FILE`` setting names (container secrets). Mounted back, read-only, where they were: the replica's
  own directory (writable), and the portal's code and Python installation when they sit in the home directory
  (a demo's replica runs ``deploy/model_server.py`` with the portal's interpreter);
- **a PID namespace** with its own ``/proc``: the portal's processes, and their environments, are not there;
- **an unprivileged user**: where the portal runs as root, the program runs as ``SIMULATED_RUN_AS`` (``nobody``)
  with no capabilities and ``no_new_privs``; elsewhere inside a user namespace whose root is the portal's user
  and holds no power outside it;
- **an environment of its own**: a few harmless variables and the job's (``replicas.INHERITED``).

Where this cannot be made (no ``unshare``, user namespaces turned off for non-root users), a replica is refused
with the reason: the simulated cluster never runs a tenant's program unconfined. The check runs the same
isolation once per process. What a replica can still read is what any local user can (the system's files).
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from django.conf import settings

#: Empty file systems put over a covered directory: small, as nothing is meant to be written there.
COVER = "mount -t tmpfs -o mode=0755,size=64k qm-cover"


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


def _within(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def script(workdir: Path, root: Path) -> str:
    """The shell script run inside the namespaces: cover, mount back, then become the replica's supervisor."""
    home = Path(os.path.expanduser("~")).resolve()
    every_replica = Path(settings.SIMULATED_REPLICA_ROOT).resolve()
    outer = sorted({p for p in (home, every_replica, root.resolve()) if p != Path("/") and p.is_dir()})
    outer = [p for p in outer if not _within(p, [o for o in outer if o != p])]  # not one inside another
    # What must stay visible under a covered directory: the replica's own (writable), the portal's code and Python.
    code = [Path(settings.BASE_DIR).resolve(), Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()]
    shown = sorted({p for p in code if p.is_dir() and _within(p, outer)})
    shown = [p for p in shown if not _within(p, [q for q in shown if q != p])]  # not one inside another
    kept = [workdir, *shown]
    secrets = sorted({v for k, v in os.environ.items() if k.endswith("_FILE") and v.startswith("/")})
    q = shlex.quote
    lines = ["set -eu", "stash=$(mktemp -d /tmp/qm-isolate.XXXXXX)"]
    for n, path in enumerate(kept):
        lines += [f'mkdir "$stash/{n}"', f'mount --bind {q(str(path))} "$stash/{n}"']
    lines += [f"{COVER} {q(str(path))}" for path in outer]
    for n, path in enumerate(kept):
        lines += [f"mkdir -p {q(str(path))}", f'mount --bind "$stash/{n}" {q(str(path))}', f'umount "$stash/{n}"']
        if n:
            lines.append(f"mount -o remount,bind,ro {q(str(path))}")
    lines.append('rm -r "$stash"')
    var = Path(settings.VAR_DIR).resolve()  # after the code is back: it may sit inside it
    lines.append(f"if [ -d {q(str(var))} ]; then {COVER} {q(str(var))}; fi")
    lines += [f"if [ -f {q(s)} ]; then mount --bind /dev/null {q(s)}; fi" for s in secrets]
    lines.append(f"cd {q(str(workdir))}")
    if _as_root():
        uid, gid = _run_as()
        lines.append(
            f"exec setpriv --reuid={uid} --regid={gid} --clear-groups --inh-caps=-all --bounding-set=-all "
            "--no-new-privs /bin/sh ./supervise.sh"
        )
    else:
        lines.append("exec /bin/sh ./supervise.sh")
    return "\n".join(lines) + "\n"


def command(workdir: Path, root: Path) -> list[str]:
    """The argv that starts the replica's supervisor (``supervise.sh`` in ``workdir``, under ``root``) isolated;
    where the portal is root, ``workdir`` becomes the replica's user's. ``Unavailable`` when that user could not
    reach its directory (a directory above the replica root that others may not pass through)."""
    if _as_root():
        uid, gid = _run_as()
        covered = Path(settings.SIMULATED_REPLICA_ROOT).resolve()
        if not _within(workdir.resolve(), [covered]):
            covered = root.resolve()
        closed = [p for p in covered.parents if not os.stat(p).st_mode & 0o001]
        if closed:
            raise Unavailable(
                f"the replica's user ({uid}) cannot pass through {closed[0]} to its directory: put "
                "SIMULATED_REPLICA_ROOT where others may pass (the default is in the temporary directory)"
            )
        for path in (workdir, *workdir.iterdir()):
            os.chown(path, uid, gid)
    return [*_namespaces(), "--", "/bin/sh", "-c", script(workdir, root)]


@functools.cache
def check() -> None:
    """Raise ``Unavailable`` unless a replica can be isolated here: the same isolation, once per process."""
    if shutil.which("unshare") is None or (_as_root() and shutil.which("setpriv") is None):
        raise Unavailable("util-linux's unshare and setpriv are not installed")
    with tempfile.TemporaryDirectory(prefix="qm-sandbox-check-") as scratch:
        workdir = Path(scratch) / "replica"
        workdir.mkdir()
        (workdir / "supervise.sh").write_text("exit 0\n", encoding="utf-8")
        try:
            subprocess.run(  # noqa: S603 - the argv is made here
                command(workdir, Path(scratch)), capture_output=True, timeout=10, check=True
            )
        except (OSError, subprocess.SubprocessError) as error:
            detail = getattr(error, "stderr", b"") or b""
            raise Unavailable(
                "it cannot make the namespaces that keep a replica from the portal's files "
                f"({detail.decode(errors='replace').strip() or error}): run the portal as root, or allow "
                "unprivileged user namespaces"
            ) from None
