"""The committed OpenAPI schema (openapi.yaml) is exactly what the code generates."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management import call_command

pytestmark = pytest.mark.each_database  # differs by database: CI runs it on both

ROOT = Path(__file__).resolve().parents[2]


def test_committed_schema_is_current(tmp_path: Path) -> None:
    generated = tmp_path / "openapi.yaml"
    call_command("spectacular", "--file", str(generated), "--validate", "--fail-on-warn")
    committed = (ROOT / "openapi.yaml").read_text()
    assert generated.read_text() == committed, "openapi.yaml is stale: run `make schema` and commit it"


def test_schema_and_docs_are_served(client) -> None:  # type: ignore[no-untyped-def]
    schema = client.get("/api/schema/")
    assert schema.status_code == 200
    assert b"/api/v1/auth/token/" in schema.content
    docs = client.get("/api/docs/")
    assert docs.status_code == 200
    # Swagger UI comes from the sidecar package, served locally: no CDN.
    assert b"/static/drf_spectacular_sidecar/swagger-ui-dist/" in docs.content
    assert b"cdn" not in docs.content.lower()
