"""What differs between the slurmrestd data parsers the backend speaks, and nothing else.

slurmrestd serves its API once per data parser it has, under ``/slurm/<parser>/``: Slurm 22.05 serves
``v0.0.36``-``v0.0.38``; 24.11 ``v0.0.40``-``v0.0.42``; 25.05 adds ``v0.0.43`` and 25.11 ``v0.0.44``. The
backend reads ``/openapi/v3`` (slurmrestd's own description of what it serves; it does not ask slurmctld)
and speaks the newest parser both sides know (``choose``). The backend works in the words of ``v0.0.38``;
this module turns the newer parsers' answers into them and its job descriptions into theirs. Pure; no I/O.

What changed from ``v0.0.38`` to ``v0.0.40`` and stayed the same up to ``v0.0.44`` (SchedMD/slurm,
``src/plugins/data_parser/v0.0.4x/parsers.c``, the ``NODE``, ``JOB_INFO``, ``JOB_DESC_MSG``,
``JOB_SUBMIT_REQ``, ``PROCESS_EXIT_CODE_VERBOSE``, ``KILL_JOBS_RESP_JOB`` and ``UPDATE_NODE_MSG`` parsers of
24.11, 25.05 and 25.11; ``segment_size`` is the one field of those that ``v0.0.40`` and ``v0.0.41`` lack):

- a node's ``state`` is a list of its base state and flags (``["IDLE", "DRAIN"]``), not a word and a
  separate ``state_flags``;
- a job's ``job_state`` is a list too (``["RUNNING", "COMPLETING"]``), and ``exit_code`` an object
  ``{"status": [...], "return_code": N, "signal": {"id": N, "name": ...}}`` instead of a wait status;
- numbers that may be unset or infinite are ``{"set": bool, "infinite": bool, "number": N}``;
- a submission is ``{"job": {..., "script": ...}}`` (the top-level ``script`` is deprecated since 24.05);
  ``environment`` is a list of ``NAME=value``; GPUs per task are ``tres_per_task`` (``gres/gpu:N``);
  the node list is ``required_nodes`` and the node count ``minimum_nodes``/``maximum_nodes``;
- ``POST /slurm/<parser>/node/{name}`` changes a node's state (22.05 has no such call).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: The data parsers the backend speaks, newest first.
SUPPORTED = ("v0.0.44", "v0.0.43", "v0.0.42", "v0.0.41", "v0.0.40", "v0.0.38")
LEGACY = "v0.0.38"

#: Node base states (one per node); the other words of a node's state list are flags.
NODE_BASE_STATES = ("UNKNOWN", "DOWN", "IDLE", "ALLOCATED", "ERROR", "MIXED", "FUTURE")
#: Job state flags in the order Slurm's ``job_state_string`` lets them stand for the state
#: (src/common/slurm_protocol_defs.c): 22.05's single word is the first flag set, else the base state.
JOB_STATE_FLAGS = (
    "COMPLETING",
    "STAGE_OUT",
    "CONFIGURING",
    "RESIZING",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "SPECIAL_EXIT",
    "STOPPED",
    "REVOKED",
    "RESV_DEL_HOLD",
    "SIGNALING",
)


def offered(openapi: Mapping[str, Any]) -> tuple[str, ...]:
    """The data parsers an ``/openapi/v3`` document serves the slurmctld API in (those with a ping)."""
    paths = openapi.get("paths")
    if not isinstance(paths, dict):
        return ()
    found = {path.split("/")[2] for path in paths if path.startswith("/slurm/") and path.rstrip("/").endswith("/ping")}
    return tuple(sorted(found, reverse=True))


def choose(served: Iterable[str]) -> str | None:
    """The newest data parser that both slurmrestd (``served``) and this backend speak; None if none."""
    served = set(served)
    return next((version for version in SUPPORTED if version in served), None)


def updates_nodes(openapi: Mapping[str, Any], version: str) -> bool:
    """Whether slurmrestd changes node states over REST in ``version`` (``POST node/{node_name}``)."""
    paths = openapi.get("paths")
    path = paths.get(f"/slurm/{version}/node/{{node_name}}") if isinstance(paths, dict) else None
    return isinstance(path, dict) and "post" in path


def number(value: Any) -> Any:
    """A number as ``v0.0.38`` gives it: ``{"set": true, "number": 5}`` -> 5; unset or infinite -> None.
    Anything else is returned as it is (the caller checks its type)."""
    if isinstance(value, dict) and "number" in value:
        if not value.get("set", True) or value.get("infinite"):
            return None
        return value["number"]
    return value


def node(version: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    """A node of ``GET nodes`` in ``v0.0.38``'s words: ``state`` a lower-case word plus ``state_flags``."""
    out = dict(raw)
    if version == LEGACY:
        return out
    states = raw.get("state")
    if isinstance(states, list):
        words = [word.upper() for word in states if isinstance(word, str)]
        base = next((word for word in words if word in NODE_BASE_STATES), "UNKNOWN")
        out["state"] = base.lower()
        out["state_flags"] = [word for word in words if word != base]
    for key in ("cpus", "alloc_cpus", "real_memory", "alloc_memory"):
        if key in out:
            out[key] = number(out[key])
    for key in ("features", "active_features"):  # a list there, a comma-separated string in v0.0.38
        if isinstance(raw.get(key), list):
            out[key] = ",".join(str(feature) for feature in raw[key])
    return out


