"""Sign-in through the organisation's identity provider, against a real OpenID provider on loopback
(tests/oidc/provider.mjs: oidc-provider, which requires PKCE of this client): accounts, memberships that
follow the groups claim, hand-set roles kept, deactivation, and the mapping's page and actions."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection
from django.test import Client

from common.sealed import unseal
from tenancy import actions
from tenancy.actions import identity
from tenancy.models import AuditLog, GroupMapping, Membership, ProviderIdentity
from tenancy.scoping import Role
from tests.conftest import World, api_client
from tests.oidc.fixtures import LoopbackProvider, account, oidc_provider, oidc_settings, through_provider

__all__ = ["oidc_provider", "oidc_settings"]

pytestmark = pytest.mark.django_db


@pytest.fixture
def mapped(world: World) -> World:
    """Groups of the provider mapped in the demo organization (and one in the rival's), by the installation's
    administrator."""
    root = installation_admin()
    actions.map_group(root, world.org, group="ml-vision", role="researcher", team=world.teams["vision"])
    actions.map_group(root, world.org, group="vision-leads", role="lead", team=world.teams["vision"])
    actions.map_group(root, world.org, group="ml-robotics", role="researcher", team=world.teams["robotics"])
    actions.map_group(root, world.org, group="money", role="finance")
    actions.map_group(root, world.other_org, group="ml-vision", role="lead", team=world.teams["intruders"])
    return world


def installation_admin() -> User:
    """The installation's administrator (a superuser), who alone maps the provider's groups."""
    return User.objects.create_superuser("root", password="pw")


def sign_in(client: Client, username: str, password: str = "pw") -> tuple[int, str]:  # noqa: S107
    """The whole flow: the portal's redirect, the provider's login form, the portal's callback."""
    start = client.get("/oidc/authenticate/")
    assert start.status_code == 302
    page, back = through_provider(start["Location"], username, password)
    if not back:
        return 0, page
    split = urlsplit(back)
    assert split.netloc == "testserver", back
    response = client.get(f"{split.path}?{split.query}")
    return response.status_code, response.get("Location", "")


def roles(user: User) -> set[tuple[str | None, str, str]]:
    return {
        (m.team.slug if m.team else None, m.role, m.source)
        for m in Membership.objects.filter(user=user, organization__slug="demo").select_related("team")
    }


def test_sign_in_page_offers_the_provider_only_when_configured(
    world: World, settings, oidc_settings: LoopbackProvider
) -> None:
    assert "Sign in with Example SSO" in Client().get("/login/").content.decode()
    settings.OIDC_ENABLED = False
    assert "Sign in with" not in Client().get("/login/").content.decode()
    assert Client().get("/oidc/authenticate/").status_code == 404
    assert Client().get("/oidc/callback/?code=x&state=y").status_code == 404


def test_first_sign_in_creates_the_user_with_the_roles_of_their_groups(
    mapped: World, oidc_settings: LoopbackProvider
) -> None:
    oidc_settings.set_accounts(
        {
            "carol": account(
                "pw",
                ["ml-vision", "vision-leads", "money", "unmapped"],
                email="carol@example.org",
                preferred_username="alice",
                given_name="Carol",
            )
        }
    )
    client = Client()
    status, location = sign_in(client, "carol")
    assert (status, location) == (302, "/")
    user = User.objects.get(provider_identity__subject="carol")
    # "alice" is a local account: the provider's user gets a name of their own, never the local account.
    assert user.username == "alice-2"
    assert (user.email, user.first_name, user.has_usable_password()) == ("carol@example.org", "Carol", False)
    assert roles(user) == {("vision", "lead", "provider"), (None, "finance", "provider")}
    assert Membership.objects.filter(user=user, organization=mapped.other_org, role="lead").exists()
    assert client.get("/").status_code == 200
    login = AuditLog.objects.get(action="auth.login", actor=user)
    assert login.changes == {"method": "identity provider"}
    assert AuditLog.objects.filter(action="membership.created", changes__source="provider").count() == 3
    # The refresh token is kept, sealed: its clear text is nowhere in the table.
    stored = ProviderIdentity.objects.get(user=user)
    refresh = unseal(stored.refresh_token, purpose=identity.REFRESH_TOKEN_PURPOSE)
    assert refresh
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM portal_provideridentity")
        assert refresh not in " ".join(str(value) for row in cursor.fetchall() for value in row)


def test_later_sign_ins_follow_the_groups(mapped: World, oidc_settings: LoopbackProvider) -> None:
    oidc_settings.set_accounts({"carol": account("pw", ["ml-vision"])})
    assert sign_in(Client(), "carol")[0] == 302
    user = User.objects.get(provider_identity__subject="carol")
    assert roles(user) == {("vision", "researcher", "provider")}
    oidc_settings.set_groups("carol", ["vision-leads", "ml-robotics"])
    assert sign_in(Client(), "carol")[0] == 302
    assert roles(user) == {("vision", "lead", "provider"), ("robotics", "researcher", "provider")}
    oidc_settings.set_groups("carol", ["ml-robotics"])
    assert sign_in(Client(), "carol")[0] == 302
    assert roles(user) == {("robotics", "researcher", "provider")}
    # Vision's lead role went, and the rival organization's role for ml-vision before it.
    assert AuditLog.objects.filter(action="membership.removed", changes__source="provider").count() == 2


def test_a_role_set_by_hand_is_kept_and_shown_as_an_override(mapped: World, oidc_settings: LoopbackProvider) -> None:
    oidc_settings.set_accounts({"carol": account("pw", ["ml-vision"])})
    sign_in(Client(), "carol")
    user = User.objects.get(provider_identity__subject="carol")
    membership = Membership.objects.get(user=user, team=mapped.teams["vision"])
    actions.change_role(mapped.users["lena"], membership, role="lead", reason="runs the vision reading group")
    changed = AuditLog.objects.get(action="membership.role_changed", actor_name="lena")
    assert changed.changes == {"role": ["researcher", "lead"], "source": ["provider", "local"]}
    assert sign_in(Client(), "carol")[0] == 302
    assert roles(user) == {("vision", "lead", "local")}
    admin = Client()
    admin.force_login(mapped.users["adam"])
    page = admin.get("/identity/")
    assert page.status_code == 200
    row = next(r for r in page.context["sections"][0]["memberships"] if r["membership"].user == user)
    assert row["overrides"] == Role.RESEARCHER
    assert "overrides the provider's researcher" in page.content.decode()


def test_a_user_whose_groups_give_no_role_is_deactivated_at_sign_in(
    mapped: World, oidc_settings: LoopbackProvider
) -> None:
    oidc_settings.set_accounts({"carol": account("pw", ["ml-vision"])})
    client = Client()
    sign_in(client, "carol")
    user = User.objects.get(provider_identity__subject="carol")
    token = api_client(user)
    assert token.get("/api/v1/me/").status_code == 200
    oidc_settings.set_groups("carol", ["left-the-lab"])
    status, location = sign_in(Client(), "carol")
    assert (status, location) == (302, "/login/")
    user.refresh_from_db()
    assert not user.is_active
    assert token.get("/api/v1/me/").status_code == 401
    assert client.get("/").status_code == 302  # the old session ends too
    entry = AuditLog.objects.get(action="user.deactivated")
    assert entry.reason == identity.NO_MAPPED_GROUP
    refused = AuditLog.objects.get(action="auth.login_failed")
    assert (refused.target_id, refused.changes) == (str(user.pk), {"method": "identity provider"})
    assert identity.NO_MAPPED_GROUP in refused.reason
    # Back in a mapped group, the provider's word is enough to come back.
    oidc_settings.set_groups("carol", ["ml-robotics"])
    assert sign_in(Client(), "carol") == (302, "/")
    assert AuditLog.objects.filter(action="user.reactivated").count() == 1


def test_someone_new_whose_groups_give_no_role_leaves_no_account_behind(
    mapped: World, oidc_settings: LoopbackProvider
) -> None:
    oidc_settings.set_accounts({"dave": account("pw", ["unmapped", "left-the-lab"])})
    users = User.objects.count()
    for _ in range(3):
        assert sign_in(Client(), "dave") == (302, "/login/")
    assert User.objects.count() == users  # nobody made, inactive or not
    assert not User.objects.filter(provider_identity__subject="dave").exists()
    refused = AuditLog.objects.filter(action="auth.login_failed")
    assert refused.count() == 3
    assert all(identity.NO_MAPPED_GROUP in entry.reason and entry.target_id == "" for entry in refused)
    # Mapped later, the same person signs in and gets an account then.
    oidc_settings.set_groups("dave", ["ml-vision"])
    assert sign_in(Client(), "dave") == (302, "/")
    assert User.objects.filter(provider_identity__subject="dave", is_active=True).exists()


def test_a_user_deactivated_by_hand_stays_out(mapped: World, oidc_settings: LoopbackProvider) -> None:
    oidc_settings.set_accounts({"carol": account("pw", ["ml-vision"])})
    sign_in(Client(), "carol")
    User.objects.filter(provider_identity__subject="carol").update(is_active=False)
    assert sign_in(Client(), "carol") == (302, "/login/")
    assert not User.objects.get(provider_identity__subject="carol").is_active


def test_a_user_the_provider_no_longer_knows_is_deactivated(mapped: World, oidc_settings: LoopbackProvider) -> None:
    oidc_settings.set_accounts({"carol": account("pw", ["ml-vision"]), "dave": account("pw", ["ml-robotics"])})
    sign_in(Client(), "carol")
    sign_in(Client(), "dave")
    carol = User.objects.get(provider_identity__subject="carol")
    token = api_client(carol)
    assert identity.check_provider_accounts() == {"checked": 2, "deactivated": 0, "unreachable": 0}
    oidc_settings.forget("carol")
    assert identity.check_provider_accounts() == {"checked": 1, "deactivated": 1, "unreachable": 0}
    carol.refresh_from_db()
    assert not carol.is_active
    assert User.objects.get(provider_identity__subject="dave").is_active
    assert token.get("/api/v1/me/").status_code == 401
    assert AuditLog.objects.get(action="user.deactivated").reason == identity.NOT_VOUCHED
    # And the provider itself no longer lets them sign in.
    page, back = through_provider(Client().get("/oidc/authenticate/")["Location"], "carol", "pw")
    assert (back, "Unknown user or wrong password." in page) == ("", True)


def test_an_unreachable_provider_deactivates_nobody(mapped: World, oidc_settings: LoopbackProvider, settings) -> None:
    oidc_settings.set_accounts({"carol": account("pw", ["ml-vision"])})
    sign_in(Client(), "carol")
    settings.OIDC_OP_TOKEN_ENDPOINT = "http://127.0.0.1:9/token"
    assert identity.check_provider_accounts() == {"checked": 0, "deactivated": 0, "unreachable": 1}
    assert User.objects.get(provider_identity__subject="carol").is_active


def test_the_flow_uses_pkce_and_the_provider_requires_it(
    mapped: World, oidc_settings: LoopbackProvider, settings
) -> None:
    oidc_settings.set_accounts({"carol": account("pw", ["ml-vision"])})
    client = Client()
    query = parse_qs(urlsplit(client.get("/oidc/authenticate/")["Location"]).query)
    assert query["code_challenge_method"] == ["S256"]
    assert len(query["code_challenge"][0]) == 43
    assert {"state", "nonce"} <= query.keys()
    # Without PKCE the provider refuses to start the flow at all, and no account appears.
    settings.OIDC_USE_PKCE = False
    start = client.get("/oidc/authenticate/")
    assert "code_challenge" not in start["Location"]
    _, back = through_provider(start["Location"], "carol", "pw")
    error = parse_qs(urlsplit(back).query)
    assert error["error"] == ["invalid_request"]
    assert "requires PKCE" in error["error_description"][0]
    response = client.get(f"{urlsplit(back).path}?{urlsplit(back).query}", follow=True)
    assert "Sign-in with Example SSO failed: the provider answered: " in response.content.decode()
    assert not ProviderIdentity.objects.exists()
    refused = AuditLog.objects.get(action="auth.login_failed")
    assert "requires PKCE" in refused.reason


def test_a_token_for_another_issuer_is_refused(mapped: World, oidc_settings: LoopbackProvider, settings) -> None:
    oidc_settings.set_accounts({"carol": account("pw", ["ml-vision"])})
    settings.OIDC_ISSUER = "https://login.example.org"
    assert sign_in(Client(), "carol")[0] == 400
    assert not ProviderIdentity.objects.exists()


def test_a_password_form_never_reaches_the_provider(mapped: World, oidc_settings: LoopbackProvider) -> None:
    response = Client().post("/login/?code=abc&state=def", {"username": "alice", "password": "demo"})
    assert response.status_code == 302
    assert not ProviderIdentity.objects.exists()


def test_groups_map_only_through_the_installations_administrator_and_bad_input_names_the_field(world: World) -> None:
    root, vision = installation_admin(), world.teams["vision"]
    # Organization admins included: a group means the same people to every organization of the installation.
    for who in ("lena", "alice", "fiona", "adam", "mallory"):
        with pytest.raises(PermissionDenied):
            actions.map_group(world.users[who], world.org, group="g", role="researcher", team=vision)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"group": " ", "role": "researcher", "team": vision}, "group"),
        ({"group": "g", "role": "owner", "team": vision}, "role"),
        ({"group": "g", "role": "researcher"}, "team"),
        ({"group": "g", "role": "admin", "team": vision}, "team"),
        ({"group": "g", "role": "lead", "team": world.teams["intruders"]}, "team"),
    ]
    for kwargs, field in cases:
        with pytest.raises(ValidationError) as refused:
            actions.map_group(root, world.org, **kwargs)
        assert field in refused.value.message_dict
    mapping = actions.map_group(root, world.org, group="g", role="researcher", team=vision)
    with pytest.raises(ValidationError, match="already mapped"):
        actions.map_group(root, world.org, group="g", role="lead", team=vision)
    for who in ("adam", "mallory"):
        with pytest.raises(PermissionDenied):
            actions.unmap_group(world.users[who], mapping)
    actions.unmap_group(root, mapping)
    assert not GroupMapping.objects.exists()
    assert [e.action for e in AuditLog.objects.filter(action__startswith="group_mapping.").order_by("pk")] == [
        "group_mapping.created",
        "group_mapping.removed",
    ]


