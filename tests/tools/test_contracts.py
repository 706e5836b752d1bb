"""The import contracts of our own (``tools/contracts.py``) on small graphs (and sources) planted here: each fails
on what it forbids, names the import or the call that breaks it, and keeps one without. ``make lint`` runs them on
the code."""

from __future__ import annotations

from pathlib import Path

import grimp

from tools.contracts import (
    AcyclicAppsContract,
    AcyclicModulesContract,
    OwnEntryPointsContract,
    WritesInActionsContract,
    writes_in,
)


def _graph(*imports: tuple[str, str]) -> grimp.ImportGraph:
    graph = grimp.ImportGraph()
    for importer, imported in imports:
        for module in (importer, imported):
            parts = module.split(".")
            for depth in range(1, len(parts) + 1):
                graph.add_module(".".join(parts[:depth]))
        graph.add_import(importer=importer, imported=imported, line_number=7, line_contents=f"import {imported}")
    return graph


def _apps(*packages: str) -> AcyclicAppsContract:
    return AcyclicAppsContract(name="apps", session_options={}, contract_options={"packages": list(packages)})


def test_an_app_level_cycle_fails_and_is_named_one_import_a_step() -> None:
    graph = _graph(
        ("billing.reports", "scheduler.models"),
        ("scheduler.placement.prices", "tenancy.models"),
        ("tenancy.signals", "billing.models"),  # planted: the bottom app reaches the top one
    )
    check = _apps("billing", "scheduler", "tenancy").check(graph, verbose=False)

    assert not check.kept
    (cycle,) = check.metadata["cycles"]
    assert cycle["modules"] == ["billing", "scheduler", "tenancy"]
    assert cycle["imports"] == [
        "billing.reports -> scheduler.models (l.7: import scheduler.models)",
        "scheduler.placement.prices -> tenancy.models (l.7: import tenancy.models)",
        "tenancy.signals -> billing.models (l.7: import billing.models)",
    ]


def test_apps_importing_one_way_keep_the_contract() -> None:
    graph = _graph(("billing.reports", "scheduler.models"), ("scheduler.actions", "tenancy.models"))

    assert _apps("billing", "scheduler", "tenancy").check(graph, verbose=False).kept


def test_another_apps_views_may_not_be_imported_but_the_apps_own_and_the_urls_may() -> None:
    contract = OwnEntryPointsContract(
        name="views",
        session_options={},
        contract_options={
            "apps": ["billing", "governance"],
            "entry_points": ["web", "api"],
            "shell": ["portal.urls"],
        },
    )
    allowed = _graph(
        ("governance.web.quotas", "governance.web.budgets"),
        ("portal.urls", "governance.web.budgets"),
        ("billing.web.costs", "governance.actions.budgets"),
    )
    assert contract.check(allowed, verbose=False).kept

    planted = _graph(*[("billing.web.costs", "governance.web.budgets"), ("portal.urls", "billing.web.costs")])
    check = contract.check(planted, verbose=False)
    assert not check.kept
    assert check.metadata["imports"] == [
        "billing.web.costs -> governance.web.budgets (l.7: import governance.web.budgets)"
    ]


def test_the_module_cycle_contract_counts_type_only_imports_when_asked() -> None:
    # The graph given is used as it is when type-only imports count (the session's graph holds them).
    graph = _graph(("qm.cli", "qm.admin"), ("qm.admin", "qm.cli"))
    contract = AcyclicModulesContract(
        name="modules", session_options={}, contract_options={"packages": ["qm"], "type_checking": "true"}
    )
    check = contract.check(graph, verbose=False)

    assert not check.kept
    assert check.metadata["cycles"][0]["modules"] == ["qm.admin", "qm.cli"]


def test_the_orm_writes_are_found_and_what_only_looks_like_one_is_not() -> None:
    source = """
job.save()
job.save(update_fields=["state"])
Job.objects.create(name="x")
Job.objects.filter(pk=1).update(state="done")
Job.objects.filter(pk=1).delete()
node.delete()
Attempt.objects.bulk_create(rows)
Queue.objects.get_or_create(team=team)
Job.objects.select_for_update().get(pk=1)
team.jobs.all().update(state="x")
settings.update(other)
book.save(path)
cache.delete(key)
subprocess.run(["make"])
"""
    lines = [line for line, _ in writes_in(source)]

    assert lines == [2, 3, 4, 5, 6, 7, 8, 9, 10, 11]


def _package(root: Path, files: dict[str, str]) -> grimp.ImportGraph:
    graph = grimp.ImportGraph()
    for name, source in files.items():
        path = root.joinpath(*name.split(".")).with_suffix(".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):
            graph.add_module(".".join(parts[:depth]))
    return graph


def test_a_write_outside_an_apps_actions_fails_and_is_named(tmp_path: Path) -> None:
    write = "from app.models import Job\n\ndef stop(pk):\n    Job.objects.filter(pk=pk).update(state='done')\n"
    graph = _package(
        tmp_path,
        {
            "app.actions": write,  # an app's actions module
            "app.things.actions.jobs": write,  # a package of actions, however deep
            "app.loop": write,  # a writer named in the contract
            "app.migrations.m0001": write,
            "app.web.views": "from app import actions\n\ndef page(request):\n    actions.stop(1)\n",
        },
    )
    options = {"packages": ["app"], "writers": ["app.loop"], "root": str(tmp_path)}
    assert WritesInActionsContract(name="writes", session_options={}, contract_options=options).check(graph, False).kept

    planted = _package(tmp_path, {"app.web.views": write})
    check = WritesInActionsContract(name="writes", session_options={}, contract_options=options).check(planted, False)
    assert not check.kept
    assert check.metadata["writes"] == ["app.web.views l.4: Job.objects.filter(pk=pk).update(state='done')"]
