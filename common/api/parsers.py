"""The API's request parsers: DRF's, with the bodies checked at the edge through ``common.params``.

A JSON body nesting deeper than ``params.MAX_JSON_DEPTH`` (Python's parser raised RecursionError, a 500,
on a few thousand brackets), holding ``NaN``/``Infinity``, or text with a character no field may hold (NUL,
which PostgreSQL refuses, other control characters, lone surrogates) is a 400 naming where, before any
view sees it. Form bodies get the same character check.
"""

from __future__ import annotations

import codecs
from collections.abc import Mapping
from typing import Any

from rest_framework import exceptions, parsers

from common import params

BODY = "body"


class JSONParser(parsers.JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        # DRF's: the Content-Type's charset, text codecs only (a bz2 "charset" would inflate a small body).
        encoding = parsers.get_encoding(parser_context or {})  # type: ignore[attr-defined]
        try:
            text = codecs.getreader(encoding)(stream).read()
        except UnicodeDecodeError as error:
            raise exceptions.ParseError(f"Not {encoding} text: {error.reason}.") from None
        try:
            return params.parse_json(text, BODY)
        except params.BadParameter as bad:
            if bad.name == BODY:  # not about a field: the body cannot be read (code ``parse_error``)
                raise exceptions.ParseError(bad.reason) from None
            raise


class FormParser(parsers.FormParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        data = super().parse(stream, media_type, parser_context)
        params.check_form(data)
        return data


class MultiPartParser(parsers.MultiPartParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        parsed = super().parse(stream, media_type, parser_context)
        params.check_form(parsed.data)
        return parsed
