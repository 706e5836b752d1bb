"""Cluster credentials, encrypted at rest (Fernet: AES-128-CBC with an HMAC) under a key derived from
``CREDENTIALS_KEY`` or, when that is not set, from ``SECRET_KEY``.

Rotating the key makes stored credentials unreadable (``decrypt`` raises ``CredentialsError``): the
cluster then shows that its credentials must be entered again, and nothing else breaks.
"""

from __future__ import annotations

import base64
import json

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings


class CredentialsError(ValueError):
    """Stored credentials cannot be read (the key changed, or the data is damaged)."""


def _fernet() -> Fernet:
    secret = (getattr(settings, "CREDENTIALS_KEY", "") or settings.SECRET_KEY).encode()
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"quartermaster cluster credentials").derive(
        secret
    )
    return Fernet(base64.urlsafe_b64encode(key))


def encrypt(credentials: dict[str, str]) -> bytes:
    return _fernet().encrypt(json.dumps(credentials, sort_keys=True).encode())


def decrypt(ciphertext: bytes) -> dict[str, str]:
    try:
        plain = _fernet().decrypt(ciphertext)
    except InvalidToken:
        raise CredentialsError("the stored credentials cannot be decrypted with the current key") from None
    value = json.loads(plain)
    if not isinstance(value, dict):
        raise CredentialsError("the stored credentials are not a mapping")
    return {str(k): str(v) for k, v in value.items()}
