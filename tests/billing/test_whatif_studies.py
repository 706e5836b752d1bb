"""What-if studies: buy against burst, each scenario and seed a what-if of its own (a task each, so workers run
them at once), compared side by side with prices; bursts replay an elastic pool; seeds resample the history."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from billing import whatif_replay
from billing.actions import studies, whatif
from billing.models import WhatIf, WhatIfStudy
from clusters.models import ElasticPool
from scheduler.simulation.events import SimJob
from tenancy.models import AuditLog
from tests.billing import whatif_history as h
from tests.billing.test_whatif import _price
from tests.conftest import World
from tests.scheduler.pools import burst_pool, four_an_hour

pytestmark = pytest.mark.django_db


@pytest.fixture
def crowded(world: World) -> ElasticPool:
    """Two 8-H100 nodes at 2.50 an accelerator-hour, twice the work they can do, and a pool of three more at 4.00."""
    cluster, flavor = h.cluster(world.org, nodes=2)
    _price(world, cluster, flavor, "2.5000")
    h.crowded(world.teams["vision"], world.users["alice"], cluster)
    pool = burst_pool(cluster)
    four_an_hour(pool)
    return pool


def run_all(study: WhatIfStudy) -> None:
    for pk in study.what_ifs.values_list("pk", flat=True):
        assert whatif.run(pk) == "done"


def test_a_study_compares_buying_with_bursting_with_prices(world: World, crowded: ElasticPool) -> None:
    scenarios: list[dict[str, Any]] = [
        {"cluster": "gpu", "flavor": h.H100, "nodes": 2},
        {"kind": "burst", "pool": "burst", "nodes": 3},
    ]
    study = studies.submit_study(
        world.users["paula"], world.org, name="buy or burst", days=3, seeds=2, scenarios=scenarios
    )
    made = list(study.what_ifs.order_by("position", "seed").values_list("position", "seed", "kind"))
    assert made == [(0, 0, "nodes"), (0, 1, "nodes"), (1, 0, "burst"), (1, 1, "burst")]
    assert AuditLog.objects.get(action="what_if_study.requested").changes["scenarios"] == 2
    assert not studies.study_table(study)["complete"]
    run_all(study)
    table = studies.study_table(study)
    assert table["complete"]
    assert table["currency"] == "USD"
    today, buy, burst = table["rows"]
    assert today["label"] == "Today's fleet"
    assert buy["label"] == "Buy 2 H100-SXM-80GB nodes in gpu"
    assert burst["label"] == "Burst into burst (up to 3 nodes, on_demand)"
    assert (buy["seeds_done"], burst["seeds_done"]) == (2, 2)
    assert Decimal(buy["extra_cost"]) == Decimal("2880.00")  # 16 accelerators at 2.50 for three days, every seed
    # The pool's nodes cost only while up (at 4.00), and take the queue down as buying does.
    assert Decimal(burst["extra_cost"]) > 0
    assert burst["mean_wait_s"] < today["mean_wait_s"]
    assert buy["mean_wait_s"] < today["mean_wait_s"]
    for row in (buy, burst):
        assert row["wait_hours_saved"] > 0
        assert Decimal(row["cost_per_wait_hour_saved"]) > 0
    # Each what-if is the product's own: its page, its task, its result.
    burst_run = study.what_ifs.get(position=1, seed=0)
    assert burst_run.result["change"] == {"cluster": "gpu", "flavor": h.H100, "nodes": 3, "pool": "burst",
                                          "max_nodes": 3, "spot": False}  # fmt: skip
    assert Decimal(burst_run.result["changed"]["burst_cost"]) > 0


def test_a_seed_resamples_the_days_of_the_history(world: World, crowded: ElasticPool) -> None:
    study = studies.submit_study(
        world.users["fiona"],
        world.org,
        name="seeds",
        days=3,
        seeds=3,
        scenarios=[{"cluster": "gpu", "flavor": h.H100, "nodes": 1}],
    )
    run_all(study)
    results = [w.result for w in study.what_ifs.order_by("seed")]
    assert [r["seed"] for r in results] == [0, 1, 2]
    # Another draw of the days: other figures, the same size of history a day on average.
    assert len({r["today"]["mean_wait_s"] for r in results}) > 1
    workload = whatif_replay.Workload([], [], 0, 0, [])
    jobs = [
        SimJob("7", submitted=100.0, duration=60.0),
        SimJob("8", submitted=90_000.0, duration=60.0),
    ]
    drawn = whatif_replay.resample(whatif_replay.Workload(jobs, [], 0, 0, []), 2, seed=5).jobs
    assert all("." in j.id for j in drawn)
    assert all(0 <= j.submitted < 2 * 86400 for j in drawn)
    assert whatif_replay.resample(workload, 2, seed=0) is workload


@pytest.mark.parametrize(
    ("scenarios", "fields"),
    [
        ([], {"scenarios"}),
        ([{"cluster": "gpu", "flavor": h.H100, "nodes": 0}], {"scenarios[0].nodes"}),
        (
            [{"cluster": "gpu", "flavor": h.H100, "nodes": 1}, {"kind": "burst", "pool": "nowhere"}],
            {"scenarios[1].pool"},
        ),
        ([{"kind": "burst", "pool": "burst", "nodes": 9}], {"scenarios[0].nodes"}),  # the pool grows to 3
        ([{"kind": "burst", "pool": "burst", "lead_days": 3}], {"scenarios[0].lead_days"}),
        ([{"cluster": "gpu", "flavor": h.H100, "nodes": 1, "days": 4}], {"scenarios[0].days"}),
        (["buy"], {"scenarios[0]"}),
    ],
)
def test_a_bad_study_names_each_scenarios_field_and_writes_nothing(
    world: World, crowded: ElasticPool, scenarios: list[Any], fields: set[str]
) -> None:
    with pytest.raises(ValidationError) as raised:
        studies.submit_study(world.users["paula"], world.org, name="bad", days=3, scenarios=scenarios)
    assert set(raised.value.message_dict) == fields
    assert not WhatIfStudy.objects.exists()
    assert not WhatIf.objects.exists()


def test_the_form_reads_one_option_a_line_and_names_the_line_of_a_mistake(world: World, crowded: ElasticPool) -> None:
    found, lines, errors = studies.scenarios_of(
        "buy 2 H100-SXM-80GB in gpu after 1 day\n\n# a comment\nburst burst up to 2 with quotas\nlease 3"
    )
    assert found == [
        {"kind": "nodes", "nodes": 2, "flavor": h.H100, "cluster": "gpu", "lead_days": "1"},
        {"kind": "burst", "pool": "burst", "nodes": "2", "grow_quotas": True},
    ]
    assert lines == [1, 4]
    assert list(errors) == ["line 5"]
    client = Client()
    client.force_login(world.users["paula"])
    bad = client.post(
        "/billing/what-ifs/studies/",
        {"name": "x", "days": "3", "seeds": "1", "scenarios": "buy 2 H100-SXM-80GB in nowhere"},
    )
    assert bad.status_code == 400
    assert "line 1: cluster: No cluster nowhere" in bad.content.decode()
    form = {"name": "buy or burst", "days": "3", "seeds": "1", "scenarios": "buy 2 H100-SXM-80GB in gpu\nburst burst"}
    good = client.post("/billing/what-ifs/studies/", form)
    study = WhatIfStudy.objects.get()
    assert good.status_code == 302
    assert good["Location"] == f"/billing/what-ifs/studies/{study.pk}/"
    run_all(study)
    page = client.get(good["Location"]).content.decode()
    assert 'data-testid="study-table"' in page
    assert "Burst into burst (up to 3 nodes, on_demand)" in page
    assert 'data-testid="study-chart"' in page
    researcher = Client()
    researcher.force_login(world.users["alice"])
    assert researcher.get(good["Location"]).status_code == 404


@pytest.mark.django_db(transaction=True)
def test_qm_whatif_compares_options_and_follows_them(
    crowded: ElasticPool, live_server: Any, world: World, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from qm import cli
    from tenancy import actions as tenancy_actions

    monkeypatch.setenv("QM_URL", live_server.url)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    _, token = tenancy_actions.issue_token(world.users["paula"], name="cli tests")
    monkeypatch.setenv("QM_TOKEN", token)
    status = cli.main(["whatif", "compare", "buy 2 H100-SXM-80GB in gpu", "burst burst", "--days", "3"])
    _, err = capsys.readouterr()
    assert status == 0, err
    study = WhatIfStudy.objects.get()
    assert err.strip() == f"Study #{study.pk}: 2 what-ifs queued."  # one an option and seed
    # Each task ran at the commit (the tests' Celery runs tasks where they are sent).
    assert set(study.what_ifs.values_list("status", flat=True)) == {WhatIf.Status.DONE}
    assert cli.main(["whatif", "show", str(study.pk)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "buy 2 H100-SXM-80GB in gpu; burst burst: the last 3 days, amounts in USD"
    assert lines[1].split()[:3] == ["OPTION", "COST", "EXTRA"]
    assert lines[2].startswith("Today's fleet")
    assert lines[3].startswith("Buy 2 H100-SXM-80GB nodes in gpu")
    assert lines[4].startswith("Burst into burst")
    assert cli.main(["whatif", "show", str(study.pk), "--json"]) == 0
    assert '"complete": true' in capsys.readouterr().out
    assert cli.main(["whatif", "compare", "lease 3 H100"]) != 0
    assert "options[0]" in capsys.readouterr().err
