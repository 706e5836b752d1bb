"""Who is asking: the one definition of a request's client address, for the audit log and sign-in lockouts.

REMOTE_ADDR is the peer that opened the connection. Behind a proxy that peer is the proxy, so a deployment
behind one sets ``TRUST_X_FORWARDED_FOR`` and has the proxy overwrite X-Forwarded-For with the address it saw
(``deploy/README.md``). Without that setting the header is only what the client says about itself, and is
ignored: a client that changes it must not become somebody else, or a lockout keyed on it never holds.
"""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpRequest


def _address(text: str) -> str | None:
    """``text`` as one canonical address (IPv4-mapped IPv6 as IPv4), or None when it is not an address."""
    try:
        address = ipaddress.ip_address(text.strip())
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return str(address)


def client_address(request: HttpRequest) -> str | None:
    """The client's address: the trusted proxy's X-Forwarded-For when the deployment has one, else the peer's.

    A header that holds no address falls back to the peer (the proxy), never to a text that the database's
    address columns would refuse.
    """
    if settings.TRUST_X_FORWARDED_FOR:
        forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
        found = _address(forwarded.split(",")[0]) if forwarded else None
        if found is not None:
            return found
    return _address(str(request.META.get("REMOTE_ADDR") or ""))
