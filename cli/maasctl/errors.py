"""The exit codes a script can rely on, and the errors that carry them."""

OK = 0
FAILED = 1  # an error from the server, or an operation that failed (a refused link, ...)
USAGE = 2  # bad command line, unreadable manifest, not logged in
TIMEOUT = 3  # `wait` or `receive` ran out of time
UNREACHABLE = 4  # the API server or a messaging endpoint could not be reached

REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
           405: "MethodNotAllowed", 409: "Conflict", 413: "RequestEntityTooLarge",
           415: "UnsupportedMediaType", 429: "TooManyRequests", 500: "InternalError",
           502: "BadGateway", 503: "ServiceUnavailable", 504: "GatewayTimeout"}


class CliError(Exception):
    """An error to print on stderr (`error: ...`) and exit with `code`."""

    code = FAILED

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code

    def render(self) -> str:
        return f"error: {self}"


class UsageError(CliError):
    code = USAGE


class TimedOut(CliError):
    code = TIMEOUT


class Unreachable(CliError):
    code = UNREACHABLE


class ApiError(CliError):
    """An answer of the server other than 2xx: `Error from server (NotFound): message`."""

    code = FAILED

    def __init__(self, status: int, message: str, field: str | None = None,
                 error_code: str | None = None):
        super().__init__(message)
        self.status, self.field, self.error_code = status, field, error_code

    @property
    def reason(self) -> str:
        return REASONS.get(self.status, f"HTTP{self.status}")

    def render(self) -> str:
        text = f"Error from server ({self.reason}): {self}"
        if self.field:
            text += f" (field: {self.field})"
        return text
