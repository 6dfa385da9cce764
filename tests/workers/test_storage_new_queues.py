"""The storage controller's short path for new queues, against the real RabbitMQ: a new queue in
a clean vhost is made and verified by name, never listing the vhost (issue 16: a full apply
lists its every queue, exchange and binding twice), and leaves the vhost exactly as the full
apply would; whatever the short path cannot tell is taken by the full apply."""
import uuid
from urllib.parse import unquote

import pytest

from config_service import services
from config_service.models import AddressSpace, AgentState
from config_service.status import address_status, agent_states
from tenants.models import TenantQuota
from tests.conftest import CTX, b64
from tests.workers import rabbit
from workers.agents import runner
from workers.agents.storage import agent as controller
from workers.agents.storage import rabbitmq


class ReadCountingApi(rabbitmq.RabbitMQApi):
    """The real client (every call goes to RabbitMQ), keeping each call's method and path."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[str, str]] = []

    def request(self, method, path, body=None, params=None, missing_ok=False, timeout=None):
        self.calls.append((method, unquote(path)))
        return super().request(method, path, body, params, missing_ok, timeout)


@pytest.fixture
def counted(monkeypatch, settings):
    api = ReadCountingApi(settings.RABBITMQ_API_URL, settings.RABBITMQ_API_USER,
                          settings.RABBITMQ_API_PASSWORD)
    monkeypatch.setattr(controller, "management_api", lambda broker: api)
    yield api
    api.close()


@pytest.fixture
def space(tenant):
    s = services.create_address_space(ctx=CTX, tenant=tenant, name=f"n{uuid.uuid4().hex[:6]}",
                                      type="brokered", plan="brokered-single-broker")
    services.create_addresses(ctx=CTX, space=s, items=[
        {"address": f"q{i}", "type": "queue", "plan": "brokered-queue"} for i in range(20)])
    services.create_messaging_user(
        ctx=CTX, space=s, username="app", authentication={"type": "password",
                                                          "password": b64("app-password")},
        authorization=[{"addresses": ["*"], "operations": ["send", "recv"]}])
    runner.run(s.uid, "storage")  # the full apply: the vhost as desired, no error
    yield s
    services.delete_address_space(ctx=CTX, space=s)
    runner.run(s.uid, "storage")


def queue(space, name, **kw):
    return services.create_address(ctx=CTX, space=space, address=name, type="queue",
                                   plan="brokered-queue", **kw)


def listed(api, vhost) -> list[str]:
    """The vhost-wide reads among the calls (what the short path never reads): the lists,
    and the vhost's definitions that the full apply reads instead of them."""
    return [path for method, path in api.calls if method == "GET" and path in (
        f"/queues/{vhost}", f"/exchanges/{vhost}", f"/bindings/{vhost}",
        f"/definitions/{vhost}")]


def phases(space) -> dict:
    space = AddressSpace.objects.get(uid=space.uid)
    states = agent_states([space.uid]).get(space.uid, {})
    return {a.address: address_status(space, a, states).phase for a in space.addresses.all()}


def full_apply_changes(space) -> list[str]:
    """What a full apply would still change in the vhost: nothing, if it is as desired."""
    space = AddressSpace.objects.get(uid=space.uid)
    result = rabbitmq.BrokerReconciler(controller.management_api(
        controller.endpoints.of(space).broker)).apply(controller.desired_state(space))
    assert result.ok, result
    return result.created + result.updated + result.deleted


def test_a_new_queue_is_made_and_verified_by_name_and_carries_messages(space, counted):
    before = rabbit.broker_state(space.vhost)
    queue(space, "orders")
    queue(space, "invoices")
    runner.run(space.uid, "storage")
    assert listed(counted, space.vhost) == []
    writes = [c for c in counted.calls if c[0] != "GET"]
    # one call each, never an import (its cost grows with the broker's other vhosts)
    assert sorted(writes) == sorted(
        [("PUT", f"/exchanges/{space.vhost}/{n}") for n in ("orders", "invoices")]
        + [("PUT", f"/queues/{space.vhost}/{n}") for n in ("orders", "invoices")]
        + [("POST", f"/bindings/{space.vhost}/e/{n}/q/{n}") for n in ("orders", "invoices")])
    assert [w[0] for w in writes[-2:]] == ["POST", "POST"]  # the bindings after their ends
    assert len(counted.calls) <= 6 + 2 * 7 + 2  # the objects and DLX read twice, permissions
    assert set(phases(space).values()) == {"Active"}
    state = AgentState.objects.get(space_uid=space.uid, kind="storage")
    assert state.address_errors == {} and state.space_error == ""
    after = rabbit.broker_state(space.vhost)
    assert {"orders", "invoices"} <= {name for name, _ in after["queues"]} - {
        name for name, _ in before["queues"]}
    assert full_apply_changes(space) == []  # exactly what the full apply makes
    login = rabbitmq.broker_username(space.vhost, "app")
    rabbit.send(space.vhost, login, "app-password", "orders", "hello")
    assert rabbit.receive(space.vhost, login, "app-password", "orders") == "hello"


