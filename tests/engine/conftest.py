"""Hypothesis profiles for the engine's property tests, and a small Philly trace for the replay commands.

``pytest tests/engine`` runs each property on 150 examples; ``pytest tests/engine --hypothesis-profile=ci``
runs 1,000. The engine tests need no database.
"""

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


PHILLY = "timestamp,duration,num_gpus,gpu_time,cluster\n"


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    """Three hours of virtual cluster vc1 (4 nodes): a job every 3 minutes of 1, 1, 2 or 8 GPUs, and one job of
    another virtual cluster."""
    rows = [
        f"2017-10-01 {h:02d}:{m:02d}:00,{600 + 97 * (h * 60 + m) % 5000},{(1, 1, 2, 8)[m % 4]},0,vc1\n"
        for h in range(3)
        for m in range(0, 60, 3)
    ]
    (tmp_path / "philly_vc_node_count.csv").write_text("vc,node num\nvc1,4\n")
    path = tmp_path / "philly.csv"
    path.write_text(PHILLY + "".join(rows) + "2017-10-01 00:00:00,10,1,10,other\n")
    return path
