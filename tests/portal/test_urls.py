"""Page names and API names live apart: a page link never lands in the API."""

from __future__ import annotations

import pytest
from django.urls import reverse


@pytest.mark.parametrize(
    ("name", "kwargs", "page", "api"),
    [
        ("team-list", {}, "/teams/", "/api/v1/teams/"),
        ("team-detail", {"pk": 3}, "/teams/3/", "/api/v1/teams/3/"),
        ("token-list", {}, "/account/tokens/", "/api/v1/auth/tokens/"),
    ],
)
def test_page_and_api_names_do_not_shadow_each_other(name: str, kwargs: dict[str, int], page: str, api: str) -> None:
    assert reverse(name, kwargs=kwargs) == page
    assert reverse(f"api:{name}", kwargs=kwargs) == api
