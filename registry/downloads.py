"""A stored version's bytes over HTTP, with ranges (RFC 9110 §14): what the artifact download of the API and
the pages answer, so a replica or a device that lost its connection resumes where it stopped.

One range (``bytes=0-1023``, ``bytes=1024-``, ``bytes=-512``) is a 206 with ``Content-Range``; a range past
the end is a 416 naming the size; several ranges, or a header that is not a byte range, get the whole file
(a 200, as the RFC allows). ``If-Range`` with another entity tag (the version's SHA-256) gets the whole file
too: the client's part is of other bytes. The checksum is sent as the ``ETag`` and in ``X-Checksum-Sha256``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import BinaryIO

from django.http import FileResponse, HttpRequest, HttpResponse, StreamingHttpResponse

from registry import artifacts
from registry.models import ModelVersion

CHUNK = 1 << 16
ONE_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


class Unsatisfiable(Exception):
    """The range lies past the end of the file."""


def parse_range(header: str, size: int) -> tuple[int, int] | None:
    """The first and last byte ``header`` asks for within ``size`` bytes; None for the whole file. Raises
    ``Unsatisfiable`` for a range that starts past the end."""
    match = ONE_RANGE.fullmatch(header.strip())
    if match is None:
        return None
    first, last = match.groups()
    if not first and not last:
        return None
    if not first:  # the last N bytes
        count = int(last)
        if count == 0:
            raise Unsatisfiable
        return max(size - count, 0), size - 1
    start = int(first)
    end = min(int(last), size - 1) if last else size - 1
    if last and int(last) < start:
        return None  # invalid: ignored, the whole file
    if start >= size:
        raise Unsatisfiable
    return start, end


def _part(handle: BinaryIO, start: int, length: int) -> Iterator[bytes]:
    with handle:
        handle.seek(start)
        while length > 0:
            chunk = handle.read(min(CHUNK, length))
            if not chunk:
                return
            length -= len(chunk)
            yield chunk


def artifact_response(request: HttpRequest, version: ModelVersion) -> HttpResponse | StreamingHttpResponse:
    """The bytes of stored ``version`` (the caller checked it is stored and may be seen), whole or one range."""
    path = artifacts.path_for(version)
    size = path.stat().st_size
    filename = f"{version.model.name}-{version.version}"
    etag = f'"{version.sha256}"'
    wanted = request.headers.get("Range", "")
    if_range = request.headers.get("If-Range")
    if if_range is not None and if_range.strip() != etag:
        wanted = ""
    response: HttpResponse | StreamingHttpResponse
    try:
        span = parse_range(wanted, size) if wanted else None
    except Unsatisfiable:
        response = HttpResponse(status=416)
        response["Content-Range"] = f"bytes */{size}"
        return response
    if span is None:
        response = FileResponse(path.open("rb"), as_attachment=True, filename=filename)
        response["Content-Length"] = str(size)
    else:
        start, end = span
        response = StreamingHttpResponse(_part(path.open("rb"), start, end - start + 1), status=206)
        response["Content-Range"] = f"bytes {start}-{end}/{size}"
        response["Content-Length"] = str(end - start + 1)
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["Content-Type"] = "application/octet-stream"
    response["Accept-Ranges"] = "bytes"
    response["ETag"] = etag
    response["X-Checksum-Sha256"] = version.sha256
    return response
