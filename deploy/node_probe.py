#!/usr/bin/env python3
"""Quartermaster node health probe: reads the GPUs through NVML and posts the readings to the portal.

Runs on each GPU node (as a systemd service, a DaemonSet or a Slurm prolog), with Python 3.9+ and
``nvidia-ml-py`` (``pip install nvidia-ml-py``); nothing else. Every ``--interval`` seconds it posts, for
every GPU: temperature, uncorrected ECC errors (volatile), the XID errors NVML reported since the last
report, and how many NVLink links are down; and how busy each GPU is: utilization (GPU and memory
controller, %), memory used and total (bytes), power draw and limit (W), SM and memory clocks (MHz) and
the clocks-event (throttle) reasons bitmask, each left out where the GPU does not support it. The portal
judges the readings (``clusters/actions/probe.py``), keeps the activity as per-minute samples, and
drains the node when they fail; this script only reads and reports. When NVML cannot be read (no driver,
a GPU fallen off the bus) it reports that, which fails the node's ``nvml`` check.

    QM_PROBE_TOKEN=qmp_... python3 node_probe.py --url https://qm.example.org [--node NAME] [--once]
    python3 node_probe.py --dump      # print one report as JSON, post nothing (no token needed)

The token is a cluster's probe token (``manage.py probe_token --cluster SLUG --name NAME``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from typing import Any

ENDPOINT = "/api/v1/probe/health/"


class Nvml:
    """The readings, through pynvml; XID errors collected from NVML's event set between reports."""

    def __init__(self) -> None:
        import pynvml  # imported here: the probe still reports (that NVML is missing) without it

        self.nvml: Any = pynvml
        pynvml.nvmlInit()
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        self.events = pynvml.nvmlEventSetCreate()
        for handle in self.handles:
            # Some GPUs (and vGPUs) cannot deliver XID events; the other readings still count.
            with contextlib.suppress(pynvml.NVMLError_NotSupported):
                pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, self.events)

    def xids(self) -> dict[int, list[int]]:
        """XID errors that arrived since the last call, per GPU index."""
        found: dict[int, list[int]] = {}
        index_of = {self.nvml.nvmlDeviceGetUUID(h): i for i, h in enumerate(self.handles)}
        while True:
            try:
                event = self.nvml.nvmlEventSetWait_v2(self.events, 0)
            except self.nvml.NVMLError_Timeout:
                return found
            uuid = self.nvml.nvmlDeviceGetUUID(event.device)
            found.setdefault(index_of.get(uuid, -1), []).append(int(event.eventData))

    def nvlink_down(self, handle: Any) -> int:
        down = 0
        for link in range(self.nvml.NVML_NVLINK_MAX_LINKS):
            try:
                if self.nvml.nvmlDeviceGetNvLinkState(handle, link) == self.nvml.NVML_FEATURE_DISABLED:
                    down += 1
            except self.nvml.NVMLError:
                break  # past the GPU's last link, or no NVLink at all
        return down

    def optional(self, read: Any, *args: Any) -> Any:
        """``read(*args)``, or None where this GPU (or driver) does not support it."""
        try:
            return read(*args)
        except (self.nvml.NVMLError, AttributeError):  # not supported, not permitted, unknown to old bindings
            return None

    def activity(self, handle: Any) -> dict[str, Any]:
        """How busy the GPU is; each reading absent where it is not supported."""
        nvml = self.nvml
        found: dict[str, Any] = {}
        rates = self.optional(nvml.nvmlDeviceGetUtilizationRates, handle)
        if rates is not None:
            found["utilization_gpu"] = int(rates.gpu)
            found["utilization_memory"] = int(rates.memory)
        memory = self.optional(nvml.nvmlDeviceGetMemoryInfo, handle)
        if memory is not None:
            found["memory_used_bytes"] = int(memory.used)
            found["memory_total_bytes"] = int(memory.total)
        power = self.optional(nvml.nvmlDeviceGetPowerUsage, handle)  # milliwatts
        if power is not None:
            found["power_w"] = round(power / 1000, 1)
        limit = self.optional(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        if limit is not None:
            found["power_limit_w"] = round(limit / 1000, 1)
        for key, clock in (("sm_clock_mhz", "NVML_CLOCK_SM"), ("memory_clock_mhz", "NVML_CLOCK_MEM")):
            mhz = self.optional(nvml.nvmlDeviceGetClockInfo, handle, getattr(nvml, clock))
            if mhz is not None:
                found[key] = int(mhz)
        # Newer bindings name them clocks-event reasons; older ones throttle reasons (the same bits).
        reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        bits = self.optional(reasons, handle) if reasons is not None else None
        if bits is not None:
            found["throttle_reasons"] = int(bits)
        return found

    def read(self) -> list[dict[str, Any]]:
        xids = self.xids()
        gpus = []
        for index, handle in enumerate(self.handles):
            try:
                ecc = self.nvml.nvmlDeviceGetTotalEccErrors(
                    handle, self.nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, self.nvml.NVML_VOLATILE_ECC
                )
            except self.nvml.NVMLError_NotSupported:
                ecc = 0  # ECC off or not reported (consumer GPUs)
            gpus.append(
                {
                    "index": index,
                    "uuid": self.nvml.nvmlDeviceGetUUID(handle),
                    "temperature_c": self.nvml.nvmlDeviceGetTemperature(handle, self.nvml.NVML_TEMPERATURE_GPU),
                    "ecc_uncorrected": int(ecc),
                    "xid_errors": xids.get(index, []),
                    "nvlink_links_down": self.nvlink_down(handle),
                    **self.activity(handle),
                }
            )
        return gpus


def report(node: str, reader: Nvml | None, error: str) -> dict[str, Any]:
    """One report; when NVML could not be opened or read, the error instead of the readings."""
    gpus: list[dict[str, Any]] = []
    if reader is not None and not error:
        try:
            gpus = reader.read()
        except Exception as failure:  # noqa: BLE001 - any NVML failure is itself the finding to report
            error = f"NVML read failed: {failure}"
    observed_at = datetime.now(timezone.utc).isoformat()  # noqa: UP017 - the probe runs on Python 3.9+
    return {"node": node, "observed_at": observed_at, "gpus": gpus, "error": error}


def post(url: str, token: str, body: dict[str, Any], timeout: float = 10.0) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(  # noqa: S310 - the URL is the operator's portal, http(s) only
        url.rstrip("/") + ENDPOINT,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310
            return answer.status, json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read() or b"{}")


def open_nvml() -> tuple[Nvml | None, str]:
    """NVML opened, or why not (no bindings, no driver): the probe reports that instead of readings."""
    try:
        return Nvml(), ""
    except Exception as failure:  # noqa: BLE001 - ImportError or any NVMLError: report it, keep running
        return None, f"NVML unavailable: {failure}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="The portal's base URL.")
    parser.add_argument("--node", default=socket.gethostname(), help="This node's name in its cluster.")
    parser.add_argument("--interval", type=float, default=30.0, help="Seconds between reports.")
    parser.add_argument("--once", action="store_true", help="Post one report and exit (0 if it was accepted).")
    parser.add_argument("--dump", action="store_true", help="Print one report as JSON and exit; post nothing.")
    args = parser.parse_args(argv)
    if args.dump:
        print(json.dumps(report(args.node, *open_nvml()), indent=1))
        return 0
    if not args.url or not args.url.startswith(("http://", "https://")):
        parser.error("--url must start with http:// or https://")
    token = os.environ.get("QM_PROBE_TOKEN", "")
    if not token:
        parser.error("set QM_PROBE_TOKEN to the cluster's probe token")
    reader, error = open_nvml()
    while True:
        try:
            status, answer = post(args.url, token, report(args.node, reader, error))
        except (OSError, ValueError) as failure:
            status, answer = 0, {"error": str(failure)}
        print(json.dumps({"status": status, **answer}), flush=True)
        if args.once:
            return 0 if status == 202 else 1
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
