"""One line per request (method and path) in the provider's log: the tests count calls to its
endpoints (introspection, discovery) from there."""
from django.conf import settings


class RequestLog:
    def __init__(self, get_response):
        self.get_response = get_response
        self.path = settings.CONFIG["request_log"]

    def __call__(self, request):
        with open(self.path, "a", encoding="utf-8") as log:
            log.write(f"{request.method} {request.get_full_path()}\n")
        return self.get_response(request)