def test_the_mapping_page_is_read_by_organization_admins_and_changed_by_the_installations(world: World) -> None:
    client = Client()
    client.force_login(world.users["lena"])
    assert client.get("/identity/").status_code == 403
    client.force_login(world.users["adam"])
    page = client.get("/identity/").content.decode()
    assert 'data-testid="mapped-by-installation"' in page
    assert 'data-testid="group-mapping-form"' not in page
    team = world.teams["vision"]
    mapping = {"group": "ml", "role": "researcher", "team": team.pk}
    assert client.post(f"/identity/{world.org.pk}/mappings/", mapping).status_code == 403
    assert not GroupMapping.objects.exists()
    client.force_login(installation_admin())
    assert 'data-testid="group-mapping-form"' in client.get("/identity/").content.decode()
    assert client.post(f"/identity/{world.org.pk}/mappings/", mapping).status_code == 302
    bad = client.post(f"/identity/{world.org.pk}/mappings/", {"group": "ml2", "role": "lead"})
    assert bad.status_code == 400
    assert "belongs to a team" in bad.content.decode()
    created = GroupMapping.objects.get()
    client.force_login(world.users["adam"])
    assert client.post(f"/identity/mappings/{created.pk}/remove/").status_code == 403
    client.force_login(world.users["mallory"])
    assert client.post(f"/identity/{world.org.pk}/mappings/", {"group": "x", "role": "finance"}).status_code == 404
    assert client.post(f"/identity/mappings/{created.pk}/remove/").status_code == 404
    assert GroupMapping.objects.count() == 1


