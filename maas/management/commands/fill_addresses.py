"""manage.py fill_addresses: fills the platform with tenants, spaces and addresses for scale runs.

Goes through the service functions, as the API does (validation, plans, quotas, events, outbox,
fan-out after commit): one `create_addresses` batch per address space, as an AddressList POST,
so each space's agents are woken once for its batch. The shape is issue 16's: per tenant
STANDARD standard spaces of 100 addresses (40 anycast, 20 multicast, 20 queue, 20 topic) and
BROKERED brokered spaces of 100 queues.
Idempotent: tenants, spaces and addresses that exist are kept, so a run can be resumed, and
`--jobs N` splits the tenants over N processes.

    .venv/bin/python manage.py fill_addresses --tenants 100 --standard 8 --brokered 2 --jobs 2
"""
import argparse
import subprocess
import sys
import time

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from config_service import services
from config_service.models import Address, AddressSpace
from core.context import Context
from tenants.models import Tenant, TenantQuota
from tenants.services import create_tenant

CTX = Context(actor="cli:fill_addresses")
# (address type, plan, how many) of one standard space: issue 16's mix of 100
STANDARD_MIX = (("anycast", "standard-small-anycast", 40),
                ("multicast", "standard-small-multicast", 20),
                ("queue", "standard-small-queue", 20),
                ("topic", "standard-small-topic", 20))
BROKERED_MIX = (("queue", "brokered-queue", 100),)


class Command(BaseCommand):
    help = "Fill the platform with tenants, address spaces and addresses (scale benchmarks)."

    def add_arguments(self, parser):
        parser.add_argument("--tenants", type=int, default=10)
        parser.add_argument("--standard", type=int, default=8, help="standard spaces per tenant")
        parser.add_argument("--brokered", type=int, default=2, help="brokered spaces per tenant")
        parser.add_argument("--prefix", default="scale", help="tenant slugs: PREFIX-0, ...")
        parser.add_argument("--jobs", type=int, default=1, help="processes to split tenants over")
        # set by --jobs for each process it starts: tenants t with t % stride == part
        parser.add_argument("--part", type=int, default=0, help=argparse.SUPPRESS)
        parser.add_argument("--stride", type=int, default=1, help=argparse.SUPPRESS)

    def handle(self, tenants, standard, brokered, prefix, jobs, part, stride, **options):
        began = time.monotonic()
        if jobs > 1:
            self._fan_out(jobs)
        else:
            for t in range(tenants):
                if t % stride == part:
                    self.fill_tenant(f"{prefix}-{t}", standard, brokered)
        n = Address.objects.filter(space__tenant__slug__startswith=f"{prefix}-").count()
        self.stdout.write(f"{n} addresses in the {prefix}-* tenants "
                          f"({time.monotonic() - began:.0f} s)")

    def _fan_out(self, jobs: int) -> None:
        argv, skip = [], False
        for arg in sys.argv:  # the same command without --jobs N / --jobs=N
            if skip or arg.startswith("--jobs"):
                skip = not skip and arg == "--jobs"
                continue
            argv.append(arg)
        workers = [subprocess.Popen([sys.executable, *argv, "--jobs=1", "--part", str(i),
                                     "--stride", str(jobs)]) for i in range(jobs)]
        for worker in workers:
            worker.wait()

    def fill_tenant(self, slug: str, standard: int, brokered: int) -> None:
        tenant = Tenant.objects.filter(slug=slug).first()
        if tenant is None:
            owner, _ = get_user_model().objects.get_or_create(username=f"{slug}-owner")
            tenant = create_tenant(ctx=CTX, slug=slug, owner=owner)
        TenantQuota.objects.update_or_create(tenant=tenant, defaults={
            "max_address_spaces": None, "max_addresses": None})
        spaces = [(f"s{i}", "standard", "standard-unlimited", STANDARD_MIX)
                  for i in range(standard)]
        spaces += [(f"b{i}", "brokered", "brokered-single-broker", BROKERED_MIX)
                   for i in range(brokered)]
        for name, space_type, plan, mix in spaces:
            if space_type == "standard" and not settings.MAAS_ROUTER_ENABLED:
                continue
            self.fill_space(tenant, name, space_type, plan, mix)

    @staticmethod
    @transaction.atomic
    def fill_space(tenant, name, space_type, plan, mix) -> None:
        space = AddressSpace.objects.filter(tenant=tenant, name=name).first()
        if space is None:
            space = services.create_address_space(ctx=CTX, tenant=tenant, name=name,
                                                  type=space_type, plan=plan)
        present = set(Address.objects.filter(space=space).values_list("address", flat=True))
        items = [{"address": f"{address_type}{i}", "type": address_type, "plan": address_plan}
                 for address_type, address_plan, count in mix for i in range(count)
                 if f"{address_type}{i}" not in present]
        if items:  # the API's AddressList path: one batch per space
            services.create_addresses(ctx=CTX, space=space, items=items)
