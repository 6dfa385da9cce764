"""Models of the config service: the event log, the projections and the agents' reports."""
from .agents import AgentState, AppliedEvent, RouterIncarnation
from .events import ConfigEvent, EventStream, Outbox
from .projections import Address, AddressSpace, MessagingUser

__all__ = [
    "Address",
    "AddressSpace",
    "AgentState",
    "AppliedEvent",
    "ConfigEvent",
    "EventStream",
    "MessagingUser",
    "Outbox",
    "RouterIncarnation",
]
