"""Address forms the router routes without configuration: dynamic addresses (`$temp.<n>`, a
requester's reply-to) and the `to` of a message on an anonymous link, read from its properties
section without decoding the body."""
from proton import Data

DYNAMIC_PREFIX = "$temp."
_PROPERTIES = 0x73  # amqp:properties:list
_BODY_SECTIONS = {0x74, 0x75, 0x76, 0x77, 0x78}  # application-properties onwards: no properties
_BODY_NAMES = {"amqp:application-properties:map", "amqp:data:binary", "amqp:amqp-sequence:list",
               "amqp:amqp-value:*", "amqp:footer:map"}


def is_dynamic(address: str | None) -> bool:
    return bool(address) and address.startswith(DYNAMIC_PREFIX)


def message_to(encoded: bytes) -> str | None:
    """The `to` of an encoded message, or None: sections are decoded one at a time, up to the
    properties (header and annotations come before them), never the body."""
    view = memoryview(encoded)
    while view:
        data = Data()
        try:
            used = data.decode(bytes(view))  # decodes the first section only
        except Exception:  # noqa: BLE001 - proton's DataException and friends: not a message
            return None
        data.rewind()
        if used <= 0 or not data.next() or data.type() != Data.DESCRIBED:
            return None
        data.enter()
        data.next()
        descriptor = data.get_object()
        if descriptor in (_PROPERTIES, "amqp:properties:list"):
            data.next()
            props = data.get_object()
            to = props[2] if isinstance(props, list) and len(props) > 2 else None
            return str(to) if to else None
        if descriptor in _BODY_SECTIONS or str(descriptor) in _BODY_NAMES:
            return None
        view = view[used:]
    return None
