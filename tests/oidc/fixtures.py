"""The test identity provider (``provider.mjs``: panva's certified oidc-provider under Node.js) as fixtures.

``oidc_provider`` starts it once per session on a free loopback port, reads its endpoints from its discovery
document, and lets a test rewrite the provider's accounts; ``oidc_settings`` points the portal at it. Without
Node.js or ``npm ci`` in tests/oidc, the tests that need it skip — and fail when CI=true.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

HERE = Path(__file__).resolve().parent
CLIENT_ID = "quartermaster"
CLIENT_SECRET = "test-client-secret"
SCOPES = "openid email profile groups offline_access"


def account(password: str, groups: list[str], **claims: Any) -> dict[str, Any]:
    return {"password": password, "claims": {"groups": groups, **claims}}


@dataclass
class LoopbackProvider:
    issuer: str
    endpoints: dict[str, str]
    accounts_file: Path
    log: Path
    accounts: dict[str, dict[str, Any]] = field(default_factory=dict)

    def set_accounts(self, accounts: dict[str, dict[str, Any]]) -> None:
        """Replace the provider's accounts; it reads them again at every look-up."""
        self.accounts = accounts
        self.accounts_file.write_text(json.dumps(accounts))

    def set_groups(self, username: str, groups: list[str]) -> None:
        self.accounts[username]["claims"]["groups"] = groups
        self.set_accounts(self.accounts)

    def forget(self, username: str) -> None:
        del self.accounts[username]
        self.set_accounts(self.accounts)


def _require_provider() -> str:
    node = shutil.which("node")
    missing = None
    if node is None:
        missing = "Node.js is not installed"
    elif not (HERE / "node_modules" / "oidc-provider").is_dir():
        missing = "the test provider is not installed (npm ci --prefix tests/oidc)"
    if missing is None:
        assert node is not None
        return node
    if os.environ.get("CI"):
        pytest.fail(f"{missing}: the OpenID Connect sign-in tests need it in CI")
    pytest.skip(f"{missing}; OpenID Connect sign-in tests skipped")


def _issuer_once_listening(process: subprocess.Popen[bytes], log: Path) -> str:
    """The issuer the provider prints once it serves requests (on a port it chose: nothing can take it first)."""
    deadline = time.monotonic() + 90  # node loads oidc-provider and makes an RSA key: slow on a busy machine
    while time.monotonic() < deadline and process.poll() is None:
        for line in log.read_text().splitlines():
            if line.startswith("listening "):
                return line.removeprefix("listening ").strip()
        time.sleep(0.2)
    pytest.fail(f"the test identity provider did not start: {log.read_text()}")


@pytest.fixture(scope="session")
def oidc_provider(live_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackProvider]:
    node = _require_provider()
    accounts_file = tmp_path_factory.mktemp("oidc") / "accounts.json"
    accounts_file.write_text("{}")
    redirect_uris = [f"{base}/oidc/callback/" for base in ("http://testserver", live_server.url)]
    env = {
        **os.environ,
        "CLIENT_ID": CLIENT_ID,
        "CLIENT_SECRET": CLIENT_SECRET,
        "REDIRECT_URIS": ",".join(redirect_uris),
        "ACCOUNTS_FILE": str(accounts_file),
    }
    log = accounts_file.with_name("provider.log")
    with log.open("w") as output:
        process = subprocess.Popen([node, str(HERE / "provider.mjs")], env=env, stdout=output, stderr=subprocess.STDOUT)
    try:
        issuer = _issuer_once_listening(process, log)
        discovery = requests.get(f"{issuer}/.well-known/openid-configuration", timeout=30).json()
        endpoints = {
            name: discovery[key]
            for name, key in (
                ("authorization", "authorization_endpoint"),
                ("token", "token_endpoint"),
                ("userinfo", "userinfo_endpoint"),
                ("jwks", "jwks_uri"),
            )
        }
        yield LoopbackProvider(issuer=discovery["issuer"], endpoints=endpoints, accounts_file=accounts_file, log=log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def oidc_settings(settings: Any, oidc_provider: LoopbackProvider) -> LoopbackProvider:
    """The portal pointed at the test provider, with an empty account list to fill."""
    settings.OIDC_ENABLED = True
    settings.OIDC_PROVIDER_NAME = "Example SSO"
    settings.OIDC_ISSUER = oidc_provider.issuer
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
    settings.OIDC_RP_SCOPES = SCOPES
    settings.OIDC_OP_AUTHORIZATION_ENDPOINT = oidc_provider.endpoints["authorization"]
    settings.OIDC_OP_TOKEN_ENDPOINT = oidc_provider.endpoints["token"]
    settings.OIDC_OP_USER_ENDPOINT = oidc_provider.endpoints["userinfo"]
    settings.OIDC_OP_JWKS_ENDPOINT = oidc_provider.endpoints["jwks"]
    oidc_provider.set_accounts({})
    return oidc_provider


def through_provider(start: str, username: str, password: str) -> tuple[str, str]:
    """Follow the provider's side of a sign-in started at `start` (its authorization URL), submitting its
    login form as a browser would; returns the provider's last page text and where it sends the browser."""
    browser = requests.Session()
    response = browser.get(start, allow_redirects=False, timeout=10)
    page = ""
    for _ in range(10):
        location = response.headers.get("Location")
        if location is None:
            page = response.text
            if "<form" in page and "/login" in page:
                form_action = page.split('action="', 1)[1].split('"', 1)[0]
                response = browser.post(
                    urlsplit(start)._replace(path=form_action, query="").geturl(),
                    data={"username": username, "password": password},
                    allow_redirects=False,
                    timeout=10,
                )
                if response.headers.get("Location") is None:
                    return response.text, ""
                continue
            return page, ""
        if not location.startswith(urlsplit(start)._replace(path="", query="").geturl()) and "://" in location:
            return page, location
        response = browser.get(requests.compat.urljoin(start, location), allow_redirects=False, timeout=10)
    raise AssertionError("the provider redirected too often")