def test_configuration_is_checked_at_start(tmp_path: Path) -> None:
    from tests.portal.test_settings_env import STRONG_KEY, manage

    missing = manage("check", QM_VAR_DIR=str(tmp_path), OIDC_CLIENT_ID="qm", OIDC_ISSUER="https://id.example.org")
    assert missing.returncode != 0
    assert "OIDC_CLIENT_ID is set, so these must be set too: OIDC_CLIENT_SECRET, OIDC_AUTHORIZATION_ENDPOINT" in (
        missing.stderr
    )
    bad_url = manage("check", QM_VAR_DIR=str(tmp_path), OIDC_TOKEN_ENDPOINT="id.example.org/token")
    assert "OIDC_TOKEN_ENDPOINT='id.example.org/token' is not an absolute http or https URL" in bad_url.stderr
    complete = {
        "OIDC_CLIENT_ID": "qm",
        "OIDC_CLIENT_SECRET": "s",
        "OIDC_ISSUER": "https://id.example.org",
        **{f"OIDC_{name}_ENDPOINT": f"https://id.example.org/{name.lower()}" for name in ("AUTHORIZATION", "TOKEN")},
        "OIDC_USERINFO_ENDPOINT": "https://id.example.org/me",
        "OIDC_JWKS_ENDPOINT": "https://id.example.org/jwks",
    }
    assert manage("check", QM_VAR_DIR=str(tmp_path), **complete).returncode == 0
    plain = manage("check", QM_VAR_DIR=str(tmp_path), **{**complete, "OIDC_SCOPES": "email groups"})
    assert "OIDC_SCOPES='email groups' must include openid" in plain.stderr
    production = manage(
        "check",
        QM_VAR_DIR=str(tmp_path),
        QM_ENV="production",
        SECRET_KEY=STRONG_KEY,
        ALLOWED_HOSTS="qm.example.org",
        **{**complete, "OIDC_TOKEN_ENDPOINT": "http://id.example.org/token"},
    )
    assert "OIDC_TOKEN_ENDPOINT='http://id.example.org/token' is not an absolute https URL" in production.stderr


