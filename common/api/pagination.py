"""The API's pages: ``page`` and ``page_size`` parsed through ``common.params`` (DRF's own took any text
for page 1 or the default size, and ``²`` to a 404), declared with their ranges in the schema."""

from __future__ import annotations

from typing import Any

from django.core.paginator import Paginator
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request

from common import params


class Pagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500

    def get_page_number(self, request: Request, paginator: Paginator[Any]) -> int:
        raw = request.query_params.get(self.page_query_param)
        if raw in (None, ""):
            return 1
        return params.integer(raw, self.page_query_param, low=1, high=params.MAX_ID)

    def get_page_size(self, request: Request) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw in (None, ""):
            return self.page_size
        return params.integer(raw, self.page_size_query_param, low=1, high=self.max_page_size)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        ranges = {
            self.page_query_param: {"minimum": 1, "maximum": params.MAX_ID},
            self.page_size_query_param: {"minimum": 1, "maximum": self.max_page_size, "default": self.page_size},
        }
        declared = super().get_schema_operation_parameters(view)
        for parameter in declared:
            parameter["schema"].update(ranges.get(parameter["name"], {}))
        return declared
