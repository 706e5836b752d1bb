"""The tenancy API: organizations, teams, projects, memberships, tokens, service accounts, the audit log."""
