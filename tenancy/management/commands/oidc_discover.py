"""Print the OIDC_* settings for an identity provider, read from its discovery document.

The portal takes its provider's endpoints from environment variables, never from the network at start-up;
this command reads ``<issuer>/.well-known/openid-configuration`` once, checks it (the issuer it names, the
authorization code flow, PKCE with S256) and prints the variables to set:

    manage.py oidc_discover https://login.example.org/realms/lab >> .env
"""

from __future__ import annotations

from typing import Any

import requests
from django.core.management.base import BaseCommand, CommandError, CommandParser

ENDPOINTS = {
    "OIDC_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_USERINFO_ENDPOINT": "userinfo_endpoint",
    "OIDC_JWKS_ENDPOINT": "jwks_uri",
}


class Command(BaseCommand):
    help = "Print the OIDC_* variables for an identity provider, from its discovery document."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("issuer", help="The provider's issuer URL, e.g. https://login.example.org/realms/lab")

    def handle(self, *args: Any, **options: Any) -> None:
        issuer = str(options["issuer"]).rstrip("/")
        url = f"{issuer}/.well-known/openid-configuration"
        try:
            response = requests.get(url, timeout=10, allow_redirects=False)
            response.raise_for_status()
            document = response.json()
        except (requests.RequestException, ValueError) as exc:
            raise CommandError(f"Cannot read the discovery document at {url}: {exc}") from None
        if not isinstance(document, dict):
            raise CommandError(f"The discovery document at {url} is not a JSON object.")
        if document.get("issuer") != issuer:
            raise CommandError(f"The discovery document names the issuer {document.get('issuer')!r}, not {issuer!r}.")
        missing = [key for key in ENDPOINTS.values() if not document.get(key)]
        if missing:
            raise CommandError(f"The discovery document has no {', '.join(missing)}.")
        if "code" not in document.get("response_types_supported", ["code"]):
            raise CommandError("The provider does not offer the authorization code flow.")
        if "S256" not in document.get("code_challenge_methods_supported", []):
            self.stderr.write("warning: the provider does not announce PKCE with S256; the portal always uses it.")
        algorithms = document.get("id_token_signing_alg_values_supported", [])
        self.stdout.write(f"OIDC_ISSUER={issuer}")
        for variable, key in ENDPOINTS.items():
            self.stdout.write(f"{variable}={document[key]}")
        if algorithms and "RS256" not in algorithms:
            self.stdout.write(f"OIDC_SIGN_ALGORITHM={algorithms[0]}")
