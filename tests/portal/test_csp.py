"""The Content-Security-Policy header (django-csp): on every page, with scripts, styles and everything else
from this site only; and the stylesheet that lets Plotly run under it.

Plotly injects its own CSS as a ``<style>`` element unless the page has an element with the id
``plotly.js-style-global`` and the class ``no-inline-styles``: ``templates/base.html`` links
``static/vendor/plotly/plotly.css`` so, and that file holds the rules of the vendored bundle. Updating
Plotly: ``python -m tests.portal.test_csp`` writes the file again from the new bundle (the test below says when).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from django.test import Client

if TYPE_CHECKING:
    from tests.conftest import World

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "static" / "vendor" / "plotly" / "plotly-basic.min.js"
PLOTLY_CSS = ROOT / "static" / "vendor" / "plotly" / "plotly.css"
EXPECTED = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self' data:",
    "connect-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'none'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
}


def directives(header: str) -> dict[str, str]:
    parts = (part.strip().split(None, 1) for part in header.split(";") if part.strip())
    return {part[0]: part[1] if len(part) > 1 else "" for part in parts}


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/login/", "/", "/jobs/", "/jobs/new/", "/billing/", "/api/docs/", "/api/v1/me/"])
def test_every_answer_carries_the_policy(world: World, path: str) -> None:
    client = Client()
    if path != "/login/":
        client.force_login(world.users["adam"])
    response = client.get(path)
    assert response.status_code == 200, path
    assert directives(response["Content-Security-Policy"]) == EXPECTED


@pytest.mark.django_db
def test_the_api_docs_start_from_a_script_file(world: World) -> None:
    client = Client()
    client.force_login(world.users["adam"])
    page = client.get("/api/docs/").content.decode()
    assert "<style" not in page
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", page, re.S)
    assert scripts
    assert all('src="' in attrs and not body.strip() for attrs, body in scripts)
    script = client.get("/api/docs/?script=")
    assert script.status_code == 200
    assert script["Content-Type"].startswith("application/javascript")


def plotly_rules(bundle: str) -> list[tuple[str, str]]:
    """The CSS rules Plotly's bundle would inject (its ``plotcss`` table: ``X`` stands for the plot, ``Y`` for
    the notifier), as (selector, declarations)."""
    found = re.search(r'=(\{"X,X div":.*?\});for\(\w+ in \w+\)\w+=\w+\.replace\(/\^,/', bundle, re.S)
    assert found, "Plotly's CSS table was not found in the bundle"
    table = ast.literal_eval(re.sub(r",([XY]):", r',"\1":', found.group(1)))
    rules = []
    for key, value in table.items():
        selector = (" ," + key[1:] if key.startswith(",") else key).replace("X", ".js-plotly-plot .plotly")
        rules.append((selector.replace("Y", ".plotly-notifier"), value))
    return rules


def plotly_css(bundle: str) -> str:
    header = (
        f"/* Plotly's own rules, from {BUNDLE.name} (written by `python -m tests.portal.test_csp`): linked by\n"
        "   templates/base.html so that Plotly injects no <style> the Content-Security-Policy would refuse. */\n"
    )
    return header + "".join(f"{selector} {{{declarations}}}\n" for selector, declarations in plotly_rules(bundle))


def test_plotly_css_holds_the_bundles_rules() -> None:
    assert PLOTLY_CSS.read_text() == plotly_css(BUNDLE.read_text()), "run `python -m tests.portal.test_csp`"


if __name__ == "__main__":
    PLOTLY_CSS.write_text(plotly_css(BUNDLE.read_text()))
    print(f"wrote {PLOTLY_CSS}")
