"""Portal figures (printed, not asserted): server time of the addresses page at 20,000 addresses.

Builds one brokered address space with N addresses through the config log (the same events
and projections as the service functions, appended in one transaction for speed), then times
the first page and a filtered page of the addresses table with Django's test client
(server time in-process, no network), as medians of repeated requests.

    .venv/bin/python tests/bench/bench_portal.py --addresses 20000
"""
import argparse
import os
import statistics
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "maas.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.db import transaction  # noqa: E402
from django.test import Client  # noqa: E402

from config_service import services  # noqa: E402
from core.context import Context  # noqa: E402
from eventlog import log  # noqa: E402
from tenants.models import TenantQuota  # noqa: E402
from tenants.services import create_tenant  # noqa: E402

CTX = Context(actor="bench:portal")


def build(n: int):
    slug = f"bench-portal-{uuid.uuid4().hex[:5]}"
    user = get_user_model().objects.create_user(f"{slug}-owner")
    tenant = create_tenant(ctx=CTX, slug=slug, owner=user)
    TenantQuota.objects.filter(tenant=tenant).update(max_addresses=None)
    space = services.create_address_space(ctx=CTX, tenant=tenant, name="big", type="brokered",
                                          plan="brokered-single-broker")
    plan_status = {"name": "brokered-queue", "partitions": 1, "resources": {"broker": 0.0},
                   "messageTtl": {}, "messageRedelivery": {}}
    placement = [{"clusterId": "broker", "containerId": "broker-0", "state": "Active"}]
    started = time.monotonic()
    with transaction.atomic():
        stream = log.lock_stream(space.uid)
        for i in range(n):
            kind = "topic" if i % 10 == 0 else "queue"
            log.append(stream, "address.created", {
                "name": f"big.a{i:05d}", "address": f"a{i:05d}", "type": kind,
                "plan": f"brokered-{kind}", "plan_status": plan_status, "topic": "",
                "deadletter": "", "expiry": "", "spec": {}, "scheduled": True,
                "pending_reason": "", "placement": placement}, actor=CTX.actor)
    print(f"built {n} addresses in {time.monotonic() - started:.1f}s")
    return user, tenant, space


def median_ms(client, url, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        response = client.get(url)
        times.append(time.perf_counter() - t)
        assert response.status_code == 200, response.status_code
    return statistics.median(times) * 1000


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--addresses", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    user, tenant, space = build(args.addresses)
    client = Client()
    client.force_login(user)
    base = f"/portal/t/{tenant.slug}/spaces/big/"
    cases = {
        "full page, first 50": base,
        "table partial, first 50": base + "addresses/",
        "filtered (type=topic)": base + "addresses/?type=topic",
        "search (a19)": base + "addresses/?search=a19",
        "sorted desc, page 200": base + "addresses/?sort=-name&page=200",
        "phase filter (Active)": base + "addresses/?phase=Active",
    }
    for name, url in cases.items():
        print(f"{name:28s} median {median_ms(client, url, args.repeat):7.1f} ms")
    services.delete_address_space(ctx=CTX, space=space)
    services.remove_address_space(uid=space.uid)


if __name__ == "__main__":
    main()
