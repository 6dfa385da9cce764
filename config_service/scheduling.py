"""Credit-based placement and quota, EnMasse style (AddressProvisioner / UsageInfo).

One credit is one router or broker instance. Router credits add up across the space; broker
credits are placed first-fit on pooled brokers (used + credit <= 1), topics of one credit or
more get dedicated (sharded) brokers. A space needs ceil(router credits) routers and one
broker per distinct broker in use; each count must fit the space plan's resourceLimits, and
their sum its aggregate. Placement is deterministic (broker-0, broker-1, ...) so a rebuild of
the log reproduces it.
"""
import math
import zlib
from collections import defaultdict
from dataclasses import dataclass, field

QUOTA_EXCEEDED = "Quota exceeded"
_EPSILON = 1e-9


@dataclass
class Usage:
    router: float = 0.0
    pooled: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    sharded: dict[str, int] = field(default_factory=dict)  # clusterId -> replicas

    def add(self, address_type: str, plan_status: dict, placement: list[dict],
            count: int = 1) -> None:
        """Adds `count` addresses of the same type, resources and placement."""
        resources = plan_status.get("resources") or {}
        self.router += float(resources.get("router", 0) or 0) * count
        broker = float(resources.get("broker", 0) or 0)
        if not placement or broker <= 0 or address_type == "subscription" or count <= 0:
            # Subscriptions ride on their topic's broker and are excluded from the aggregate.
            return
        sharded = [p for p in placement if p["clusterId"].startswith("broker-sharded-")]
        if sharded:
            self.sharded[sharded[0]["clusterId"]] = math.ceil(broker - _EPSILON)
            return
        per_partition = broker / len(placement)
        for p in placement:
            self.pooled[p["clusterId"]] += per_partition * count

    def needed(self) -> dict[str, int]:
        brokers = len([b for b, used in self.pooled.items() if used > _EPSILON])
        brokers += sum(self.sharded.values())
        return {"router": math.ceil(self.router - _EPSILON), "broker": brokers}


def fits(usage: Usage, limits: dict) -> bool:
    needed = usage.needed()
    for resource in ("router", "broker"):
        limit = limits.get(resource)
        if limit is not None and needed[resource] > limit + _EPSILON:
            return False
    aggregate = limits.get("aggregate")
    return aggregate is None or needed["router"] + needed["broker"] <= aggregate + _EPSILON


def place(
    space_type: str,
    address_type: str,
    address: str,
    plan_status: dict,
    usage: Usage,
    topic_placement: list[dict] | None = None,
) -> list[dict]:
    """Where an address goes (EnMasse brokerStatuses); [] for router-only addresses."""
    broker = float(plan_status.get("resources", {}).get("broker", 0) or 0)
    if space_type == "brokered":
        return [_status("broker")]
    if address_type in ("anycast", "multicast"):
        return []
    if address_type == "subscription":
        return [dict(p) for p in (topic_placement or [])]
    if address_type == "deadletter":
        # A deadletter queue exists on every broker in use (and the first one, at least).
        brokers = sorted(set(usage.pooled) | set(usage.sharded)) or ["broker-0"]
        return [_status(b) for b in brokers]
    if address_type == "topic" and broker >= 1.0:
        cluster = f"broker-sharded-{zlib.crc32(address.encode()):08x}"
        return [_status(cluster)]
    partitions = max(int(plan_status.get("partitions", 1) or 1), math.ceil(broker - _EPSILON), 1)
    credit = broker / partitions
    chosen: list[str] = []
    for _ in range(partitions):
        chosen.append(_first_fit(usage.pooled, credit, exclude=chosen))
    return [_status(b) for b in chosen]


def _first_fit(pooled: dict[str, float], credit: float, exclude: list[str]) -> str:
    names = sorted(pooled, key=_broker_index)
    for name in names:
        if name not in exclude and pooled[name] + credit <= 1.0 + _EPSILON:
            return name
    index = 0
    while f"broker-{index}" in pooled or f"broker-{index}" in exclude:
        index += 1
    return f"broker-{index}"


def _broker_index(name: str) -> int:
    try:
        return int(name.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return 1 << 30


def _status(cluster: str) -> dict:
    return {"clusterId": cluster, "containerId": f"{cluster}-0", "state": "Active"}


def usage_of(addresses) -> Usage:
    """Usage of the scheduled addresses (iterable of (type, plan_status, placement))."""
    usage = Usage()
    for address_type, plan_status, placement in addresses:
        usage.add(address_type, plan_status, placement)
    return usage


def usage_of_groups(groups) -> Usage:
    """The same as `usage_of`, from (type, resources, placement, count) groups of addresses:
    a space's addresses share a few plans, so the database can count them instead of sending
    every row (what `services.placement.space_usage` does on each create)."""
    usage = Usage()
    for address_type, resources, placement, count in groups:
        usage.add(address_type, {"resources": resources or {}}, placement or [], count)
    return usage
