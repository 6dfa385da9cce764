"""One error shape for the API: {status, code, message, field} (field names the bad input)."""
from django.http import Http404
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_handler

from ..errors import ServiceError


def exception_handler(exc, context):
    if isinstance(exc, ServiceError):
        body = {"status": exc.status, "code": exc.code, "message": exc.message,
                "detail": exc.message}
        if exc.field:
            body["field"] = exc.field
        return Response(body, status=exc.status)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or "Not found.")
    response = drf_handler(exc, context)
    if response is not None and isinstance(response.data, dict) and "detail" in response.data:
        detail = response.data["detail"]
        response.data = {"status": response.status_code,
                         "code": getattr(detail, "code", "error"),
                         "message": str(detail), "detail": str(detail)}
    return response
