"""The outbound-destination policy (``common/outbound.py``): which addresses it refuses, names resolved and
every address checked, the checked address pinned for the connection (DNS rebinding), TLS still on the host
name, redirects refused, no proxy from the environment."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
import urllib3
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.core.exceptions import ValidationError

from common import outbound

CLUSTERS = outbound.Policy("cluster endpoints", allow_loopback=False, allow_private=True)
CLUSTERS_WITH_LOOPBACK = outbound.Policy("cluster endpoints", allow_loopback=True, allow_private=True)
WEBHOOKS = outbound.Policy("webhooks", allow_loopback=False, allow_private=False)

#: The addresses the outside review got through the old guard, and their neighbours: refused by every policy.
ALWAYS_REFUSED = [
    "http://metadata.google.internal./computeMetadata/v1/",
    "http://METADATA.google.internal/",
    "http://metadata/",
    "http://169.254.169.254/latest/meta-data/",
    "http://[::ffff:169.254.169.254]/",
    "http://[0:0:0:0:0:ffff:a9fe:a9fe]/",  # the same, spelt out
    "http://[::169.254.169.254]/",  # IPv4-compatible
    "http://[64:ff9b::169.254.169.254]/",  # NAT64
    "http://[2002:a9fe:a9fe::1]/",  # 6to4
    "http://[fd00:ec2::254]/",
    "http://[fd20:ce::254]/",
    "http://169.254.170.2/v2/credentials",
    "http://100.100.100.200/latest/meta-data/",
    "http://192.0.0.192/",
    "http://168.63.129.16/machine?comp=goalstate",
    "http://0.0.0.0:6820/",
    "http://[::]:6820/",
    "http://169.254.1.1/",
    "http://[fe80::1]/",
    "http://224.0.0.1/",
    "http://[ff02::1]/",
    "http://255.255.255.255/",
    "http://240.0.0.1/",
]
LOOPBACK = [
    "http://127.0.0.1:17080/",
    "http://[::ffff:127.0.0.1]:17080/",
    "http://[0:0:0:0:0:ffff:7f00:1]/",
    "http://[::1]/",
    "http://127.9.9.9/",
    "http://localhost:8000/",
    "http://localhost./",
]
PRIVATE = [
    "http://10.1.2.3:6443/",
    "http://192.168.0.10/",
    "http://172.16.5.5/",
    "http://100.64.0.1/",
    "http://[fd12:3456::1]/",
]


@pytest.mark.parametrize("url", ALWAYS_REFUSED)
@pytest.mark.parametrize("policy", [CLUSTERS_WITH_LOOPBACK, WEBHOOKS], ids=["clusters", "webhooks"])
def test_metadata_link_local_unspecified_multicast_and_reserved_are_always_refused(
    policy: outbound.Policy, url: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        policy.validate(url, "endpoint")
    assert list(refused.value.message_dict) == ["endpoint"]
    assert f"{policy.purpose} may not reach it" in refused.value.message_dict["endpoint"][0]


@pytest.mark.parametrize("url", LOOPBACK)
def test_loopback_only_where_allowed(url: str) -> None:
    with pytest.raises(outbound.Refused, match="this server itself"):
        CLUSTERS.check(url)
    CLUSTERS_WITH_LOOPBACK.check(url)


def test_a_name_of_this_machine_resolves_really_and_is_refused() -> None:
    for name in ("localhost", "ip6-localhost"):
        try:
            socket.getaddrinfo(name, 80)
        except socket.gaierror:
            continue  # not every machine's hosts file has ip6-localhost
        with pytest.raises(outbound.Refused, match=f"{name} resolves to this server itself"):
            CLUSTERS.check(f"https://{name}:6443/")


@pytest.mark.parametrize("url", PRIVATE)
def test_private_networks_are_for_clusters_not_for_webhooks(url: str) -> None:
    CLUSTERS.check(url)  # on-prem clusters live there
    with pytest.raises(outbound.Refused, match="a private network address"):
        WEBHOOKS.check(url)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://hooks.example.com/", "http:// or https://"),
        ("file:///etc/passwd", "http:// or https://"),
        ("http:///nohost", "http:// or https://"),
        ("http://admin:pw@hooks.example.com/", "user and password"),
        ("http://hooks.example.com:99999/", "http:// or https://"),
    ],
)
def test_urls_are_http_without_credentials(url: str, message: str) -> None:
    with pytest.raises(outbound.Refused, match=message):
        WEBHOOKS.check(url)


def test_a_name_that_does_not_resolve_yet_is_accepted_and_checked_at_use(fake_dns: dict[str, list[str]]) -> None:
    WEBHOOKS.check("https://hooks.example.com/x")  # nothing known of it yet
    fake_dns["hooks.example.com"] = ["93.184.216.34"]
    WEBHOOKS.check("https://hooks.example.com/x")
    fake_dns["hooks.example.com"] = ["93.184.216.34", "10.0.0.8"]  # one bad address among good ones
    with pytest.raises(outbound.Refused, match=r"hooks\.example\.com resolves to a private network address"):
        WEBHOOKS.check("https://hooks.example.com./x")


def test_the_settings_make_the_policies(settings: Any) -> None:
    settings.CLUSTER_ENDPOINTS_ALLOW_LOOPBACK = False
    settings.WEBHOOKS_ALLOW_PRIVATE = False
    assert (outbound.for_clusters().allow_loopback, outbound.for_clusters().allow_private) == (False, True)
    assert (outbound.for_webhooks().allow_loopback, outbound.for_webhooks().allow_private) == (False, False)
    settings.CLUSTER_ENDPOINTS_ALLOW_LOOPBACK = True
    settings.WEBHOOKS_ALLOW_PRIVATE = True
    assert outbound.for_clusters().allow_loopback
    assert (outbound.for_webhooks().allow_loopback, outbound.for_webhooks().allow_private) == (True, True)
    settings.CLUSTER_ENDPOINTS_ALLOW_LOOPBACK = False
    with pytest.raises(outbound.Refused, match=r"\(the setting CLUSTER_ENDPOINTS_ALLOW_LOOPBACK allows it\)"):
        outbound.for_clusters().check("http://127.0.0.1/")


def test_replicas_only_on_the_node_networks_when_the_operator_names_them(settings: Any) -> None:
    outbound.for_replicas().check("http://10.99.0.7:20001/")  # private networks, by default
    settings.REPLICAS_NETWORKS = (ipaddress.ip_network("10.20.0.0/16"), ipaddress.ip_network("fd00::/64"))
    settings.REPLICAS_ALLOW_LOOPBACK = True
    policy = outbound.for_replicas()
    policy.check("http://10.20.3.4:20001/")
    policy.check("http://[fd00::7]:20001/")
    policy.check("http://127.0.0.1:20001/")  # loopback stays with its own setting
    for url in ("http://10.99.0.7:20001/", "http://172.16.0.1:20001/", "http://93.184.216.34/"):
        with pytest.raises(outbound.Refused, match=r"outside the networks allowed \(REPLICAS_NETWORKS\)"):
            policy.check(url)
    with pytest.raises(outbound.Refused, match="a cloud metadata service"):
        policy.check("http://169.254.169.254/")


# ---------------------------------------------------------------------------------------- connections


class Recorder(BaseHTTPRequestHandler):
    """Answers 200 "ok", or ``answer`` (status, headers); records each request's path and headers."""

    seen: list[tuple[str, dict[str, str]]]
    answer: tuple[int, dict[str, str]] = (200, {})

    def do_GET(self) -> None:
        type(self).seen.append((self.path, dict(self.headers)))
        status, headers = type(self).answer
        self.send_response(status)
        for name, value in {"Content-Length": "2", **headers}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(b"ok")

    do_POST = do_GET

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def serve() -> Iterator[Callable[..., tuple[int, type[Recorder]]]]:
    """Start recording HTTP servers on 127.0.0.1: (port, handler class)."""
    servers: list[ThreadingHTTPServer] = []

    def start(
        status: int = 200, headers: dict[str, str] | None = None, *, tls: ssl.SSLContext | None = None
    ) -> tuple[int, type[Recorder]]:
        handler = type("Handler", (Recorder,), {"seen": [], "answer": (status, headers or {})})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        if tls is not None:
            server.socket = tls.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return server.server_address[1], handler

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def fake_dns(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """Names the policy resolves, and how often it asked: a DNS server the test controls (the policy's seam)."""
    records: dict[str, list[str]] = {}

    def resolve(host: str, port: int) -> list[str]:
        records.setdefault("?asked", []).append(host)
        if host not in records:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return list(records[host])

    monkeypatch.setattr(outbound, "resolver", resolve)
    return records


def test_the_connection_goes_to_the_address_that_was_checked(
    serve: Callable[..., tuple[int, type[Recorder]]], fake_dns: dict[str, list[str]]
) -> None:
    port, handler = serve()
    fake_dns["slurm.lab.test"] = ["127.0.0.1"]
    with CLUSTERS_WITH_LOOPBACK.session() as session:
        assert session.get(f"http://slurm.lab.test:{port}/ping", timeout=5).text == "ok"
    # The system resolver knows no such name: the socket went to the address the policy resolved and checked,
    # once; the request still names the host.
    with pytest.raises(socket.gaierror):
        socket.getaddrinfo("slurm.lab.test", port)
    assert fake_dns["?asked"] == ["slurm.lab.test"]
    ((path, headers),) = handler.seen
    assert (path, headers["Host"]) == ("/ping", f"slurm.lab.test:{port}")


def test_dns_rebinding_after_the_check_is_refused_at_the_connection(
    serve: Callable[..., tuple[int, type[Recorder]]], fake_dns: dict[str, list[str]]
) -> None:
    port, handler = serve()
    url = f"http://hooks.lab.test:{port}/budget"
    fake_dns["hooks.lab.test"] = ["93.184.216.34"]
    WEBHOOKS.check(url)  # saved: it was a public address then
    fake_dns["hooks.lab.test"] = ["127.0.0.1"]  # and now it is this server
    with WEBHOOKS.session() as session, pytest.raises(requests.ConnectionError) as failed:
        session.post(url, json={}, timeout=5)
    assert (
        outbound.explain(failed.value)
        == "hooks.lab.test resolves to this server itself (loopback); webhooks may not reach it."
    )
    assert handler.seen == []


def test_a_redirect_is_an_error_and_is_not_followed(serve: Callable[..., tuple[int, type[Recorder]]]) -> None:
    other_port, other = serve()
    port, handler = serve()
    handler.answer = (302, {"Location": f"http://127.0.0.1:{other_port}/steal"})
    with CLUSTERS_WITH_LOOPBACK.session() as session, pytest.raises(requests.ConnectionError) as failed:
        session.get(f"http://127.0.0.1:{port}/", headers={"Authorization": "Bearer s3cret"}, timeout=5)
    assert "answered HTTP 302 (a redirect); redirects are not followed" in str(outbound.explain(failed.value))
    assert len(handler.seen) == 1
    assert other.seen == []


def test_a_urllib3_pool_manager_obeys_the_policy(serve: Callable[..., tuple[int, type[Recorder]]]) -> None:
    """How the Kubernetes client is confined: its pool manager's pools make the policy's connections."""
    port, handler = serve()
    manager = CLUSTERS.confine_pool_manager(urllib3.PoolManager(retries=False))
    with pytest.raises(outbound.DestinationRefused, match="this server itself"):
        manager.request("GET", f"http://127.0.0.1:{port}/")
    assert handler.seen == []
    with pytest.raises(TypeError, match="proxy"):
        CLUSTERS.confine_pool_manager(urllib3.ProxyManager("http://127.0.0.1:3128"))
    # A pool manager follows redirects itself (the Kubernetes client's would, with its bearer token): not here.
    other_port, other = serve()
    handler.answer = (302, {"Location": f"http://127.0.0.1:{other_port}/"})
    manager = CLUSTERS_WITH_LOOPBACK.confine_pool_manager(urllib3.PoolManager())
    with pytest.raises(outbound.RedirectRefused, match="HTTP 302"):
        manager.request("GET", f"http://127.0.0.1:{port}/", headers={"Authorization": "Bearer s3cret"})
    assert len(handler.seen) == 1
    assert other.seen == []


def test_no_proxy_is_taken_from_the_environment(
    serve: Callable[..., tuple[int, type[Recorder]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy_port, proxy = serve()
    port, handler = serve()
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy_port}")
    monkeypatch.setenv("NO_PROXY", "")
    with CLUSTERS_WITH_LOOPBACK.session() as session:
        assert session.get(f"http://127.0.0.1:{port}/direct", timeout=5).status_code == 200
    assert [path for path, _ in handler.seen] == ["/direct"]
    assert proxy.seen == []


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A CA and a certificate it signed for the name kube.lab.test only (no IP address): (ca, cert, key)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(2)
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("kube.lab.test")]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("outbound-tls")
    (folder / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return folder / "ca.pem", folder / "cert.pem", folder / "key.pem"


def test_tls_names_and_verifies_the_host_while_connecting_to_the_checked_address(
    serve: Callable[..., tuple[int, type[Recorder]]],
    fake_dns: dict[str, list[str]],
    certificate: tuple[Path, Path, Path],
) -> None:
    ca, cert, key = certificate
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server_names: list[str | None] = []
    context.sni_callback = lambda _socket, name, _context: server_names.append(name)  # type: ignore[assignment,func-returns-value]
    port, handler = serve(tls=context)
    fake_dns["kube.lab.test"] = ["127.0.0.1"]
    with CLUSTERS_WITH_LOOPBACK.session() as session:
        assert session.get(f"https://kube.lab.test:{port}/version", verify=str(ca), timeout=5).text == "ok"
    assert server_names == ["kube.lab.test"]  # SNI: the name, not the address connected to
    # The certificate is checked against the name: the same server by its address is not who it says it is.
    with CLUSTERS_WITH_LOOPBACK.session() as session, pytest.raises(requests.exceptions.SSLError):
        session.get(f"https://127.0.0.1:{port}/version", verify=str(ca), timeout=5)
    assert len(handler.seen) == 1


def test_every_ipv6_form_of_an_ipv4_address_is_judged_as_that_address() -> None:
    for text in ("::ffff:127.0.0.1", "0:0:0:0:0:ffff:7f00:1", "::127.0.0.1", "::ffff:0:127.0.0.1"):
        address = ipaddress.ip_address(text)
        assert CLUSTERS.why_refused(address) is not None, text
        assert CLUSTERS_WITH_LOOPBACK.why_refused(address) is None, text
