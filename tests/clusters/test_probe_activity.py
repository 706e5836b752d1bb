"""The probe's activity readings (utilization, memory, power, clocks, throttle reasons): read through NVML
(a fake ``pynvml`` module, since NVML cannot run here), absent where unsupported, printed by ``--dump``;
accepted, validated and kept as per-minute samples by the server; pruned after ``GPU_SAMPLE_DAYS``."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from clusters import tasks
from clusters.actions.probe import throttle_names
from clusters.models import Cluster, GpuSample, Node
from tests.clusters import test_probe

# The probe tests' fixtures: a simulated cluster whose nodes may report now, and a client with its probe token.
cluster = test_probe.cluster
client = test_probe.client

ROOT = Path(__file__).resolve().parents[2]

#: A stand-in for nvidia-ml-py with two GPUs: GPU 0 supports everything (new bindings); GPU 1 reports no
#: power or clocks (NotSupported), and ``OLD_BINDINGS`` removes the clocks-event call (older bindings).
FAKE_PYNVML = textwrap.dedent(
    """
    import os
    from types import SimpleNamespace
    class NVMLError(Exception): pass
    class NVMLError_NotSupported(NVMLError): pass
    class NVMLError_Timeout(NVMLError): pass
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1; NVML_VOLATILE_ECC = 0; NVML_TEMPERATURE_GPU = 0
    NVML_NVLINK_MAX_LINKS = 2; NVML_FEATURE_DISABLED = 0; NVML_CLOCK_SM = 1; NVML_CLOCK_MEM = 2
    nvmlEventTypeXidCriticalError = 8
    def nvmlInit(): pass
    def nvmlDeviceGetCount(): return 2
    def nvmlDeviceGetHandleByIndex(i): return i
    def nvmlEventSetCreate(): return object()
    def nvmlDeviceRegisterEvents(h, kind, events): pass
    def nvmlEventSetWait_v2(events, timeout): raise NVMLError_Timeout()
    def nvmlDeviceGetUUID(h): return f"GPU-fake-{h}"
    def nvmlDeviceGetTotalEccErrors(h, kind, counter): return 0
    def nvmlDeviceGetTemperature(h, sensor): return 41 + h
    def nvmlDeviceGetNvLinkState(h, link): raise NVMLError_NotSupported()
    def nvmlDeviceGetUtilizationRates(h): return SimpleNamespace(gpu=97 - h, memory=31)
    def nvmlDeviceGetMemoryInfo(h): return SimpleNamespace(used=2**34, total=85520809984, free=0)
    def _only_gpu0(value):
        def read(h, *args):
            if h:
                raise NVMLError_NotSupported()
            return value
        return read
    nvmlDeviceGetPowerUsage = _only_gpu0(682200)
    nvmlDeviceGetEnforcedPowerLimit = _only_gpu0(700000)
    def nvmlDeviceGetClockInfo(h, clock):
        if h:
            raise NVMLError_NotSupported()
        return 1980 if clock == NVML_CLOCK_SM else 2619
    def nvmlDeviceGetCurrentClocksThrottleReasons(h): return 0x40
    if not os.environ.get("OLD_BINDINGS"):
        def nvmlDeviceGetCurrentClocksEventReasons(h): return 0x4
    """
)


@pytest.fixture
def fake_nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "pynvml.py").write_text(FAKE_PYNVML)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("pynvml", None)
    return tmp_path


def load_probe() -> Any:
    sys.path.insert(0, str(ROOT / "deploy"))
    try:
        return importlib.import_module("node_probe")
    finally:
        sys.path.remove(str(ROOT / "deploy"))


def test_the_probe_reads_each_gpus_activity_and_leaves_out_what_is_not_supported(fake_nvml: Path) -> None:
    gpus = load_probe().Nvml().read()
    assert gpus[0] == {
        "index": 0,
        "uuid": "GPU-fake-0",
        "temperature_c": 41,
        "ecc_uncorrected": 0,
        "xid_errors": [],
        "nvlink_links_down": 0,
        "utilization_gpu": 97,
        "utilization_memory": 31,
        "memory_used_bytes": 2**34,
        "memory_total_bytes": 85520809984,
        "power_w": 682.2,
        "power_limit_w": 700.0,
        "sm_clock_mhz": 1980,
        "memory_clock_mhz": 2619,
        "throttle_reasons": 0x4,
    }
    assert set(gpus[1]) - set(gpus[0]) == set()
    assert not {"power_w", "power_limit_w", "sm_clock_mhz", "memory_clock_mhz"} & set(gpus[1])
    assert gpus[1]["utilization_gpu"] == 96


def test_older_bindings_give_the_throttle_reasons_under_their_old_name(
    fake_nvml: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OLD_BINDINGS", "1")
    assert load_probe().Nvml().read()[0]["throttle_reasons"] == 0x40


def test_dump_prints_one_report_and_posts_nothing(fake_nvml: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "node_probe.py"), "--dump", "--node", "gpu-7"],
        env={**os.environ, "PYTHONPATH": str(fake_nvml), "QM_PROBE_TOKEN": ""},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["node"] == "gpu-7"
    assert report["error"] == ""
    assert [g["utilization_gpu"] for g in report["gpus"]] == [97, 96]


def recorded(which: str) -> dict[str, Any]:
    return dict(json.loads((ROOT / "tests/clusters/data/probe-h100-activity.json").read_text())[which])


def test_a_real_h100s_readings_under_load_are_kept_as_a_sample(client: APIClient, cluster: Cluster) -> None:
    node = Node.objects.filter(cluster=cluster).order_by("name").first()
    assert node is not None
    Node.objects.filter(pk=node.pk).update(accelerators=1)
    body = {**recorded("busy"), "node": node.name, "observed_at": timezone.now().isoformat()}
    answer = client.post("/api/v1/probe/health/", body, format="json")
    assert answer.status_code == 202, answer.content
    assert answer.json()["failing"] == []
    sample = GpuSample.objects.get(node=node)
    assert (sample.gpu, sample.utilization, sample.power_w, sample.sm_clock_mhz) == (0, 99.0, 682.2, 1980.0)
    assert (sample.memory_used, sample.memory_total, sample.throttle_reasons) == (1697447936, 85520809984, 0)
    assert sample.at.second == 0
    assert sample.at.microsecond == 0
    assert sample.readings == 1


def test_an_old_probes_report_is_accepted_and_writes_no_sample(client: APIClient, cluster: Cluster) -> None:
    old = json.loads((ROOT / "tests/clusters/data/probe-h200.json").read_text())["report"]
    node = Node.objects.filter(cluster=cluster).order_by("name").first()
    assert node is not None
    body = {**old, "node": node.name, "observed_at": timezone.now().isoformat()}
    assert client.post("/api/v1/probe/health/", body, format="json").status_code == 202
    assert not GpuSample.objects.exists()


@pytest.mark.parametrize(
    "change",
    [
        {"utilization_gpu": 101},
        {"utilization_memory": -1},
        {"power_w": "lots"},
        {"memory_used_bytes": 2**40, "memory_total_bytes": 2**30},
        {"throttle_reasons": 2**64},
        {"sm_clock_mhz": 1.5},
    ],
)
def test_bad_activity_readings_are_a_400_naming_gpus(
    client: APIClient, cluster: Cluster, change: dict[str, Any]
) -> None:
    node = Node.objects.filter(cluster=cluster).order_by("name").first()
    assert node is not None
    gpu = {**recorded("busy")["gpus"][0], **change}
    body = {"node": node.name, "observed_at": timezone.now().isoformat(), "gpus": [gpu]}
    answer = client.post("/api/v1/probe/health/", body, format="json")
    assert answer.status_code == 400
    assert "gpus" in answer.json()["error"]["fields"]
    assert not GpuSample.objects.exists()


def test_samples_older_than_the_retention_are_pruned(cluster: Cluster, settings: Any) -> None:
    settings.GPU_SAMPLE_DAYS = 30
    node = Node.objects.filter(cluster=cluster).order_by("name")[0]
    now = timezone.now().replace(second=0, microsecond=0)
    for days in (45, 31, 29, 0):
        GpuSample.objects.create(node=node, gpu=0, at=now - timedelta(days=days), utilization=50)
    assert tasks.prune_gpu_samples() == 2
    assert sorted((now - s.at).days for s in GpuSample.objects.all()) == [0, 29]


def test_the_probes_own_dump_from_a_real_h100_at_its_power_cap(client: APIClient, cluster: Cluster) -> None:
    """``node_probe.py --dump`` run on an H100 (tests/clusters/data/probe-h100-dump.json): idle, then under a
    matmul loop at the 700 W cap, where NVML says the clocks are held down by the software power cap."""
    dumps = json.loads((ROOT / "tests/clusters/data/probe-h100-dump.json").read_text())
    nodes = list(Node.objects.filter(cluster=cluster).order_by("name")[:2])
    Node.objects.filter(pk__in=[n.pk for n in nodes]).update(accelerators=1)
    for which, node in zip(("idle", "busy"), nodes, strict=True):
        body = {**dumps[which], "node": node.name, "observed_at": timezone.now().isoformat()}
        answer = client.post("/api/v1/probe/health/", body, format="json")
        assert answer.status_code == 202, answer.content
        assert answer.json()["failing"] == []
    idle, busy = (GpuSample.objects.get(node=node) for node in nodes)
    assert (idle.utilization, idle.sm_clock_mhz, idle.power_w) == (0.0, 345.0, 82.0)
    assert (busy.utilization, busy.sm_clock_mhz, busy.power_w, busy.power_limit_w) == (100.0, 1395.0, 700.3, 700.0)
    assert throttle_names(idle.throttle_reasons) == ["gpu_idle"]
    assert throttle_names(busy.throttle_reasons) == ["sw_power_cap"]