def job(version: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    """A job of ``GET jobs`` in ``v0.0.38``'s words: ``job_state`` one word, ``exit_code`` a wait status."""
    out = dict(raw)
    if version == LEGACY:
        return out
    out["job_state"] = job_state_word(raw.get("job_state"))
    out["exit_code"] = wait_status(raw.get("exit_code"))
    out["job_id"] = number(raw.get("job_id"))
    return out


def job_state_word(states: Any) -> Any:
    """``["RUNNING", "COMPLETING"]`` -> ``"COMPLETING"``, as Slurm's ``job_state_string`` words it."""
    if not isinstance(states, list):
        return states
    words = [word.upper() for word in states if isinstance(word, str)]
    flag = next((word for word in JOB_STATE_FLAGS if word in words), None)
    return flag or next((word for word in words if word not in JOB_STATE_FLAGS), "")


def wait_status(exit_code: Any) -> int | None:
    """A ``PROCESS_EXIT_CODE_VERBOSE`` object as a wait status (exit code << 8, or the killing signal);
    None while the job has none (status ``PENDING`` or ``INVALID``, nothing set)."""
    if not isinstance(exit_code, dict):
        return exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None
    signal = exit_code.get("signal")
    signal_id = number(signal.get("id")) if isinstance(signal, dict) else None
    if isinstance(signal_id, int) and signal_id > 0:
        return signal_id & 0x7F
    code = number(exit_code.get("return_code"))
    return (code & 0xFF) << 8 if isinstance(code, int) else None


def errors(version: str, data: Mapping[str, Any]) -> list[Any]:
    """The errors of an answer: ``errors``, and in ``v0.0.40`` and later also those of each job in the
    ``status`` list ``DELETE job/{id}`` answers (HTTP 200 and no ``errors`` for a job Slurm does not know:
    ``{"status": [{"error": {"code": 2017, "string": "Invalid job id specified"}, ...}]}``)."""
    found = data.get("errors", [])
    if version == LEGACY or not isinstance(found, list) or not isinstance(data.get("status"), list):
        return found  # type: ignore[no-any-return]
    found = list(found)
    for status in data["status"]:
        error = status.get("error") if isinstance(status, dict) else None
        if isinstance(error, dict) and error.get("code"):
            found.append({"error_number": error["code"], "error": error.get("string") or error.get("message", "")})
    return found


def submit_body(version: str, script: str, props: Mapping[str, Any]) -> dict[str, Any]:
    """The body of ``POST job/submit`` for a job described in ``v0.0.38``'s words (sbatch's long options)."""
    if version == LEGACY:
        return {"script": script, "job": dict(props)}
    job: dict[str, Any] = {}
    for key, value in props.items():
        if key == "environment":
            job[key] = [f"{name}={text}" for name, text in value.items()]
        elif key == "gpus_per_task":
            job["tres_per_task"] = f"gres/gpu:{value}"
        elif key == "nodes":
            job["minimum_nodes"], job["maximum_nodes"] = value
        elif key == "nodelist":
            job["required_nodes"] = value.split(",")
        elif key in ("time_limit", "memory_per_cpu"):
            job[key] = {"set": True, "infinite": False, "number": value}
        else:
            job[key] = value
    job["script"] = script
    return {"job": job}


def node_update(action: str, reason: str) -> dict[str, Any]:
    """The body of ``POST node/{name}`` (``v0.0.40`` and later) that drains a node, resumes it, or powers it up or
    down (``power_up``, ``power_down``: Slurm's power saving)."""
    if action == "resume":
        return {"state": ["RESUME"]}
    if action in POWER:
        return {"state": [POWER[action]]}
    return {"state": ["DRAIN"], "reason": reason}


#: Power saving's node states, as ``scontrol update State=`` and ``POST node/{name}`` both spell them.
POWER = {"power_up": "POWER_UP", "power_down": "POWER_DOWN"}
