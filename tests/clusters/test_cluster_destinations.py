"""Cluster endpoints under the outbound policy: refused when registered or edited, refused again when the
backends connect (Slurm, Kubernetes, TPU and google-auth's token refresh), redirects never followed with the
token, and what a wrong endpoint answers never shown on the cluster pages."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from clusters import actions
from clusters.actions import sync
from clusters.backends.base import AuthenticationFailed, BadResponse, NotAllowed, Unreachable
from clusters.backends.kubernetes.backend import KubernetesBackend
from clusters.backends.slurm.backend import SlurmBackend
from clusters.backends.tpu.backend import SCOPES, TpuBackend
from clusters.models import Cluster
from common import outbound
from tests.clusters.kube_server import TOKEN as KUBE_TOKEN
from tests.clusters.kube_server import KubeServer
from tests.clusters.test_slurm_backend import TOKEN as SLURM_TOKEN
from tests.clusters.tpu_server import TpuServer
from tests.conftest import World

#: What the outside review registered, and what it got through the literal-host guard.
HOSTILE = [
    "http://metadata.google.internal./computeMetadata/v1/",
    "http://[::ffff:169.254.169.254]/latest/meta-data/",
    "http://[::ffff:127.0.0.1]:6820",
    "http://[0:0:0:0:0:ffff:7f00:1]:6820",
    "http://[fd00:ec2::254]/latest/meta-data/",
    "http://100.100.100.200/latest/meta-data/",
    "http://0.0.0.0:6820",
    "http://169.254.170.2/v2/credentials",
    "http://168.63.129.16/machine",
    "http://192.0.0.192/opc/v1/instance/",
    "http://localhost:6820",  # a name that resolves to this machine
]
METADATA_ANSWER = "AccessKeyId=ASIAFAKEKEY SecretAccessKey=wJalrXUtnFEMI/K7MDENG/bPxRfiCYsecret Token=IQoJb3JpZ2lu"


def register(world: World, endpoint: str, **fields: Any) -> Cluster:
    values: dict[str, Any] = {"name": "Lab", "slug": "lab", "kind": "slurm", "region": "lab", "endpoint": endpoint}
    return actions.create_cluster(world.users["adam"], world.org, **{**values, **fields})


def signed_in(world: World, username: str) -> Client:
    client = Client()
    client.force_login(world.users[username])
    return client


@pytest.mark.parametrize("endpoint", HOSTILE)
def test_every_hostile_endpoint_is_refused_at_registration(world: World, settings: Any, endpoint: str) -> None:
    settings.CLUSTER_ENDPOINTS_ALLOW_LOOPBACK = False
    with pytest.raises(ValidationError) as refused:
        register(world, endpoint)
    assert "may not reach it" in refused.value.message_dict["endpoint"][0]
    assert not Cluster.objects.filter(slug="lab").exists()


def test_the_form_and_an_edit_refuse_them_too(world: World, settings: Any) -> None:
    settings.CLUSTER_ENDPOINTS_ALLOW_LOOPBACK = False
    adam = signed_in(world, "adam")
    form = {
        "name": "Kube",
        "slug": "",
        "kind": "kubernetes",
        "endpoint": "https://[::ffff:169.254.169.254]:6443",
        "region": "us",
        "levels": "",
        "options": "{}",
        "preference": "50",
        "kubernetes_token": "t",
        "kubernetes_ca_cert": "",
    }
    response = adam.post("/clusters/new/", form)
    assert response.status_code == 400
    assert "a cloud metadata service" in response.context["form"].errors["endpoint"][0]
    settings.CLUSTER_ENDPOINTS_ALLOW_LOOPBACK = True
    cluster = register(world, "http://127.0.0.1:6820")
    settings.CLUSTER_ENDPOINTS_ALLOW_LOOPBACK = False
    with pytest.raises(ValidationError, match="this server itself"):
        actions.update_cluster(world.users["adam"], cluster, endpoint="http://[0:0:0:0:0:ffff:7f00:1]:6820")
    with pytest.raises(ValidationError, match="a cloud metadata service"):
        actions.update_cluster(world.users["adam"], cluster, endpoint="http://metadata.google.internal.:80/")


def test_loopback_registration_follows_the_allowance(world: World, settings: Any) -> None:
    settings.CLUSTER_ENDPOINTS_ALLOW_LOOPBACK = True
    assert register(world, "http://[::ffff:127.0.0.1]:6820").endpoint == "http://[::ffff:127.0.0.1]:6820"
    settings.CLUSTER_ENDPOINTS_ALLOW_LOOPBACK = False
    with pytest.raises(ValidationError, match="this server itself"):
        register(world, "http://[::ffff:127.0.0.1]:6820", slug="lab2")


def test_a_service_accounts_token_uri_is_held_to_the_same_rules(world: World) -> None:
    key = {
        "type": "service_account",
        "client_email": "x@p.iam.gserviceaccount.com",
        "private_key": "k",
        "token_uri": "http://[::ffff:169.254.169.254]/computeMetadata/v1/token",
    }
    with pytest.raises(ValidationError) as refused:
        register(
            world,
            "https://tpu.googleapis.com",
            kind="tpu",
            options={"project": "p", "zone": "z", "slices": {"v5p-8": 1}},
            credentials={"service_account_json": json.dumps(key)},
        )
    assert "token_uri" in refused.value.message_dict["credentials"][0]
    assert "k" not in refused.value.message_dict["credentials"][0].split("token_uri")[0]  # no key echoed


# ------------------------------------------------------------------------------------------- at send time


class Recorder(BaseHTTPRequestHandler):
    seen: list[tuple[str, str, dict[str, str]]]
    answer: tuple[int, dict[str, str], bytes]

    def do_GET(self) -> None:
        type(self).seen.append((self.command, self.path, dict(self.headers)))
        status, headers, body = type(self).answer
        self.send_response(status)
        for name, value in {"Content-Length": str(len(body)), **headers}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_DELETE = do_GET

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def serve() -> Iterator[Callable[[int, dict[str, str], bytes], tuple[str, type[Recorder]]]]:
    """Start HTTP servers on 127.0.0.1 answering (status, headers, body): (URL, handler with what it saw)."""
    servers: list[ThreadingHTTPServer] = []

    def start(status: int, headers: dict[str, str], body: bytes) -> tuple[str, type[Recorder]]:
        handler = type("Handler", (Recorder,), {"seen": [], "answer": (status, headers, body)})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}", handler

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_slurm_does_not_follow_a_redirect_and_the_other_host_never_sees_the_token(
    serve: Callable[[int, dict[str, str], bytes], tuple[str, type[Recorder]]],
) -> None:
    elsewhere, other = serve(200, {"Content-Type": "application/json"}, b'{"nodes": []}')
    endpoint, first = serve(302, {"Location": f"{elsewhere}/slurm/v0.0.38/nodes"}, b"")
    backend = SlurmBackend(endpoint, {"user": "root", "token": SLURM_TOKEN}, timeout=5)
    with pytest.raises(NotAllowed, match="answered HTTP 302 \\(a redirect\\); redirects are not followed"):
        backend.inventory()
    assert [path for _, path, _ in first.seen] == ["/openapi/v3"]  # its first request: which API versions
    assert other.seen == []  # neither the request nor X-SLURM-USER-TOKEN went there


def test_slurm_connects_only_where_the_allowance_says(
    serve: Callable[[int, dict[str, str], bytes], tuple[str, type[Recorder]]], settings: Any
) -> None:
    endpoint, handler = serve(200, {"Content-Type": "application/json"}, b'{"nodes": []}')
    settings.CLUSTER_ENDPOINTS_ALLOW_LOOPBACK = True
    pinned = {"api_version": "v0.0.38"}  # no /openapi/v3 first: one request
    assert SlurmBackend(endpoint, {"user": "root", "token": SLURM_TOKEN}, pinned, timeout=5).inventory().nodes == ()
    settings.CLUSTER_ENDPOINTS_ALLOW_LOOPBACK = False
    with pytest.raises(NotAllowed, match="this server itself"):
        SlurmBackend(endpoint, {"user": "root", "token": SLURM_TOKEN}, pinned, timeout=5).inventory()
    assert len(handler.seen) == 1


def test_a_fake_metadata_service_shows_nothing_of_its_answer(
    world: World,
    serve: Callable[[int, dict[str, str], bytes], tuple[str, type[Recorder]]],
    settings: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An endpoint that is not slurmrestd answers text (here, credentials): the sync fails, the cluster's
    pages say it is not slurmrestd, and the answer is only in the server's log."""
    settings.CLUSTER_ENDPOINTS_ALLOW_LOOPBACK = True
    endpoint, _ = serve(200, {"Content-Type": "text/plain"}, METADATA_ANSWER.encode())
    cluster = register(world, endpoint, credentials={"user": "root", "token": SLURM_TOKEN})
    with caplog.at_level(logging.WARNING, logger="clusters.backends.base"):
        result = sync.sync_cluster(cluster.pk)
    assert not result.ok
    cluster.refresh_from_db()
    assert "a body that is not JSON" in cluster.last_error
    assert "ASIAFAKEKEY" not in cluster.last_error
    for username in ("alice", "lena", "fiona", "adam"):  # researcher, lead, finance, admin
        client = signed_in(world, username)
        for page in ("/clusters/", f"/clusters/{cluster.pk}/"):
            body = client.get(page).content.decode()
            assert "ASIAFAKEKEY" not in body, (username, page)
            assert "wJalrXUtnFEMI" not in body, (username, page)
        assert "not JSON" in client.get(f"/clusters/{cluster.pk}/").content.decode()  # the failure itself shows
    assert "ASIAFAKEKEY" in caplog.text  # for whoever runs the server


