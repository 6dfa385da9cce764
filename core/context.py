"""Who asks: the actor and request id every service function records in its events."""
from dataclasses import dataclass


@dataclass(frozen=True)
class Context:
    """Who asks, for the audit trail of every event."""

    actor: str
    request_id: str = ""


SYSTEM = Context(actor="system:maas")


def of_request(request) -> Context:
    """The context of an API or portal request: a token's actor, else the signed-in user."""
    actor = getattr(request, "auth_actor", None) or f"user:{request.user.get_username()}"
    return Context(actor=actor, request_id=getattr(request, "request_id", ""))
