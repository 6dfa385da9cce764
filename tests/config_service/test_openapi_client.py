"""A client generated from /api/schema/ by openapi-python-client works against a live server:
it creates a brokered address space and a queue with a personal access token, and reads their
typed status. Generation is offline (no network) and takes a few seconds."""
import datetime
import importlib
import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiYamlRenderer

from tenants.models import PersonalAccessToken

PACKAGE = "maas_client"
# The client sends JSON: it leaves out the YAML forms of request bodies (with a warning each).
YAML_TYPES = {"application/yaml", "application/x-yaml", "text/yaml"}


@pytest.fixture(scope="module")
def maas_client(tmp_path_factory):
    """The package openapi-python-client generates from the schema, imported."""
    workdir = tmp_path_factory.mktemp("client")
    schema = SchemaGenerator().get_schema(request=None, public=True)
    (workdir / "schema.yaml").write_bytes(OpenApiYamlRenderer().render(schema))
    (workdir / "config.yaml").write_text(yaml.safe_dump({
        "package_name_override": PACKAGE, "project_name_override": "maas-client",
        "post_hooks": [],  # no formatter run: faster, and nothing beyond this package needed
    }))
    generator = Path(sys.executable).with_name("openapi-python-client")
    result = subprocess.run(
        [str(generator), "generate", "--path", "schema.yaml", "--config", "config.yaml",
         "--output-path", PACKAGE, "--meta", "none"],
        cwd=workdir, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    problems = [re.sub(r"\s+", " ", chunk)[:300]
                for chunk in (result.stdout + result.stderr).split("WARNING parsing")[1:]
                if not set(re.findall(r"Unsupported content type (\S+)", chunk)) & YAML_TYPES]
    assert not problems, problems
    sys.path.insert(0, str(workdir))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(workdir))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
            del sys.modules[name]


@pytest.fixture
def client(maas_client, live_server, redis_server, owner):
    _, token = PersonalAccessToken.issue(owner)
    with maas_client.AuthenticatedClient(base_url=live_server.url, token=token,
                                         raise_on_unexpected_status=True) as c:
        yield c


def test_a_generated_client_creates_a_brokered_space_and_a_queue(maas_client, client, tenant):
    from maas_client.api.v1 import (
        v1_tenants_addressspaces_addresses_create as create_address,
    )
    from maas_client.api.v1 import (
        v1_tenants_addressspaces_addresses_list as list_addresses,
    )
    from maas_client.api.v1 import (
        v1_tenants_addressspaces_addresses_retrieve as read_address,
    )
    from maas_client.api.v1 import v1_tenants_addressspaces_create as create_space
    from maas_client.api.v1 import v1_tenants_addressspaces_retrieve as read_space
    from maas_client.models import (
        Address,
        AddressList,
        AddressManifest,
        AddressSpace,
        AddressSpaceManifest,
        AddressSpaceSpec,
        AddressSpaceTypeEnum,
        AddressSpec,
        AddressTypeEnum,
        NamedManifestMeta,
        PhaseEnum,
    )

    space = create_space.sync(client=client, tenant=tenant.slug, body=AddressSpaceManifest(
        metadata=NamedManifestMeta(name="orders"),
        spec=AddressSpaceSpec(type_=AddressSpaceTypeEnum.BROKERED,
                              plan="brokered-single-broker")))
    assert isinstance(space, AddressSpace)
    assert isinstance(space.metadata.uid, uuid.UUID)
    assert isinstance(space.metadata.creation_timestamp, datetime.datetime)
    assert space.spec.type_ is AddressSpaceTypeEnum.BROKERED

    queue = create_address.sync(client=client, tenant=tenant.slug, space="orders",
                                body=AddressManifest(spec=AddressSpec(
                                    address="invoices", type_=AddressTypeEnum.QUEUE,
                                    plan="brokered-queue")))
    assert isinstance(queue, Address)
    assert queue.metadata.name == "orders.invoices"

    space = read_space.sync(client=client, tenant=tenant.slug, space="orders")
    assert isinstance(space.status.phase, PhaseEnum)
    assert space.status.is_ready is (space.status.phase is PhaseEnum.ACTIVE)
    assert space.status.endpoint_statuses[0].service_ports[0].name == "amqp"
    queue = read_address.sync(client=client, tenant=tenant.slug, space="orders",
                              address="orders.invoices")
    assert isinstance(queue.status.phase, PhaseEnum)
    assert queue.spec.type_ is AddressTypeEnum.QUEUE
    page = list_addresses.sync(client=client, tenant=tenant.slug, space="orders")
    assert isinstance(page, AddressList)
    assert page.metadata.total_items == 1
    assert [a.spec.address for a in page.items] == ["invoices"]


def test_errors_come_back_typed(maas_client, client, tenant):
    from maas_client.api.v1 import v1_tenants_addressspaces_create as create_space
    from maas_client.models import (
        AddressSpaceManifest,
        AddressSpaceSpec,
        AddressSpaceTypeEnum,
        Error,
        NamedManifestMeta,
    )

    body = AddressSpaceManifest(metadata=NamedManifestMeta(name="dup"), spec=AddressSpaceSpec(
        type_=AddressSpaceTypeEnum.BROKERED, plan="brokered-single-broker"))
    create_space.sync(client=client, tenant=tenant.slug, body=body)
    answer = create_space.sync_detailed(client=client, tenant=tenant.slug, body=body)
    assert answer.status_code == 409
    assert isinstance(answer.parsed, Error)
    assert answer.parsed.field == "metadata.name"
    assert json.loads(answer.content)["code"] == answer.parsed.code
