"""Where the server may send HTTP requests on a user's behalf: the one outbound-destination policy.

Cluster endpoints (set by organization admins), a TPU service account's ``token_uri`` and budget webhooks
(set by team leads) are addresses a tenant chose; the server connects to them from inside its own network.
Every HTTP client that talks to such an address goes through a ``Policy``:

- **when the address is saved**, ``Policy.validate(url, field)`` checks the URL (http or https, no user or
  password in it), resolves the name and checks every address it has, and raises a ``ValidationError``
  naming the field. A name that does not resolve yet is accepted (a cluster may be registered before its
  DNS record exists); it is checked again when used;
- **when a connection is made**, the connection classes below resolve the name, check every address and
  connect to an address that was checked, so a DNS answer that changes between the check and the connection
  (rebinding) cannot redirect it. TLS still sends the host name (SNI) and verifies the certificate against
  it. They are installed into requests sessions (``Policy.session``, ``Policy.confine``) and into a urllib3
  pool manager (``Policy.confine_pool_manager``, for the Kubernetes client). Proxies from the environment
  are not used: a proxy would make the connection, and its own choices, not the checked address;
- **redirects are never followed**: an answer 3xx is an error naming the status (``RedirectRefused``), so
  credentials sent with a request (a Slurm token header, a bearer token) never reach another host.

What is refused, always: the clouds' metadata services (their answers hold the server's own credentials:
``METADATA_ADDRESSES`` and ``METADATA_NAMES``), link-local, unspecified, multicast, reserved and broadcast
addresses. Loopback (this machine) only where the policy allows it; private networks (RFC 1918, unique-local
IPv6, shared address space) only where it allows them. IPv6 forms that carry an IPv4 address (mapped
``::ffff:a.b.c.d``, compatible, NAT64, 6to4, Teredo) are judged by that address too, and a trailing dot on a
name changes nothing. ``for_clusters()``, ``for_webhooks()`` and ``for_replicas()`` are the policies in use;
their settings are read when they are asked for, never at import.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any, ClassVar, TypeAlias
from urllib.parse import urlsplit

import requests
import urllib3
from django.conf import settings
from django.core.exceptions import ValidationError
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError, ProtocolError
from urllib3.util import connection as urllib3_connection

log = logging.getLogger(__name__)

Address: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address

#: The instance metadata services of the major clouds, and the neighbouring agents that hand out credentials.
METADATA_ADDRESSES: frozenset[Address] = frozenset(
    ipaddress.ip_address(address)
    for address in (
        "169.254.169.254",  # AWS, Google Cloud, Azure, Oracle, OpenStack, DigitalOcean, IBM, Hetzner, Huawei
        "fd00:ec2::254",  # AWS IMDS over IPv6 (Nitro)
        "169.254.170.2",  # AWS ECS task metadata and credentials
        "169.254.170.23",  # AWS EKS Pod Identity agent
        "fd00:ec2::23",  # AWS EKS Pod Identity agent over IPv6
        "fd20:ce::254",  # Google Cloud metadata over IPv6
        "168.63.129.16",  # Azure WireServer (agent configuration, certificates)
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud (classic)
        "169.254.0.23",  # Tencent Cloud
        "169.254.42.42",  # Scaleway
        "fd00:42::42",  # Scaleway over IPv6
    )
)
#: Names of those services, refused even where they do not resolve here (they resolve on the cloud's hosts).
METADATA_NAMES = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.tencentyun.com",
        "metadata.platformequinix.com",
    }
)
#: IPv6 prefixes that embed an IPv4 address in their last 32 bits (NAT64, well-known and local-use).
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")


class Refused(Exception):
    """The policy does not let the server connect there; the message says why, in words for whoever set it."""


class PolicyRefusal(Exception):
    """Marks the urllib3 errors the policy raises, so clients can tell them from a network failure."""


class DestinationRefused(NewConnectionError, PolicyRefusal):
    """Raised by the policy's connections in place of connecting (urllib3 and requests treat it as a failed
    connection). ``words`` is the policy's message alone, without urllib3's description of the connection."""

    def __init__(self, conn: HTTPConnection, words: str) -> None:
        super().__init__(conn, words)
        self.words = words


class RedirectRefused(ProtocolError, PolicyRefusal):
    """An answer 3xx: redirects are not followed (they would take the request, and its credentials, elsewhere)."""


def system_resolver(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (the seam tests replace to play DNS rebinding)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


#: How names are resolved; replaced in tests only.
resolver: Callable[[str, int], list[str]] = system_resolver


def plain_host(host: str) -> str:
    """The host as names and addresses compare: without brackets, trailing dots or case."""
    return host.strip().strip("[]").rstrip(".").lower()


def literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None


def _forms(address: Address) -> list[Address]:
    """The address and any IPv4 address it carries. Mapped and compatible forms *are* that address."""
    if isinstance(address, ipaddress.IPv4Address):
        return [address]
    address = ipaddress.IPv6Address(int(address))  # drops a scope id
    if address.ipv4_mapped is not None:
        return [address.ipv4_mapped]
    packed = int(address)
    if packed >> 32 == 0 and packed > 1:  # IPv4-compatible ::a.b.c.d (not :: or ::1)
        return [ipaddress.IPv4Address(packed)]
    if packed >> 32 == 0xFFFF0000:  # IPv4-translated ::ffff:0:a.b.c.d
        return [ipaddress.IPv4Address(packed & 0xFFFFFFFF)]
    forms: list[Address] = [address]
    if any(address in network for network in _NAT64):
        forms.append(ipaddress.IPv4Address(packed & 0xFFFFFFFF))
    if address.sixtofour is not None:
        forms.append(address.sixtofour)
    if address.teredo is not None:
        forms.extend(address.teredo)
    return forms


@dataclass(frozen=True)
class Policy:
    """Which destinations one kind of outbound request may reach.

    ``purpose`` names the requests in messages ("cluster endpoints"); ``loopback_setting`` and
    ``private_setting`` name the settings that would allow what is refused, for the message to say.
    ``networks``, when given, are the only networks reached beyond loopback (``networks_setting`` names them)."""

    purpose: str
    allow_loopback: bool
    allow_private: bool
    loopback_setting: str = ""
    private_setting: str = ""
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    networks_setting: str = ""

    # -- judging addresses and names

    def why_refused(self, address: Address) -> str | None:
        """Why the policy refuses ``address``, or None when it may be reached."""
        for form in _forms(address):
            if form in METADATA_ADDRESSES:
                return "a cloud metadata service"
            if form.is_unspecified or form in _THIS_NETWORK:
                return "an unspecified address"
            if form.is_link_local:
                return "a link-local address"
            if form.is_multicast:
                return "a multicast address"
            if form.is_loopback:
                if not self.allow_loopback:
                    return "this server itself (loopback)" + self._hint(self.loopback_setting)
                continue
            if form.is_reserved or form == ipaddress.IPv4Address("255.255.255.255"):
                return "a reserved address"
            if not form.is_global and not self.allow_private:
                return "a private network address" + self._hint(self.private_setting)
            if self.networks and not any(form in network for network in self.networks):
                where = f" ({self.networks_setting})" if self.networks_setting else ""
                return "outside the networks allowed" + where
        return None

    @staticmethod
    def _hint(setting: str) -> str:
        return f" (the setting {setting} allows it)" if setting else ""

    def addresses(self, host: str, port: int) -> list[Address]:
        """Every address ``host`` resolves to, each checked; ``Refused`` if any is refused (a name with one bad
        address among good ones is refused: which one a connection gets is not ours to choose).
        ``socket.gaierror`` when the name does not resolve."""
        plain = plain_host(host)
        if plain in METADATA_NAMES:
            raise Refused(f"{plain} is a cloud metadata service; {self.purpose} may not reach it.")
        given = literal(plain)
        found = (
            [given] if given is not None else [ipaddress.ip_address(a.split("%", 1)[0]) for a in resolver(plain, port)]
        )
        if not found:
            raise socket.gaierror(socket.EAI_NONAME, f"{plain} has no address")
        for address in found:
            why = self.why_refused(address)
            if why is not None:
                if given is None:
                    log.warning("outbound: %s resolves to %s, %s: refused for %s", plain, address, why, self.purpose)
                    raise Refused(f"{plain} resolves to {why}; {self.purpose} may not reach it.")
                raise Refused(f"{plain} is {why}; {self.purpose} may not reach it.")
        return list(dict.fromkeys(found))

    def check(self, url: str) -> None:
        """``Refused`` unless ``url`` is an http(s) URL without credentials whose host the policy allows. A name
        that does not resolve passes (it is checked again at each connection)."""
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            raise Refused("Enter an http:// or https:// URL.") from None
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            raise Refused("Enter an http:// or https:// URL.")
        if parts.username is not None or parts.password is not None:
            raise Refused("Leave the user and password out of the URL.")
        with contextlib.suppress(socket.gaierror, UnicodeError):  # not resolvable yet: checked when used
            self.addresses(parts.hostname, port or (443 if parts.scheme.lower() == "https" else 80))

    def validate(self, url: str, field: str) -> None:
        """``check`` for a form or an API: a ``ValidationError`` naming ``field``."""
        try:
            self.check(url)
        except Refused as refused:
            raise ValidationError({field: str(refused)}) from None

    # -- clients that obey it

    def session(self) -> requests.Session:
        """A requests session that connects only where the policy allows, to the address it checked."""
        return self.confine(requests.Session())

    def confine(self, session: requests.Session) -> requests.Session:
        """Make ``session`` (a plain one, or a subclass such as google-auth's) obey the policy: its adapters
        pin checked addresses and refuse redirects; no proxy or ``.netrc`` from the environment."""
        session.trust_env = False
        session.proxies = {}
        session.max_redirects = 0
        adapter = _PolicyAdapter(self)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        return session

    def confine_pool_manager(self, manager: urllib3.PoolManager) -> urllib3.PoolManager:
        """Make a urllib3 pool manager's future pools use the policy's connections (call before any request)."""
        if isinstance(manager, urllib3.ProxyManager):
            raise TypeError("a proxy would make the connections the policy checks; configure no proxy")
        manager.pool_classes_by_scheme = dict(_pool_classes(self))
        manager.clear()
        return manager


def explain(error: BaseException) -> str | None:
    """The policy's words when ``error`` (from requests, urllib3 or a client wrapping them) is, or was caused
    by, a refusal of the policy; None for any other failure."""
    seen: set[int] = set()
    todo: list[BaseException] = [error]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, DestinationRefused):
            return current.words
        if isinstance(current, PolicyRefusal):
            return str(current)
        nested: Iterable[Any] = (
            getattr(current, "reason", None),
            current.__cause__,
            current.__context__,
            *current.args,
        )
        todo.extend(item for item in nested if isinstance(item, BaseException))
    return None


# -- the urllib3 machinery


class _PolicyConnection(HTTPConnection):
    """Resolves through the policy and connects to an address it checked. The host name stays the
    connection's ``host``: the ``Host`` header, TLS SNI and certificate verification use it."""

    policy: ClassVar[Policy]

    def _new_conn(self) -> socket.socket:
        port = self.port or self.default_port
        try:
            addresses = self.policy.addresses(self._dns_host, port)
        except Refused as refused:
            raise DestinationRefused(self, str(refused)) from None
        except (socket.gaierror, UnicodeError) as error:
            raise NameResolutionError(self.host, self, socket.gaierror(str(error))) from error
        failure: OSError | None = None
        for address in addresses:
            try:
                return urllib3_connection.create_connection(
                    (str(address), port),
                    self.timeout,
                    source_address=self.source_address,
                    socket_options=self.socket_options,
                )
            except OSError as error:  # timeouts too: try the next address, as create_connection does
                failure = error
        if isinstance(failure, TimeoutError):
            raise ConnectTimeoutError(self, f"Connection to {self.host} timed out. (connect timeout={self.timeout})")
        raise NewConnectionError(self, f"Failed to establish a new connection: {failure}")


class _PolicyHTTPSConnection(_PolicyConnection, HTTPSConnection):
    pass


def _refuse_redirects(pool: HTTPConnectionPool, response: urllib3.BaseHTTPResponse) -> urllib3.BaseHTTPResponse:
    if 300 <= response.status < 400:
        response.drain_conn()
        response.release_conn()
        raise RedirectRefused(
            f"{pool.host} answered HTTP {response.status} (a redirect); redirects are not followed: "
            "give the address that answers itself"
        )
    return response


class _PolicyPool(HTTPConnectionPool):
    def urlopen(self, *args: Any, **kwargs: Any) -> urllib3.BaseHTTPResponse:
        return _refuse_redirects(self, super().urlopen(*args, **kwargs))


class _PolicyHTTPSPool(HTTPSConnectionPool):
    def urlopen(self, *args: Any, **kwargs: Any) -> urllib3.BaseHTTPResponse:
        return _refuse_redirects(self, super().urlopen(*args, **kwargs))


@cache
def _pool_classes(policy: Policy) -> tuple[tuple[str, type[HTTPConnectionPool]], ...]:
    """Pool classes whose connections obey ``policy`` (made once per policy)."""
    plain = type("PolicyConnection", (_PolicyConnection,), {"policy": policy})
    tls = type("PolicyHTTPSConnection", (_PolicyHTTPSConnection,), {"policy": policy})
    return (
        ("http", type("PolicyPool", (_PolicyPool,), {"ConnectionCls": plain})),
        ("https", type("PolicyHTTPSPool", (_PolicyHTTPSPool,), {"ConnectionCls": tls})),
    )


class _PolicyAdapter(HTTPAdapter):
    def __init__(self, policy: Policy) -> None:
        self.policy = policy  # before the base class builds its pool manager
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.policy.confine_pool_manager(self.poolmanager)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        raise requests.exceptions.InvalidProxyURL("the outbound policy connects directly; no proxy")


# -- the policies in use


def for_clusters() -> Policy:
    """Cluster endpoints and what their backends call (a TPU service account's token endpoint). Private
    networks are allowed: on-prem clusters live there. Loopback only with CLUSTER_ENDPOINTS_ALLOW_LOOPBACK."""
    return Policy(
        purpose="cluster endpoints",
        allow_loopback=bool(getattr(settings, "CLUSTER_ENDPOINTS_ALLOW_LOOPBACK", False)),
        allow_private=True,
        loopback_setting="CLUSTER_ENDPOINTS_ALLOW_LOOPBACK",
    )


def for_webhooks() -> Policy:
    """Webhooks and other notifications to URLs tenants give. Team leads set them, not the operators, so
    private networks and loopback are refused unless WEBHOOKS_ALLOW_PRIVATE says the site's relay lives there."""
    private = bool(getattr(settings, "WEBHOOKS_ALLOW_PRIVATE", False))
    return Policy(
        purpose="webhooks",
        allow_loopback=private,
        allow_private=private,
        loopback_setting="WEBHOOKS_ALLOW_PRIVATE",
        private_setting="WEBHOOKS_ALLOW_PRIVATE",
    )


def for_replicas() -> Policy:
    """Service replicas (``serving``): the addresses their programs report (``Attempt.serve_url``), probed by
    the control loop and reached by the endpoint. They are the cluster's nodes, on private networks as cluster
    endpoints are; loopback (replicas run by the simulated backend on this machine) only with
    REPLICAS_ALLOW_LOOPBACK (default on outside production); only the clusters' node networks when
    REPLICAS_NETWORKS names them."""
    return Policy(
        purpose="service replicas",
        allow_loopback=bool(getattr(settings, "REPLICAS_ALLOW_LOOPBACK", False)),
        allow_private=bool(getattr(settings, "REPLICAS_ALLOW_PRIVATE", True)),
        loopback_setting="REPLICAS_ALLOW_LOOPBACK",
        private_setting="REPLICAS_ALLOW_PRIVATE",
        networks=tuple(getattr(settings, "REPLICAS_NETWORKS", ())),
        networks_setting="REPLICAS_NETWORKS",
    )


__all__ = [
    "METADATA_ADDRESSES",
    "METADATA_NAMES",
    "DestinationRefused",
    "Policy",
    "PolicyRefusal",
    "RedirectRefused",
    "Refused",
    "explain",
    "for_clusters",
    "for_replicas",
    "for_webhooks",
    "system_resolver",
]
