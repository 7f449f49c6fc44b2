"""The API's pagination: ``?page=`` and ``?page_size=`` over pages whose count stops at a cap
(``runs.reads.capped_pages``), with ``next`` and ``previous`` as links.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from django.db.models import QuerySet
from django.http import HttpResponse
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import BasePagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param

from runs.reads.capped_pages import COUNT_CAP, MAX_PAGE, Page, page_of, positive

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 200


class CappedPagination(BasePagination):
    """``?page=`` and ``?page_size=``; ``count`` exact up to ``COUNT_CAP`` rows."""

    def paginate_queryset(
        self, queryset: QuerySet[Any] | Sequence[Any], request: Request, view: Any = None
    ) -> list[Any]:
        """The rows of the page asked for of a queryset (the API pages querysets: the count
        is a query)."""
        assert isinstance(queryset, QuerySet)
        return self.paginate(request, partial(page_of, queryset))

    def paginate(self, request: Request, paged: Callable[[int, int], Page]) -> list[Any]:
        """The rows of the page asked for, as ``paged`` makes a page of a number and a size."""
        page = positive(request.query_params.get("page"), 1, MAX_PAGE)
        size = positive(request.query_params.get("page_size"), DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        if size is None:
            raise ValidationError({"page_size": [f"an integer from 1 to {MAX_PAGE_SIZE}"]})
        if page is None:
            raise NotFound(f"page is an integer from 1 to {MAX_PAGE}")
        self.request = request
        self.page = paged(page, size)
        if page > 1 and not self.page.rows:
            raise NotFound("no such page")
        return self.page.rows

    def _link(self, page: int) -> str:
        url = self.request.build_absolute_uri()
        return (
            remove_query_param(url, "page") if page == 1 else replace_query_param(url, "page", page)
        )

    def _envelope(self) -> OrderedDict[str, Any]:
        """The page's fields before its results."""
        return OrderedDict(
            [
                ("count", self.page.count),
                ("count_exact", self.page.count_exact),
                ("next", self._link(self.page.number + 1) if self.page.has_next else None),
                ("previous", self._link(self.page.number - 1) if self.page.number > 1 else None),
            ]
        )

    def get_paginated_response(self, data: Any) -> Response:
        return Response(OrderedDict([*self._envelope().items(), ("results", data)]))

    def json_response(self, rows: list[str]) -> HttpResponse:
        """The page as ``get_paginated_response`` renders it, its results JSON texts already."""
        head = json.dumps(self._envelope(), ensure_ascii=False, separators=(",", ":"))
        body = f'{head[:-1]},"results":[{",".join(rows)}]}}'
        return HttpResponse(body.encode(), content_type="application/json")

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "object",
            "required": ["count", "count_exact", "next", "previous", "results"],
            "properties": {
                "count": {
                    "type": "integer",
                    "description": f"rows matched, counted up to {COUNT_CAP}",
                },
                "count_exact": {
                    "type": "boolean",
                    "description": f"false when more than {COUNT_CAP} rows matched",
                },
                "next": {"type": "string", "format": "uri", "nullable": True},
                "previous": {"type": "string", "format": "uri", "nullable": True},
                "results": schema,
            },
        }

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        return [
            {
                "name": "page",
                "in": "query",
                "required": False,
                "description": "page number, from 1",
                "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE},
            },
            {
                "name": "page_size",
                "in": "query",
                "required": False,
                "description": f"rows per page, {DEFAULT_PAGE_SIZE} by default",
                "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_SIZE},
            },
        ]