def test_a_sync_refused_by_the_policy_says_so_and_never_connects(
    world: World, serve: Callable[[int, dict[str, str], bytes], tuple[str, type[Recorder]]], settings: Any
) -> None:
    settings.CLUSTER_ENDPOINTS_ALLOW_LOOPBACK = True
    endpoint, handler = serve(200, {"Content-Type": "application/json"}, b'{"nodes": []}')
    cluster = register(world, endpoint, credentials={"user": "root", "token": SLURM_TOKEN})
    settings.CLUSTER_ENDPOINTS_ALLOW_LOOPBACK = False  # the operators closed it since
    assert not sync.sync_cluster(cluster.pk).ok
    cluster.refresh_from_db()
    assert "127.0.0.1 is this server itself (loopback)" in cluster.last_error
    assert handler.seen == []


def test_a_name_that_now_resolves_to_a_metadata_service_is_refused_when_connecting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(outbound, "resolver", lambda host, port: ["169.254.169.254"])
    backend = SlurmBackend("http://slurm.lab.test:6820", {"user": "root", "token": SLURM_TOKEN}, timeout=5)
    with pytest.raises(NotAllowed, match=r"slurm\.lab\.test resolves to a cloud metadata service"):
        backend.inventory()


def test_kubernetes_goes_through_the_policy(settings: Any) -> None:
    with KubeServer() as kube:
        settings.CLUSTER_ENDPOINTS_ALLOW_LOOPBACK = False
        with pytest.raises(NotAllowed, match="this server itself"):
            KubernetesBackend(kube.url, {"token": KUBE_TOKEN}, timeout=5).inventory()
        assert kube.requests == []
        settings.CLUSTER_ENDPOINTS_ALLOW_LOOPBACK = True
        assert KubernetesBackend(kube.url, {"token": KUBE_TOKEN}, timeout=5).inventory().nodes
        assert kube.requests