def test_one_queue_is_three_calls_and_two_rounds_of_reads(space, counted):
    queue(space, "orders")
    runner.run(space.uid, "storage")
    writes = [c for c in counted.calls if c[0] != "GET"]
    assert sorted(writes[:2]) == [
        ("PUT", f"/exchanges/{space.vhost}/orders"), ("PUT", f"/queues/{space.vhost}/orders")]
    assert writes[2:] == [("POST", f"/bindings/{space.vhost}/e/orders/q/orders")]
    assert phases(space)["orders"] == "Active" and full_apply_changes(space) == []


def test_a_list_of_many_queues_takes_the_full_apply(space, counted):
    services.create_addresses(ctx=CTX, space=space, items=[
        {"address": f"bulk{i}", "type": "queue", "plan": "brokered-queue"}
        for i in range(controller.NEW_QUEUES_BY_NAME + 1)])
    runner.run(space.uid, "storage")
    assert listed(counted, space.vhost)  # fewer calls than three objects by name each, twice
    assert set(phases(space).values()) == {"Active"} and full_apply_changes(space) == []


def test_a_queue_with_a_policy_takes_the_full_apply(space, counted):
    queue(space, "short", spec={"messageTtl": {"maximum": 5000}})
    runner.run(space.uid, "storage")
    assert listed(counted, space.vhost)  # the policy names its queues together
    assert phases(space)["short"] == "Active"
    assert any(p[1].startswith("[('message-ttl', 5000)")
               for p in rabbit.broker_state(space.vhost)["policies"])


def test_a_first_queue_a_send_right_matches_changes_permissions_in_full(space, counted):
    services.create_messaging_user(
        ctx=CTX, space=space, username="shop", authentication={
            "type": "password", "password": b64("shop-password")},
        authorization=[{"addresses": ["cart*"], "operations": ["send"]}])
    runner.run(space.uid, "storage")
    counted.calls.clear()
    queue(space, "cart1")  # the first queue `cart*` matches: write on its exchange now
    runner.run(space.uid, "storage")
    assert listed(counted, space.vhost)
    assert phases(space)["cart1"] == "Active" and full_apply_changes(space) == []
    login = rabbitmq.broker_username(space.vhost, "shop")
    rabbit.send(space.vhost, login, "shop-password", "cart1", "one")
    app = rabbitmq.broker_username(space.vhost, "app")
    assert rabbit.receive(space.vhost, app, "app-password", "cart1") == "one"


def test_a_throttle_without_an_event_is_not_skipped_by_a_new_queue(space, counted, tenant):
    # A throttle wakes the agents without an event; here a queue is created before they run.
    TenantQuota.objects.filter(tenant=tenant).update(throttled=True)
    queue(space, "late")
    runner.run(space.uid, "storage")
    assert listed(counted, space.vhost)  # the permissions differ: the full apply cuts writes
    login = rabbitmq.broker_username(space.vhost, "app")
    perms = {p[0]: p for p in rabbit.broker_state(space.vhost)["permissions"]}
    assert perms[login][2] in ("", "^$")  # no write anywhere while throttled
    assert full_apply_changes(space) == []


def test_a_vhost_gone_behind_its_back_is_made_again_by_the_full_apply(space, counted):
    counted.delete_vhost(space.vhost)
    queue(space, "orders")
    runner.run(space.uid, "storage")
    assert listed(counted, space.vhost)
    assert set(phases(space).values()) == {"Active"}
    assert len(rabbit.queue_names(space.vhost)) == 21


def test_after_an_error_the_next_new_queue_takes_the_full_apply(space, counted):
    AgentState.objects.filter(space_uid=space.uid, kind="storage").update(
        address_errors={f"{space.name}.q1": {"message": "Not yet verified on the broker",
                                             "permanent": False}})
    queue(space, "orders")
    runner.run(space.uid, "storage")
    assert listed(counted, space.vhost)
    assert AgentState.objects.get(space_uid=space.uid, kind="storage").address_errors == {}
    assert set(phases(space).values()) == {"Active"}
