"""Read endpoints whose answer is computed for a page of objects at once (``Answered``): one query for what every
object of the page needs (spend, usage, counts), not one per object."""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.viewsets import GenericViewSet


class Answered(GenericViewSet):  # type: ignore[type-arg]
    """A viewset mixin: ``list`` and ``retrieve`` answer through ``_answer(objects, many)``, given the page's
    objects (a list) or the one object asked for."""

    def _answer(self, found: list[Any], many: bool) -> Any:
        raise NotImplementedError

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        assert page is not None
        return self.get_paginated_response(self._answer(list(page), many=True))

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(self._answer([self.get_object()], many=False))
