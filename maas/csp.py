"""A Content-Security-Policy on the pages people sign in to and work in (the portal, sign-in):
scripts from this site only (htmx; the templates have no inline script) and nothing framed.
The inline styles the templates use are allowed; a stored name that reached a page as markup
could still not run a script. form-action stays open: signing out posts on to the OIDC
provider's end-session page. The API's docs (Swagger UI's inline start-up script) and the
admin site keep their own pages' needs and get none."""

POLICY = "; ".join([
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data:",
    "object-src 'none'",
    "base-uri 'none'",
    "frame-ancestors 'none'",
])
EXEMPT = ("/api/docs", "/admin/")


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if (response.get("Content-Type", "").startswith("text/html")
                and not request.path.startswith(EXEMPT)):
            response.setdefault("Content-Security-Policy", POLICY)
        return response
