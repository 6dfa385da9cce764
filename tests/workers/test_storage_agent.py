"""The storage controller against the real RabbitMQ: apply, verify, repair drift, tear down."""
import random
import uuid

import pytest
from proton import ConnectionException

from config_service import services
from config_service.models import AddressSpace, AgentState, AppliedEvent
from config_service.status import address_status, agent_states, space_status
from eventlog.models import ConfigEvent
from tests.conftest import CTX, b64
from tests.workers import rabbit
from workers.agents import runner
from workers.agents.storage import rabbitmq


@pytest.fixture
def space(tenant):
    s = services.create_address_space(ctx=CTX, tenant=tenant, name=f"s{uuid.uuid4().hex[:6]}",
                                      type="brokered", plan="brokered-single-broker")
    yield s
    services.delete_address_space(ctx=CTX, space=s)
    runner.run(s.uid, "storage")


def queue(space, name, **kw):
    return services.create_address(ctx=CTX, space=space, address=name, type="queue",
                                   plan="brokered-queue", **kw)


def user(space, username, password, rules):
    return services.create_messaging_user(
        ctx=CTX, space=space, username=username,
        authentication={"type": "password", "password": b64(password)}, authorization=rules)


def statuses(space):
    space = AddressSpace.objects.get(uid=space.uid)
    states = agent_states([space.uid]).get(space.uid, {})
    return space_status(space, states), {
        a.name: address_status(space, a, states) for a in space.addresses.all()}


def test_a_queue_becomes_active_only_after_the_agent_applied_it(space):
    queue(space, "orders")
    space_st, addr_st = statuses(space)
    assert addr_st[f"{space.name}.orders"].phase == "Configuring"
    assert runner.run(space.uid, "storage") == 2
    space_st, addr_st = statuses(space)
    assert space_st.phase == "Active"
    assert addr_st[f"{space.name}.orders"].phase == "Active"
    assert "orders" in rabbit.queue_names(space.vhost)


def test_a_messaging_user_sends_and_receives_and_others_are_refused(space, tenant):
    queue(space, "orders")
    queue(space, "secret")
    user(space, "app", "app-password", [{"addresses": ["orders"], "operations": ["send", "recv"]}])
    runner.run(space.uid, "storage")
    login = rabbitmq.broker_username(space.vhost, "app")
    rabbit.send(space.vhost, login, "app-password", "orders", "hello")
    assert rabbit.receive(space.vhost, login, "app-password", "orders") == "hello"
    with pytest.raises(rabbit.SessionEnded, match="access"):
        rabbit.receive(space.vhost, login, "app-password", "secret", timeout=3)
    with pytest.raises(ConnectionException):
        rabbit.connect(space.vhost, login, "wrong-password")


def test_a_queue_deleted_behind_its_back_comes_back_on_resync(space):
    queue(space, "orders")
    runner.run(space.uid, "storage")
    rabbit.delete_queue(space.vhost, "orders")
    assert "orders" not in rabbit.queue_names(space.vhost)
    runner.run(space.uid, "storage")  # the periodic resync
    assert "orders" in rabbit.queue_names(space.vhost)


def test_deleting_an_address_removes_only_its_queue(space):
    queue(space, "a")
    queue(space, "b")
    runner.run(space.uid, "storage")
    services.delete_address(ctx=CTX, space=space, name=f"{space.name}.a")
    runner.run(space.uid, "storage")
    assert {"a", "b"} & rabbit.queue_names(space.vhost) == {"b"}


def test_every_event_delivered_twice_and_out_of_order_gives_the_same_end_state(tenant):
    def scenario(name, deliveries):
        s = services.create_address_space(ctx=CTX, tenant=tenant, name=name, type="brokered",
                                          plan="brokered-single-broker")
        steps = [
            lambda: services.create_address(ctx=CTX, space=s, address="dlq", type="deadletter",
                                            plan="brokered-deadletter"),
            lambda: queue(s, "q1", deadletter="dlq"),
            lambda: services.create_address(ctx=CTX, space=s, address="t", type="topic",
                                            plan="brokered-topic"),
            lambda: queue(s, "q2", spec={"messageTtl": {"maximum": 5000}}),
            lambda: services.update_address(ctx=CTX, space=s, name=f"{name}.q2",
                                            spec={"messageTtl": {"maximum": 9000}}),
            lambda: user(s, "app", "app-password",
                         [{"addresses": ["q*"], "operations": ["send"]}]),
            lambda: services.delete_address(ctx=CTX, space=s, name=f"{name}.q1"),
        ]
        for i, step in enumerate(steps):
            step()
            for _ in range(deliveries(i)):
                runner.run(s.uid, "storage")
        runner.run(s.uid, "storage")
        return s

    once = scenario("once" + uuid.uuid4().hex[:4], lambda i: 1)
    rng = random.Random(7)
    # Some changes arrive twice, some are skipped and arrive later together (out of order).
    messy = scenario("messy" + uuid.uuid4().hex[:4], lambda i: rng.choice([0, 2, 3]))
    strip = lambda state, s: {k: [tuple(str(x).replace(s.name, "S") for x in row)  # noqa: E731
                                  for row in v] for k, v in state.items()}
    assert strip(rabbit.broker_state(once.vhost), once) == strip(
        rabbit.broker_state(messy.vhost), messy)
    for s in (once, messy):
        events = ConfigEvent.objects.filter(stream_id=s.uid).count()
        assert AppliedEvent.objects.filter(event__stream_id=s.uid).count() == events
        services.delete_address_space(ctx=CTX, space=s)
        runner.run(s.uid, "storage")


def test_deleting_the_space_tears_down_the_vhost_and_removes_the_space(tenant):
    s = services.create_address_space(ctx=CTX, tenant=tenant, name="gone", type="brokered",
                                      plan="brokered-single-broker")
    queue(s, "orders")
    runner.run(s.uid, "storage")
    assert rabbit.vhost_exists(s.vhost)
    services.delete_address_space(ctx=CTX, space=s)
    assert statuses(s)[0].phase == "Terminating"
    runner.run(s.uid, "storage")
    assert not rabbit.vhost_exists(s.vhost)
    assert not AddressSpace.objects.filter(uid=s.uid).exists()
    assert ConfigEvent.objects.filter(stream_id=s.uid).last().type == "address_space.removed"
    assert AgentState.objects.get(space_uid=s.uid).torn_down


def test_a_change_reads_only_its_space_and_a_resync_also_looks_for_stale_users(
    space, monkeypatch
):
    """The broker-wide read of users without permissions (RabbitMQ works it out from all its
    users) is for drift; a change does not pay for it. Every call still goes to RabbitMQ."""
    paths = []
    real = rabbitmq.RabbitMQApi.request

    def recording(self, method, path, *args, **kwargs):
        paths.append(path)
        return real(self, method, path, *args, **kwargs)

    monkeypatch.setattr(rabbitmq.RabbitMQApi, "request", recording)
    queue(space, "orders")
    runner.run(space.uid, "storage")  # the space's first reconcile: its new vhost and queue
    queue(space, "invoices")
    runner.run(space.uid, "storage")  # a change
    assert "/users/without-permissions" not in paths
    assert all(space.vhost in path or path.startswith("/users/") or path == "/nodes"
               for path in paths), paths

    runner.run(space.uid, "storage")  # no new event: a resync
    assert paths.count("/users/without-permissions") == 1
