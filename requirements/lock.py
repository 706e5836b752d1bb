"""The lock files: exact versions, with hashes, of everything `make`, CI and the Dockerfile install.

`requirements/dev.txt` pins the project's dependencies with its `dev` extra, `requirements/runtime.txt` the
runtime ones alone, at the same versions (it is resolved under dev.txt as constraints). Both also pin the
build backend (pyproject.toml's `[build-system] requires`), so that the project itself is installed with
`--no-build-isolation` from a pinned setuptools. `requirements/pip.txt` pins the installer, installed first
(the pip a virtualenv starts with is whatever the Python came with). They are resolved for CPython 3.11 on
x86_64 Linux (manylinux 2.28, the glibc of Debian 10 onwards), whatever machine runs `make lock`.

    python requirements/lock.py --uv PATH   make them again from pyproject.toml's ranges (`make lock`; network),
                                            keeping the versions they pin where the ranges still admit them;
                                            --upgrade: the newest versions the ranges admit (`make lock-upgrade`)
    python requirements/lock.py --check     fail when pyproject.toml's dependencies changed since (offline)

Each lock's first line records a digest of its inputs (the requirement lists and the target above), so
`--check` needs neither uv nor the network: a changed, added or removed requirement changes the digest.
It also checks that each lock still satisfies pyproject.toml's ranges and that runtime.txt agrees with
dev.txt, which catches a lock edited by hand.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
RUNTIME = ROOT / "requirements" / "runtime.txt"
DEV = ROOT / "requirements" / "dev.txt"
PIP = ROOT / "requirements" / "pip.txt"

PYTHON_VERSION = "3.11"
PLATFORM = "x86_64-manylinux_2_28"
# The same target, as environment markers see it.
TARGET = {"python_version": PYTHON_VERSION, "sys_platform": "linux", "platform_machine": "x86_64"}
INPUTS_PREFIX = "# inputs: sha256:"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.MULTILINE)


def requirements(pyproject: dict[str, Any]) -> dict[str, list[str]]:
    """The requirement lists the locks are resolved from, by where pyproject.toml keeps them."""
    project, build = pyproject["project"], pyproject["build-system"]
    return {
        "dependencies": sorted(project.get("dependencies", [])),
        "dev": sorted(project.get("optional-dependencies", {}).get("dev", [])),
        "build": sorted(build.get("requires", [])),
    }


def digest(pyproject: dict[str, Any]) -> str:
    """Changes with any requirement or with the target: then the locks must be made again."""
    stated = {**requirements(pyproject), "python": PYTHON_VERSION, "platform": PLATFORM}
    return hashlib.sha256(json.dumps(stated, sort_keys=True).encode()).hexdigest()


def read_pyproject() -> dict[str, Any]:
    with PYPROJECT.open("rb") as f:
        return tomllib.load(f)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lock: Path) -> dict[str, str]:
    return {canonical(name): version for name, version in PIN.findall(lock.read_text())}


def compile_lock(uv: str, out: Path, sources: list[str], extra: list[str], what: str, options: list[str]) -> None:
    """Resolve `sources` (files) and the requirements `extra` (said to be `what`) into `out`."""
    with tempfile.NamedTemporaryFile("w", suffix=".in", prefix="lock-") as extra_in:
        extra_in.write("".join(f"{requirement}\n" for requirement in extra))
        extra_in.flush()
        command = [uv, "pip", "compile", *sources, extra_in.name, *options]
        command += ["--python-version", PYTHON_VERSION, "--python-platform", PLATFORM]
        # uv keeps the versions an existing output file pins, where the ranges still admit them.
        command += ["--generate-hashes", "--no-header", "--quiet", "--output-file", str(out.relative_to(ROOT))]
        subprocess.run(command, cwd=ROOT, check=True)  # noqa: S603 (the uv the Makefile names)
        body = out.read_text()
    # The temporary file's name would change at every run: name what it held instead.
    body = body.replace(f"-r {extra_in.name}", what)
    header = (
        f"{INPUTS_PREFIX}{digest(read_pyproject())}\n"
        "# Made by `make lock` (requirements/lock.py) from pyproject.toml: do not edit by hand.\n"
        f"# CPython {PYTHON_VERSION}, {PLATFORM}; install with `pip install --require-hashes -r`.\n"
    )
    out.write_text(header + body)


def make(uv: str, upgrade: bool) -> None:
    pyproject = read_pyproject()
    build, what = requirements(pyproject)["build"], "pyproject.toml [build-system] requires"
    upgrading = ["--upgrade"] if upgrade else []
    # dev first, unconstrained; runtime is then the same versions, restricted to what runtime needs.
    compile_lock(uv, DEV, ["pyproject.toml"], build, what, ["--extra", "dev", *upgrading])
    compile_lock(uv, RUNTIME, ["pyproject.toml"], build, what, ["--constraints", str(DEV.relative_to(ROOT))])
    compile_lock(uv, PIP, [], ["pip"], "make lock: the installer, installed first", upgrading)
    for lock in (DEV, RUNTIME, PIP):
        print(f"wrote {lock.relative_to(ROOT)}: {len(pins(lock))} pins")


def problems() -> list[str]:
    pyproject = read_pyproject()
    found = []
    for lock in (RUNTIME, DEV, PIP):
        if not lock.exists():
            found.append(f"{lock.relative_to(ROOT)} is missing")
            continue
        first = lock.read_text().partition("\n")[0]
        if first != f"{INPUTS_PREFIX}{digest(pyproject)}":
            found.append(f"{lock.relative_to(ROOT)} was made from other dependencies than pyproject.toml's")
    if found:
        return found
    if "pip" not in pins(PIP):
        found.append(f"{PIP.relative_to(ROOT)} does not pin pip")
    runtime, dev = pins(RUNTIME), pins(DEV)
    for name, version in runtime.items():
        if dev.get(name) != version:
            found.append(f"requirements/runtime.txt pins {name}=={version}, requirements/dev.txt {dev.get(name)}")
    # A lock edited by hand: each requirement must be pinned, at a version its range admits.
    listed = requirements(pyproject)
    for lock, names in ((RUNTIME, ("dependencies", "build")), (DEV, ("dependencies", "dev", "build"))):
        locked = pins(lock)
        for line in (line for name in names for line in listed[name]):
            requirement = Requirement(line)
            if requirement.marker is not None and not requirement.marker.evaluate(TARGET):
                continue
            pinned = locked.get(canonical(requirement.name))
            if pinned is None:
                found.append(f"{lock.relative_to(ROOT)} does not pin {requirement.name}")
            elif not requirement.specifier.contains(pinned, prereleases=True):
                found.append(f"{lock.relative_to(ROOT)} pins {requirement.name}=={pinned}, outside {line!r}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--uv", help="the uv to resolve with: regenerate both locks")
    group.add_argument("--check", action="store_true", help="fail when the locks are stale")
    parser.add_argument("--upgrade", action="store_true", help="with --uv: the newest versions, not the pinned ones")
    args = parser.parse_args()
    if args.uv:
        make(args.uv, args.upgrade)
        return 0
    found = problems()
    for problem in found:
        print(problem, file=sys.stderr)
    if found:
        print("run `make lock` and commit requirements/", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