def test_kubernetes_does_not_repeat_a_body_that_is_not_a_status(
    serve: Callable[[int, dict[str, str], bytes], tuple[str, type[Recorder]]],
) -> None:
    endpoint, _ = serve(500, {"Content-Type": "text/plain"}, METADATA_ANSWER.encode())
    with pytest.raises(Unreachable) as failed:
        KubernetesBackend(endpoint, {"token": KUBE_TOKEN}, timeout=5).inventory()
    assert "ASIAFAKEKEY" not in str(failed.value)
    assert "Internal Server Error" in str(failed.value)
    assert "ASIAFAKEKEY" in failed.value.detail


def test_tpu_goes_through_the_policy(settings: Any) -> None:
    with TpuServer() as tpu:
        options = {"project": tpu.project, "zone": tpu.zone}
        settings.CLUSTER_ENDPOINTS_ALLOW_LOOPBACK = False
        with pytest.raises(NotAllowed, match="this server itself"):
            TpuBackend(tpu.url, options=options, timeout=5).inventory()
        assert tpu.requests == []
        settings.CLUSTER_ENDPOINTS_ALLOW_LOOPBACK = True
        assert TpuBackend(tpu.url, options=options, timeout=5).inventory().nodes
        tpu.canned = (503, METADATA_ANSWER.encode())
        with pytest.raises(Unreachable) as failed:
            TpuBackend(tpu.url, options=options, timeout=5).inventory()
        assert "ASIAFAKEKEY" not in str(failed.value)


