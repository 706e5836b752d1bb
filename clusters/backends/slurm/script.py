"""The batch script Slurm runs for a ``JobSpec``: its script or command, in a container when it names an image.

Slurm runs no images itself. A cluster configured with a container runtime (``options["container_runtime"]``,
the names in ``RUNTIMES``) runs a job with an image through it:

- ``pyxis`` (NVIDIA's SPANK plugin, with enroot): ``srun --container-image=<image> <command>``, once per
  worker. A registry-qualified image is given as enroot spells it (``ghcr.io#acme/train:1.4``);
- ``apptainer``: ``apptainer exec docker://<image> <command>``, under ``srun`` when there are several workers.

A job's *script* with an image runs once, inside the container, as the batch script would on the host: it
is written to a file in the job's temporary directory, which both runtimes see (Pyxis is told to mount it).
A job with an image on a cluster without a runtime is ``InvalidJob``: its command is never run on the bare
host. A Ray job's script is ``ray.py``'s, an interactive session's ``session.py``'s, a service replica's
``service.py``'s. Pure; no I/O.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from clusters.backends.base import InvalidJob, JobSpec
from clusters.backends.slurm import ray, service, session

#: Container runtimes a Slurm cluster may be configured with (``options["container_runtime"]``).
RUNTIMES = ("pyxis", "apptainer")

#: Marks the end of a job's script in the here-document that writes it out; quoted, so nothing expands.
END_OF_SCRIPT = "QM_END_OF_JOB_SCRIPT"
#: Image references that already say where apptainer gets them.
APPTAINER_SCHEMES = ("docker://", "docker-archive:", "oras://", "library://", "shub://", "http://", "https://")


def batch_script(spec: JobSpec, options: Mapping[str, Any]) -> str:
    """The script to submit for ``spec`` on a Slurm cluster with ``options``."""
    if ray.is_ray(spec):
        return ray.script(spec, options)  # a Ray cluster over the allocation that runs the entrypoint
    if session.is_session(spec):
        return session.script(spec, options)  # JupyterLab on the node until idle, its address reported
    if service.is_service(spec):
        if spec.image:  # not on the bare host, as for any job with an image; a runtime for replicas is to come
            raise InvalidJob(f"service replica {spec.id} names an image; Slurm clusters run a replica's command only")
        return service.script(spec)  # its command on a port of the node until stopped, its address reported
    if not spec.script and not spec.command:
        raise InvalidJob(f"job {spec.id} has neither a script nor a command")
    if spec.image:
        return _in_container(spec, options)
    if spec.script:
        return spec.script if spec.script.startswith("#!") else "#!/bin/bash\n" + spec.script
    # several workers: srun starts the command once per task of the allocation
    launcher = "srun " if spec.workers > 1 else ""
    return f"#!/bin/bash\nexec {launcher}{shlex.join(spec.command)}\n"


def runtime(options: Mapping[str, Any]) -> str:
    """The cluster's container runtime; "" when none is configured."""
    return str(options.get("container_runtime") or "")


def _in_container(spec: JobSpec, options: Mapping[str, Any]) -> str:
    chosen = runtime(options)
    if not chosen:
        raise InvalidJob(
            f"job {spec.id} names image {spec.image}, and this Slurm cluster runs no containers (no container "
            "runtime is configured)"
        )
    if chosen not in RUNTIMES:
        raise InvalidJob(
            f"job {spec.id} names an image, and this cluster's container_runtime {chosen!r} is not one of "
            f"{', '.join(RUNTIMES)}"
        )
    lines = ["#!/bin/bash", "set -e"]
    if spec.script:
        # Written out, then run once in the container (not on the host, where the batch script itself runs).
        script = spec.script if spec.script.startswith("#!") else "#!/bin/bash\n" + spec.script
        if END_OF_SCRIPT in script:
            raise InvalidJob(f"job {spec.id}: its script contains {END_OF_SCRIPT}, which Quartermaster reserves")
        lines += [
            'QM_SCRIPT="$(mktemp "${TMPDIR:-/tmp}/qm-job-script.XXXXXX")"',
            f"cat > \"$QM_SCRIPT\" <<'{END_OF_SCRIPT}'",
            script.rstrip("\n"),
            END_OF_SCRIPT,
            'chmod +x "$QM_SCRIPT"',
        ]
        program, once = ['"$QM_SCRIPT"'], True
    else:
        program, once = [shlex.quote(word) for word in spec.command], spec.workers == 1
    if chosen == "pyxis":
        launch = ["srun", *(["--ntasks=1", "--nodes=1"] if spec.script else [])]
        launch.append(shlex.quote(f"--container-image={enroot_image(spec.image)}"))
        if spec.script:
            launch.append('--container-mounts="$QM_SCRIPT:$QM_SCRIPT"')
    else:
        binary = shlex.quote(str(options.get("apptainer") or "apptainer"))
        launch = ([] if once else ["srun"]) + [binary, "exec", shlex.quote(apptainer_image(spec.image))]
    lines.append(" ".join(["exec", *launch, *program]))
    return "\n".join(lines) + "\n"


def enroot_image(image: str) -> str:
    """An image reference as enroot reads it: the registry, when one is named, is followed by ``#``
    (``ghcr.io/acme/train:1.4`` -> ``ghcr.io#acme/train:1.4``; ``ubuntu:24.04`` stays). The first part of a
    reference is a registry when it has a dot or a port, or is ``localhost``, as Docker decides."""
    first, slash, rest = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost") and "#" not in image:
        return f"{first}#{rest}"
    return image


def apptainer_image(image: str) -> str:
    """An image reference as apptainer reads it: ``docker://`` unless it names its source or is a SIF file."""
    if image.startswith(APPTAINER_SCHEMES) or image.endswith(".sif") or image.startswith("/"):
        return image
    return f"docker://{image}"
