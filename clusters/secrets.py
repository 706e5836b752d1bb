"""Secrets at rest: cluster credentials and jobs' secret environment values, encrypted with the
project's one cipher (``common/sealed.py``: Fernet under a key derived from ``CREDENTIALS_KEY`` or ``SECRET_KEY``).

Each use has a key of its own, derived with its ``purpose`` (HKDF's info), so a ciphertext of one kind can
never be read back as the other (a job's secrets copied into a cluster's credentials column decrypt to
nothing).

Rotating the key makes stored secrets unreadable (``decrypt`` raises ``CredentialsError``): the cluster
then shows that its credentials must be entered again, a job that its secret values must be; nothing else
breaks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from cryptography.fernet import InvalidToken

from common.sealed import fernet

#: The purposes keys are derived for.
CLUSTER_CREDENTIALS = "cluster credentials"
JOB_SECRET_ENV = "job secret environment"  # noqa: S105 - a key derivation's label, not a secret
SESSION_SECRET = "interactive session secret"  # noqa: S105 - a key derivation's label, not a secret


class CredentialsError(ValueError):
    """Stored secrets cannot be read (the key changed, or the data is damaged)."""


def encrypt(values: Mapping[str, str], *, purpose: str = CLUSTER_CREDENTIALS) -> bytes:
    return fernet(purpose).encrypt(json.dumps(dict(values), sort_keys=True).encode())


def decrypt(ciphertext: bytes, *, purpose: str = CLUSTER_CREDENTIALS) -> dict[str, str]:
    try:
        plain = fernet(purpose).decrypt(ciphertext)
    except InvalidToken:
        raise CredentialsError("the stored credentials cannot be decrypted with the current key") from None
    value = json.loads(plain)
    if not isinstance(value, dict):
        raise CredentialsError("the stored credentials are not a mapping")
    return {str(k): str(v) for k, v in value.items()}
