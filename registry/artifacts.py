"""The artifact store: where the portal keeps the bytes of model versions (``ARTIFACT_ROOT``, a directory;
``<root>/<organization id>/<sha256>``, so identical bytes are kept once), written whole or not at all.

``store`` copies a stream into the store, counting its size and SHA-256 as it goes (a partial write never
takes the final name); ``path_for`` is where a stored version's bytes are, for whoever serves them (the
artifact download with HTTP ranges, the device agents' downloads).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import BinaryIO

from django.conf import settings

from registry.models import ModelVersion

CHUNK = 1 << 20


class TooLarge(Exception):
    """The artifact is larger than ``ARTIFACT_MAX_BYTES``."""


def root() -> Path:
    return Path(settings.ARTIFACT_ROOT)


def path_for(version: ModelVersion) -> Path:
    """Where ``version``'s bytes are kept (they exist only when ``version.stored``)."""
    return root() / str(version.model.team.organization_id) / version.sha256


def store(organization_id: int, stream: BinaryIO, max_bytes: int | None = None) -> tuple[int, str]:
    """Copy ``stream`` into the store of ``organization_id``; returns (size in bytes, SHA-256 hex). Raises
    ``TooLarge`` (nothing kept) past ``max_bytes`` (default ``ARTIFACT_MAX_BYTES``)."""
    limit = settings.ARTIFACT_MAX_BYTES if max_bytes is None else max_bytes
    folder = root() / str(organization_id)
    folder.mkdir(parents=True, exist_ok=True)
    digest, size = hashlib.sha256(), 0
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".incoming-")
    try:
        with os.fdopen(handle, "wb") as out:
            while chunk := stream.read(CHUNK):
                size += len(chunk)
                if size > limit:
                    raise TooLarge(f"The artifact is larger than {limit} bytes.")
                digest.update(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, folder / digest.hexdigest())
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return size, digest.hexdigest()
