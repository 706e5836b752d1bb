"""Tenancy's pages: sign-in, home, teams, identity, tokens, the audit log."""
