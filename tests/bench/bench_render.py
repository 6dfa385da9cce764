"""CPU of rendering one API page of addresses: the hand-written renderer the views use
(config_service/api/resources.py) against DRF serializers that render the same body and would
also describe it (printed, not asserted).

Why the API describes each body with serializers that never render (core/api/schemas.py): a
page of 100 addresses is what `GET .../addresses/` answers by default, and at 100,000 addresses
the whole request takes about 12 ms (docs/scale.md). The bodies are built in memory (no
database), the same for both; each renderer runs --repeat times over them, and the medians are
printed with their ratio. The DRF bodies are checked equal to the hand-written ones first.

    .venv/bin/python tests/bench/bench_render.py --addresses 100 --repeat 50
"""
import argparse
import os
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)


def serializers():
    """Address bodies as DRF would render and describe them: nested serializers reading the
    model's attributes, the status derived once per address."""
    from rest_framework import serializers as s

    from config_service.status import address_status
    from core.api.manifests import ENMASSE

    class Metadata(s.Serializer):
        name = s.CharField()
        namespace = s.CharField(source="space.tenant.slug")
        resourceVersion = s.CharField(source="resource_version")
        creationTimestamp = s.DateTimeField(source="created_at", format="%Y-%m-%dT%H:%M:%SZ")
        addressSpace = s.CharField(source="space.name")

    class Spec(s.Serializer):
        address = s.CharField()
        type = s.CharField()
        plan = s.CharField()

        def to_representation(self, addr):
            body = {**super().to_representation(addr), **addr.spec}
            for field in ("topic", "deadletter", "expiry"):
                if getattr(addr, field):
                    body[field] = getattr(addr, field)
            return body

    class PlanStatus(s.Serializer):
        name = s.CharField()
        partitions = s.IntegerField()
        resources = s.DictField()

        def to_representation(self, plan_status):
            return {k: plan_status.get(k) for k in ("name", "partitions", "resources")}

    class Status(s.Serializer):
        phase = s.CharField()
        isReady = s.BooleanField()
        messages = s.ListField(child=s.CharField())
        planStatus = PlanStatus()
        brokerStatuses = s.ListField(child=s.DictField())

        def to_representation(self, addr):
            status = address_status(addr.space, addr, self.context["states"])
            return super().to_representation({
                "phase": status.phase, "isReady": status.is_ready, "messages": status.messages,
                "planStatus": addr.plan_status, "brokerStatuses": addr.placement})

    class Address(s.Serializer):
        apiVersion = s.SerializerMethodField()
        kind = s.SerializerMethodField()
        metadata = Metadata(source="*")
        spec = Spec(source="*")
        status = Status(source="*")

        def get_apiVersion(self, _):
            return ENMASSE

        def get_kind(self, _):
            return "Address"

    return Address


def page(n: int):
    from config_service.models import Address, AddressSpace, AgentState
    from tenants.models import Tenant

    tenant = Tenant(slug="acme", name="acme")
    space = AddressSpace(uid=uuid.uuid4(), tenant=tenant, name="shop", type="standard",
                         plan="standard-medium", resource_version=n + 1, last_sequence=n + 1)
    now = datetime.now(UTC)
    addresses = [Address(space=space, name=f"shop.q{i}", address=f"q{i}", type="queue",
                         plan="standard-small-queue", resource_version=i + 1, created_at=now,
                         plan_status={"name": "standard-small-queue", "partitions": 1,
                                      "resources": {"broker": 0.01, "router": 0.001}},
                         placement=[{"clusterId": "broker-0", "containers": [
                             {"hostname": "broker-0"}]}],
                         spec={"messageTtl": {"maximum": 60000}}, scheduled=True)
                 for i in range(n)]
    states = {kind: AgentState(kind=kind, applied_sequence=n, address_errors={},
                               applied_at=now) for kind in ("storage", "router")}
    return space, addresses, states


def median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        times.append((time.process_time() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addresses", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "maas.settings")
    os.environ.setdefault("MAAS_LOG_LEVEL", "WARNING")
    import django

    django.setup()
    from config_service.api import resources

    space, addresses, states = page(args.addresses)
    drf = serializers()
    by_hand = [resources.address(space, a, states) for a in addresses]
    by_drf = drf(addresses, many=True, context={"states": states}).data
    assert [dict(b) for b in by_drf] == by_hand, "the two renderers disagree"
    hand = median_ms(lambda: [resources.address(space, a, states) for a in addresses],
                     args.repeat)
    serialized = median_ms(lambda: drf(addresses, many=True, context={"states": states}).data,
                           args.repeat)
    print(f"page of {args.addresses} addresses, CPU median of {args.repeat}: "
          f"by hand {hand:.2f} ms, DRF serializers {serialized:.2f} ms "
          f"({serialized / hand:.1f}x)")


if __name__ == "__main__":
    main()
