"""A space as an older MaaS stored it: its `address_space.created` event carried EnMasse spec
keys (endpoints, authenticationService) that no service function accepts any more."""
import uuid

from django.db import transaction

from config_service.models import AddressSpace
from config_service.services import space_plan_status
from eventlog import log
from eventlog.models import EventStream
from tenants.models import AddressSpacePlan

LEGACY_SPEC = {"endpoints": [{"name": "messaging", "service": "messaging"}],
               "authenticationService": {"name": "standard-authservice"}}


@transaction.atomic
def legacy_space(tenant, name: str, plan: str = "standard-small") -> AddressSpace:
    uid = uuid.uuid4()
    stream = log.open_stream(uid, EventStream.ADDRESS_SPACE, tenant)
    log.append(stream, "address_space.created", {
        "uid": str(uid), "name": name, "type": "standard", "plan": plan,
        "plan_status": space_plan_status(AddressSpacePlan.objects.get(name=plan)),
        "spec": LEGACY_SPEC}, actor="test:older-maas")
    return AddressSpace.objects.get(uid=uid)
