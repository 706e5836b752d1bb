"""What each role can do, as the home page shows it.

A capability whose page is not built yet is listed without a link, so each role sees the whole of what
Quartermaster will do for it and what it can use today.
"""

from __future__ import annotations

from dataclasses import dataclass

from tenancy.scoping import Role


@dataclass(frozen=True)
class Capability:
    title: str
    description: str
    roles: frozenset[Role]
    url_name: str | None = None


EVERYONE = frozenset(Role)

CAPABILITIES: tuple[Capability, ...] = (
    Capability("Submit a job", "Ask for accelerators by type and count; Quartermaster finds the cluster.",
               frozenset({Role.RESEARCHER, Role.LEAD}), "job-new"),
    Capability("Follow your jobs", "Where each job runs, why it waits and when it will start, what it costs.",
               frozenset({Role.RESEARCHER, Role.LEAD}), "job-list"),
    Capability("Your teams", "Members, roles and projects of the teams you belong to.",
               frozenset({Role.RESEARCHER}), "team-list"),
    Capability("Manage your team", "Add members, promote leads, create projects for sub-quotas.",
               frozenset({Role.LEAD}), "team-list"),
    Capability("Quotas and priority tiers", "Nominal, borrowing and lending limits per flavor; project sub-quotas.",
               frozenset({Role.LEAD, Role.ADMIN})),
    Capability("Budgets", "Monthly accelerator-hours and money per team and project, with alerts.",
               frozenset({Role.LEAD, Role.FINANCE})),
    Capability("Every team", "All teams of the organization, their members and projects.",
               frozenset({Role.FINANCE, Role.ADMIN}), "team-list"),
    Capability("Cost attribution and reports", "Costs by team, project, user, cluster and flavor; CSV and XLSX.",
               frozenset({Role.FINANCE, Role.ADMIN}), "costs"),
    Capability("Team costs", "What your team's jobs cost each month, with its share of idle capacity.",
               frozenset({Role.RESEARCHER, Role.LEAD}), "costs"),
    Capability("Price book", "On-demand, reserved, spot and on-prem prices with effective dates.",
               frozenset({Role.FINANCE, Role.ADMIN}), "price-book"),
    Capability("Capacity forecasts", "Demand against capacity per flavor, and what-if plans.",
               frozenset({Role.FINANCE, Role.ADMIN}), "capacity-forecast"),
    Capability("Clusters and nodes", "Live cluster views, health checks, drains and maintenance windows.",
               frozenset({Role.ADMIN}), "cluster-list"),
    Capability("The fleet", "The organization's clusters, their nodes and how busy they are.",
               frozenset({Role.RESEARCHER, Role.LEAD, Role.FINANCE}), "cluster-list"),
    Capability("Audit log", "Who did what to which object, from where.", frozenset({Role.ADMIN}), "audit-log"),
    Capability("Identity provider", "Map the provider's groups onto teams and roles; where each role comes from.",
               frozenset({Role.ADMIN}), "identity"),
    Capability("API tokens and CLI", "Personal tokens for the REST API and the qm command-line client.",
               EVERYONE, "token-list"),
    Capability("Service accounts", "Your team's tokens for CI pipelines and on-call tooling, scoped.",
               frozenset({Role.LEAD}), "team-list"),
    Capability("API documentation", "The REST API, browsable, with its OpenAPI schema.", EVERYONE, "api-docs"),
)  # fmt: skip


def capabilities_for(roles: set[Role]) -> list[Capability]:
    return [cap for cap in CAPABILITIES if cap.roles & roles]
