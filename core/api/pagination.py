"""Limit/offset paging with a Kubernetes-style list envelope (kind: AddressList, items: [...])."""
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.response import Response


class ListPagination(LimitOffsetPagination):
    default_limit = 100
    max_limit = 1000

    def get_paginated_response(self, data, kind: str = "List", api_version: str = "v1"):
        return Response({
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {
                "totalItems": self.count,
                "next": self.get_next_link(),
                "previous": self.get_previous_link(),
            },
            "items": data,
        })

    def get_paginated_response_schema(self, schema):
        return {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object", "properties": {
                    "totalItems": {"type": "integer"},
                    "next": {"type": "string", "nullable": True},
                    "previous": {"type": "string", "nullable": True},
                }},
                "items": schema,
            },
        }


def paged(view, request, queryset, render, kind: str, api_version: str):
    """One page of `queryset` in the list envelope, each row rendered by `render`."""
    paginator = ListPagination()
    page = paginator.paginate_queryset(queryset, request, view=view)
    return paginator.get_paginated_response([render(o) for o in page], kind, api_version)
