"""Posting to a webhook a tenant gave: the one way budget alerts and job notifications reach a chat or a relay.

Every POST goes through the webhooks' outbound policy (``outbound.for_webhooks``), checked again at each send:
a URL may predate the policy, and its name may resolve elsewhere today. Redirects are not followed, and any
answer but 2xx is a failure for the caller to retry. The body carries an ``Idempotency-Key`` header: a crash
between sending and recording the send may send one twice, and the receiver can tell.

A webhook's URL is often a secret (a chat's incoming webhook carries its token in the path): what people other
than its owner read, and what errors record, is ``host_of`` the URL, never the URL.
"""

from __future__ import annotations

import hashlib
from typing import Any
from urllib.parse import urlsplit

import requests
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator

from common import outbound

#: Seconds a receiver has to answer.
TIMEOUT = 10.0
#: The longest URL anyone may set.
MAX_URL_LENGTH = 500
#: What a failed delivery records for the person who set the URL, whatever the failure: one message, so that
#: it tells nothing of what answers where inside the network (the server's log has the reason).
FAILED = "webhook: not delivered"


def post(url: str, body: dict[str, Any], key: str) -> None:
    """POST ``body`` as JSON to ``url`` through the webhooks' policy, with ``key`` as its Idempotency-Key.
    Raises ``requests.RequestException`` (an answer but 2xx included) or ``outbound.Refused``."""
    policy = outbound.for_webhooks()
    policy.check(url)
    with policy.session() as session:
        response = session.post(url, json=body, headers={"Idempotency-Key": key}, timeout=TIMEOUT)
        response.close()
    if not 200 <= response.status_code < 300:
        raise requests.HTTPError(f"HTTP {response.status_code}", response=response)


def check_url(value: Any) -> str:
    """A webhook URL as given in a form or an API body, stripped; empty for none. ``ValidationError`` (a message,
    for the caller to put under its field) when it is not an http(s) URL, too long, or one the policy refuses."""
    if not isinstance(value, str | type(None)):
        raise ValidationError("A URL.")
    url = (value or "").strip()
    if not url:
        return ""
    try:
        URLValidator(schemes=["http", "https"])(url)
    except ValidationError:
        raise ValidationError("An http:// or https:// URL.") from None
    if len(url) > MAX_URL_LENGTH:
        raise ValidationError(f"At most {MAX_URL_LENGTH} characters.")
    try:
        outbound.for_webhooks().check(url)
    except outbound.Refused as refused:
        raise ValidationError(str(refused)) from None
    return url


def host_of(url: str) -> str:
    """A webhook as others may read it: its host, and a fingerprint that tells one URL from another."""
    if not url:
        return ""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}/… ({hashlib.sha256(url.encode()).hexdigest()[:8]})"
