"""Who asks: the actor and request id every service function records in its events."""
from dataclasses import dataclass


@dataclass(frozen=True)
class Context:
    """Who asks, for the audit trail of every event."""

    actor: str
    request_id: str = ""


SYSTEM = Context(actor="system:maas")
