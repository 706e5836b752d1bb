"""The templates keep to the presentation layer: pages add scripts and stylesheets only through base.html's
``scripts`` and ``styles`` blocks, nothing is inline (the Content-Security-Policy would refuse it), and every
polled part takes its attributes from ``partials/poll.html``."""

from __future__ import annotations

import re
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
#: Those that lay out the page's head themselves: the base, and Swagger UI's page (drf-spectacular's).
HEADS = {"base.html", "portal/api_docs.html"}
COMMENT = re.compile(r"\{#.*?#\}|\{% comment %\}.*?\{% endcomment %\}", re.DOTALL)
BLOCK = re.compile(r"\{% block (scripts|styles) %\}.*?\{% endblock %\}", re.DOTALL)


def templates() -> dict[str, str]:
    """Every template's text, its comments left out."""
    return {str(path.relative_to(TEMPLATES)): COMMENT.sub("", path.read_text()) for path in TEMPLATES.rglob("*.html")}


def test_pages_add_scripts_and_styles_only_through_the_blocks() -> None:
    for name, text in templates().items():
        if name in HEADS or name == "partials/chart_scripts.html":
            continue
        outside = BLOCK.sub("", text)
        assert "<script" not in outside, name
        assert 'rel="stylesheet"' not in outside, name


def test_nothing_is_inline() -> None:
    for name, text in templates().items():
        assert "<style" not in text, name
        assert not re.search(r"\sstyle=", text), name
        assert not re.search(r"<script(?![^>]*\ssrc=)", text), name
        assert not re.search(r"\son[a-z]+=", text), name


def test_every_polled_part_uses_the_polling_partial() -> None:
    found = templates()
    polling = {name for name, text in found.items() if "data-poll-while-visible" in text or 'hx-trigger="every' in text}
    assert polling == {"partials/poll.html"}
    users = {name for name, text in found.items() if '{% include "partials/poll.html"' in text}
    assert len(users) == 9, users  # a what-if study's table is the last
