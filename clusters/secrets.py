"""Secrets at rest: cluster credentials and jobs' secret environment values, encrypted (Fernet: AES-128-CBC
with an HMAC) under a key derived from ``CREDENTIALS_KEY`` or, when that is not set, from ``SECRET_KEY``.

Each use has a key of its own, derived with its ``purpose`` (HKDF's info), so a ciphertext of one kind can
never be read back as the other (a job's secrets copied into a cluster's credentials column decrypt to
nothing).

Rotating the key makes stored secrets unreadable (``decrypt`` raises ``CredentialsError``): the cluster
then shows that its credentials must be entered again, a job that its secret values must be; nothing else
breaks.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

#: The purposes keys are derived for.
CLUSTER_CREDENTIALS = b"quartermaster cluster credentials"
JOB_SECRET_ENV = b"quartermaster job secret environment"


class CredentialsError(ValueError):
    """Stored secrets cannot be read (the key changed, or the data is damaged)."""


def _fernet(purpose: bytes) -> Fernet:
    secret = (getattr(settings, "CREDENTIALS_KEY", "") or settings.SECRET_KEY).encode()
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose).derive(secret)
    return Fernet(base64.urlsafe_b64encode(key))


def encrypt(values: Mapping[str, str], *, purpose: bytes = CLUSTER_CREDENTIALS) -> bytes:
    return _fernet(purpose).encrypt(json.dumps(dict(values), sort_keys=True).encode())


def decrypt(ciphertext: bytes, *, purpose: bytes = CLUSTER_CREDENTIALS) -> dict[str, str]:
    try:
        plain = _fernet(purpose).decrypt(ciphertext)
    except InvalidToken:
        raise CredentialsError("the stored credentials cannot be decrypted with the current key") from None
    value = json.loads(plain)
    if not isinstance(value, dict):
        raise CredentialsError("the stored credentials are not a mapping")
    return {str(k): str(v) for k, v in value.items()}
