"""Secrets kept at rest that must be read back: the one cipher of the project.

Fernet (AES-128-CBC with an HMAC) under a key derived from ``CREDENTIALS_KEY`` or, when that is not set,
``SECRET_KEY``, with a separate derivation per purpose (HKDF's info) so one kind of sealed value never opens
as another. Its users: an identity provider's refresh tokens (``seal``/``unseal`` here: a value sealed under
an old key does not open, ``unseal`` returns None and the caller treats it as absent), and cluster
credentials and jobs' secret environment values (``clusters/secrets.py``, through ``fernet``).
"""

from __future__ import annotations

import base64

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings


def fernet(purpose: str) -> Fernet:
    """The cipher for one purpose (``"cluster credentials"``, ``"oidc refresh token"``, ...)."""
    secret = (getattr(settings, "CREDENTIALS_KEY", "") or settings.SECRET_KEY).encode()
    info = f"quartermaster {purpose}".encode()
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(secret)
    return Fernet(base64.urlsafe_b64encode(key))


def seal(value: str, *, purpose: str) -> bytes:
    return fernet(purpose).encrypt(value.encode())


def unseal(sealed: bytes | memoryview | None, *, purpose: str) -> str | None:
    if not sealed:
        return None
    try:
        return fernet(purpose).decrypt(bytes(sealed)).decode()
    except InvalidToken:
        return None
