"""Refuses control characters (NUL, ...) in the URL path and query parameters before any view.

PostgreSQL refuses NUL in text, so a `%00` in a path segment or a filter became a 500 deep in a
view; here it is a 400 that names the parameter (the API's JSON error shape under /api/).
"""
import logging

from django.http import HttpResponseBadRequest, JsonResponse

from core.limits import has_control, printable

logger = logging.getLogger(__name__)


def _bad_parameter(request) -> str | None:
    if has_control(request.path):
        return "path"
    for key, values in request.GET.lists():
        if has_control(key) or any(has_control(v) for v in values):
            return printable(key)
    return None


class ControlCharacterMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        name = _bad_parameter(request)
        if name is None:
            return self.get_response(request)
        message = f"control characters (such as NUL) are not allowed in {name}"
        logger.info("request.refused_control_characters",
                    extra={"parameter": name, "path": printable(request.path)})
        if request.path.startswith("/api/"):
            return JsonResponse({"status": 400, "code": "invalid", "message": message,
                                 "detail": message, "field": name}, status=400)
        return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")
