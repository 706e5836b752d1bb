"""Tenancy: organizations, teams, projects, memberships, identities, service accounts, tokens, the audit log
and the scoping of every query of tenant data (``tenancy.scoping``)."""
