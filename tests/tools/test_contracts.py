"""The import contracts of our own (``tools/contracts.py``) on small graphs planted here: each fails on what it
forbids, names the import that breaks it, and keeps a graph without one. ``make lint`` runs them on the code."""

from __future__ import annotations

import grimp

from tools.contracts import AcyclicAppsContract, AcyclicModulesContract, OwnEntryPointsContract


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
        ("billing.web.costs", "governance.budgets"),
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
