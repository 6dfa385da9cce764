"""Models of the config service: the projections and the agents' reports."""
from .agents import AgentState, AppliedEvent, RouterIncarnation
from .projections import Address, AddressSpace, MessagingUser

__all__ = [
    "Address",
    "AddressSpace",
    "AgentState",
    "AppliedEvent",
    "MessagingUser",
    "RouterIncarnation",
]
