"""An address's `spec.forwarders` (EnMasse's AddressSpecForwarder): a queue's messages moved
to a remote address (`out`) or a remote address's messages moved into the queue (`in`), the
remote reached through one of the space's connectors (space_connectors.py). Only queues and
subscriptions have them, and a subscription only `out`. Validated and normalised here.

    forwarders:
    - name: toremote                 # letters and digits, unique on the address
      remoteAddress: remote1/orders  # <connector>/<address>: a connector of the space
      direction: out                 # out: local queue -> remote; in: remote -> local queue
      priority: 0                    # optional, the consumer priority of the forwarder
"""
import re

from core.errors import Invalid

NAME = re.compile(r"^[a-zA-Z0-9]{1,63}$")  # as a connector's name
# The remote address after `<connector>/`: printable ASCII without spaces.
REMOTE = re.compile(r"^[!-~]{1,250}$")
MAX_FORWARDERS = 10
DIRECTIONS = {"queue": ("in", "out"), "subscription": ("out",)}
KEYS = ("name", "remoteAddress", "direction", "priority")
MIN_PRIORITY, MAX_PRIORITY = -(2**31), 2**31 - 1


def validate(value, *, address_type: str, connectors: list[str]) -> list[dict]:
    """`spec.forwarders` normalised, or Invalid naming the field. `connectors`: the names of
    the space's connectors, one of which must prefix each remoteAddress."""
    if not isinstance(value, list):
        raise Invalid("spec.forwarders must be a list of forwarders", "spec.forwarders")
    if not value:
        return []
    if address_type not in DIRECTIONS:
        raise Invalid("only queues and subscriptions have spec.forwarders", "spec.forwarders")
    if len(value) > MAX_FORWARDERS:
        raise Invalid(f"spec.forwarders has at most {MAX_FORWARDERS} forwarders",
                      "spec.forwarders")
    out, names = [], set()
    for i, forwarder in enumerate(value):
        field = f"spec.forwarders[{i}]"
        normal = _forwarder(forwarder, field, address_type, connectors)
        if normal["name"] in names:
            raise Invalid(f"{field}.name {normal['name']!r} is given twice", f"{field}.name")
        names.add(normal["name"])
        out.append(normal)
    return out


def _forwarder(forwarder, field: str, address_type: str, connectors: list[str]) -> dict:
    if not isinstance(forwarder, dict):
        raise Invalid(f"{field} must be an object", field)
    unknown = sorted(set(forwarder) - set(KEYS))
    if unknown:
        raise Invalid(f"{field}.{unknown[0]} is not a forwarder field (known: "
                      f"{', '.join(KEYS)})", f"{field}.{unknown[0]}")
    name = forwarder.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise Invalid(f"{field}.name must be 1 to 63 letters or digits", f"{field}.name")
    remote = forwarder.get("remoteAddress")
    where = f"{field}.remoteAddress"
    if not isinstance(remote, str) or "/" not in remote:
        raise Invalid(f"{where} must be <connector>/<address>", where)
    connector, _, rest = remote.partition("/")
    if not rest or not REMOTE.match(rest):
        raise Invalid(f"{where} must be <connector>/<address>, the address 1 to 250 "
                      "printable characters without spaces", where)
    if connector not in connectors:
        known = ", ".join(connectors) or "none"
        raise Invalid(f"{where} {remote!r}: the space has no connector {connector!r} "
                      f"(its connectors: {known})", where)
    direction = forwarder.get("direction")
    allowed = DIRECTIONS[address_type]
    if direction not in allowed:
        raise Invalid(f"{field}.direction must be {' or '.join(allowed)} on a {address_type}",
                      f"{field}.direction")
    normal = {"name": name, "remoteAddress": remote, "direction": direction}
    priority = forwarder.get("priority")
    if priority is not None:
        if (not isinstance(priority, int) or isinstance(priority, bool)
                or not MIN_PRIORITY <= priority <= MAX_PRIORITY):
            raise Invalid(f"{field}.priority must be a 32-bit integer", f"{field}.priority")
        normal["priority"] = priority
    return normal
