"""`CreateBatch`: the creates of one apply, sent as one definitions import instead of one call
each (a new standard space is ~80 objects: at ~600 vhosts each call took 15-25 ms of a busy
broker, docs/scale.md). Pure: it only turns the client's create calls into definition entries.
"""
from __future__ import annotations

from dataclasses import dataclass, field

BATCH_MIN = 4  # fewer creates than this go one call each: an import is no cheaper for them


def _exchange(v, name, type, arguments, durable=True, internal=False) -> dict:
    return {"name": name, "type": type, "durable": durable, "auto_delete": False,
            "internal": internal, "arguments": arguments}


def _queue(v, name, arguments, durable=True) -> dict:
    return {"name": name, "durable": durable, "auto_delete": False, "arguments": arguments}


def _binding(v, source, destination, routing_key, arguments, destination_type="queue") -> dict:
    return {"source": source, "destination": destination, "destination_type": destination_type,
            "routing_key": routing_key, "arguments": arguments}


def _policy(v, name, pattern, definition, priority=0, apply_to="queues") -> dict:
    return {"name": name, "pattern": pattern, "definition": definition, "priority": priority,
            "apply-to": apply_to}


# RabbitMQApi's create calls -> (definitions section, entry builder with the call's arguments)
_SECTIONS = {
    "put_exchange": ("exchanges", _exchange),
    "put_queue": ("queues", _queue),
    "create_binding": ("bindings", _binding),
    "put_policy": ("policies", _policy),
}


@dataclass
class BatchedCreate:
    """One create held back: its label and address (for results and errors), and the call
    that makes it alone, should the import be refused."""

    label: str
    address: str | None
    call: tuple  # (bound RabbitMQApi method, *args)


@dataclass
class CreateBatch:
    items: list[BatchedCreate] = field(default_factory=list)

    @staticmethod
    def takes(fn) -> bool:
        """The call is a create a definitions import can make."""
        return getattr(fn, "__name__", "") in _SECTIONS

    def add(self, label: str, address: str | None, fn, *args) -> None:
        self.items.append(BatchedCreate(label, address, (fn, *args)))

    def definitions(self) -> dict:
        """The import's body: each create as an entry of its section, in the order added."""
        body: dict[str, list[dict]] = {}
        for item in self.items:
            fn, *args = item.call
            section, entry = _SECTIONS[fn.__name__]
            body.setdefault(section, []).append(entry(*args))
        return body