def test_grants_take_the_higher_team_role_and_every_organization(mapped: World, settings) -> None:
    vision, robotics = mapped.teams["vision"].pk, mapped.teams["robotics"].pk
    grants = identity.grants_for(["ml-vision", "vision-leads", "ml-robotics", "money", "nobody-maps-this"])
    assert {(g.organization_id, g.team_id, g.role) for g in grants} == {
        (mapped.org.pk, vision, Role.LEAD),
        (mapped.org.pk, robotics, Role.RESEARCHER),
        (mapped.org.pk, None, Role.FINANCE),
        (mapped.other_org.pk, mapped.teams["intruders"].pk, Role.LEAD),
    }
    assert identity.grants_for([]) == set()
    settings.OIDC_GROUPS_CLAIM = "roles"
    assert identity.groups_of({"roles": "ml-vision"}) == ["ml-vision"]
    assert identity.groups_of({"roles": ["b", "a", "a", "", None, {"x": 1}]}) == ["a", "b"]
    assert identity.groups_of({"groups": ["ml-vision"]}) == []
    assert identity.groups_of({"roles": 42}) == []


def test_discovery_prints_the_settings(oidc_provider: LoopbackProvider) -> None:
    from io import StringIO

    from django.core.management import CommandError, call_command

    out = StringIO()
    call_command("oidc_discover", oidc_provider.issuer + "/", stdout=out)
    lines = dict(line.split("=", 1) for line in out.getvalue().splitlines())
    assert lines == {
        "OIDC_ISSUER": oidc_provider.issuer,
        "OIDC_AUTHORIZATION_ENDPOINT": oidc_provider.endpoints["authorization"],
        "OIDC_TOKEN_ENDPOINT": oidc_provider.endpoints["token"],
        "OIDC_USERINFO_ENDPOINT": oidc_provider.endpoints["userinfo"],
        "OIDC_JWKS_ENDPOINT": oidc_provider.endpoints["jwks"],
    }
    with pytest.raises(CommandError, match="names the issuer"):
        call_command("oidc_discover", oidc_provider.issuer.replace("127.0.0.1", "localhost"), stdout=StringIO())
    with pytest.raises(CommandError, match="Cannot read the discovery document"):
        call_command("oidc_discover", "http://127.0.0.1:9", stdout=StringIO())


