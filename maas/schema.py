"""OpenAPI generation: drf-spectacular's AutoSchema, with list endpoints named `..._list`.

Our views are APIViews returning EnMasse-shaped objects, so spectacular cannot tell a list from
a single resource and would give both the same operationId; a view class named `...List` is a
list.
"""
from drf_spectacular.openapi import AutoSchema


class MaasAutoSchema(AutoSchema):
    def get_operation_id(self):
        operation_id = super().get_operation_id()
        if self.method == "GET" and type(self.view).__name__.endswith("List"):
            return operation_id.removesuffix("_retrieve") + "_list"
        return operation_id
