"""Errors of the service functions; the API turns them into 400, 403, 404, 409, 413 and 503."""


class ServiceError(Exception):
    status = 400
    code = "invalid"

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field

    def of_item(self, index: int) -> "ServiceError":
        """The same error, naming item `index` of a posted list (`items[<i>].<field>`)."""
        field = f"items[{index}].{self.field}" if self.field else f"items[{index}]"
        return type(self)(f"items[{index}]: {self.message}", field)


class Invalid(ServiceError):
    """Bad input: names the field; nothing was changed."""


class NotFound(ServiceError):
    status = 404
    code = "not_found"


class Conflict(ServiceError):
    """A name already taken, a stale resourceVersion, or an object still in use."""

    status = 409
    code = "conflict"


class QuotaExceeded(ServiceError):
    status = 403
    code = "quota_exceeded"


class TooLarge(ServiceError):
    """A request body over the size limit: refused before it is parsed."""

    status = 413
    code = "too_large"


class Unavailable(ServiceError):
    """A router or broker the request needs did not answer: nothing was changed; try again."""

    status = 503
    code = "unavailable"