def test_an_expired_id_token_is_a_bad_request_not_an_error(settings) -> None:
    import time

    import jwt
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from django.core.exceptions import SuspiciousOperation

    from tenancy.provider import ProviderBackend

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    settings.OIDC_RP_IDP_SIGN_KEY = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    settings.OIDC_ISSUER, settings.OIDC_RP_CLIENT_ID = "https://id.example.org", "qm"
    claims = {"iss": "https://id.example.org", "aud": "qm", "sub": "carol", "nonce": "n"}
    backend = ProviderBackend()
    fresh = jwt.encode({**claims, "exp": int(time.time()) + 60}, key, algorithm="RS256")
    assert backend.verify_token(fresh, nonce="n")["sub"] == "carol"
    expired = jwt.encode({**claims, "exp": int(time.time()) - 60}, key, algorithm="RS256")
    with pytest.raises(SuspiciousOperation, match="Signature has expired"):
        backend.verify_token(expired, nonce="n")
    other_audience = jwt.encode({**claims, "aud": "another-app", "exp": int(time.time()) + 60}, key, algorithm="RS256")
    with pytest.raises(SuspiciousOperation, match="not issued by the configured provider for this client"):
        backend.verify_token(other_audience, nonce="n")


def test_an_id_token_naming_no_key_or_another_algorithm_is_a_bad_request(settings) -> None:
    """The provider's keys are fetched from its JWKS endpoint (a server of this test's); a token whose header
    names no key, or is signed with another algorithm than the configured one, is refused as a bad request
    before any key is looked up (the library's lookup answered a token without a kid with a 500)."""
    import json
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa
    from django.core.exceptions import SuspiciousOperation

    from tenancy.provider import ProviderBackend

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwks = json.dumps({"keys": [{**public, "kid": "k1", "alg": "RS256", "use": "sig"}]}).encode()

    class Keys(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(jwks)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Keys)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        settings.OIDC_RP_IDP_SIGN_KEY = None
        settings.OIDC_OP_JWKS_ENDPOINT = f"http://127.0.0.1:{server.server_address[1]}/jwks"
        settings.OIDC_ISSUER, settings.OIDC_RP_CLIENT_ID = "https://id.example.org", "qm"
        claims = {
            "iss": "https://id.example.org",
            "aud": "qm",
            "sub": "carol",
            "nonce": "n",
            "exp": int(time.time()) + 60,
        }
        backend = ProviderBackend()
        good = jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})
        assert backend.verify_token(good, nonce="n")["sub"] == "carol"
        for token, said in [
            (jwt.encode(claims, key, algorithm="RS256"), "names no key"),
            (jwt.encode(claims, key, algorithm="RS256", headers={"kid": ""}), "names no key"),
            (
                jwt.encode(claims, "a-shared-secret-of-32-bytes-long!", algorithm="HS256", headers={"kid": "k1"}),
                "'HS256'",
            ),
            (jwt.encode(claims, "", algorithm="none"), "'none'"),
            ("not.a.jwt", "not a signed JWT"),
        ]:
            with pytest.raises(SuspiciousOperation, match=said):
                backend.verify_token(token, nonce="n")
    finally:
        server.shutdown()