def test_google_auth_refreshes_tokens_through_the_policy(
    serve: Callable[[int, dict[str, str], bytes], tuple[str, type[Recorder]]], settings: Any
) -> None:
    """A service account's token_uri comes from the key an admin pasted: the session google-auth posts to it
    is the policy's, and what it answers is not repeated."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from google.oauth2.service_account import Credentials

    token_uri, token_endpoint = serve(400, {"Content-Type": "text/plain"}, METADATA_ANSWER.encode())
    pem = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        .private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        .decode()
    )
    info = {
        "type": "service_account",
        "client_email": "qm@p.iam.gserviceaccount.com",
        "private_key": pem,
        "token_uri": f"{token_uri}/token",
    }
    # A grant, as google-auth makes when it does not sign its own JWT: to token_uri, through the request object
    # the TPU client's session refreshes with.
    credentials = Credentials.from_service_account_info(info, scopes=SCOPES)  # type: ignore[no-untyped-call]

    def backend() -> TpuBackend:
        return TpuBackend(tpu.url, {"service_account_json": json.dumps(info)}, {"project": "p", "zone": "z"})

    with TpuServer() as tpu:
        settings.CLUSTER_ENDPOINTS_ALLOW_LOOPBACK = False
        closed = backend()
        with pytest.raises(NotAllowed, match="this server itself"), closed._calls("refreshing the token"):
            credentials.refresh(auth_request(closed))
        assert token_endpoint.seen == []
        settings.CLUSTER_ENDPOINTS_ALLOW_LOOPBACK = True
        open_ = backend()
        with pytest.raises(AuthenticationFailed) as refused, open_._calls("refreshing the token"):
            credentials.refresh(auth_request(open_))
        assert [(method, path) for method, path, _ in token_endpoint.seen] == [("POST", "/token")]
        assert "ASIAFAKEKEY" not in str(refused.value)
        assert "ASIAFAKEKEY" in refused.value.detail


def auth_request(backend: TpuBackend) -> Any:
    """The request object the TPU client's session refreshes tokens with (google-auth's ``_auth_request``)."""
    return backend.client._transport._session._auth_request  # type: ignore[attr-defined]


def test_a_bad_response_keeps_the_body_for_the_log_only(
    serve: Callable[[int, dict[str, str], bytes], tuple[str, type[Recorder]]],
) -> None:
    endpoint, _ = serve(502, {"Content-Type": "text/html"}, b"<html>" + METADATA_ANSWER.encode() + b"</html>")
    with pytest.raises(BadResponse) as failed:
        SlurmBackend(endpoint, {"user": "root", "token": SLURM_TOKEN}, timeout=5).inventory()
    assert "HTTP 502 and a body that is not JSON" in str(failed.value)
    assert "ASIAFAKEKEY" not in str(failed.value)
    assert "ASIAFAKEKEY" in failed.value.detail
