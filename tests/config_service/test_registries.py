"""config_service reaches workers only through what workers registers at start-up: the
after-commit fan-out and the data-plane reads (docs/architecture.md, "Layers")."""
import logging
import uuid
from types import SimpleNamespace

from config_service import readings, services
from config_service.portal.stats import address_stats
from config_service.readings import AddressCounters
from core.context import Context
from eventlog import fanout
from workers import dispatch, endpoints
from workers.agents import installed, runner
from workers.readings import WorkersReadings

CTX = Context(actor="test")


def test_workers_registers_the_fan_out_the_data_plane_and_the_agents():
    assert fanout._notify is dispatch.notify_space
    assert isinstance(readings.get(), WorkersReadings)
    assert runner._installed is installed.installed_agents


def test_a_change_is_fanned_out_after_commit_through_the_registered_notifier(
        monkeypatch, tenant, django_capture_on_commit_callbacks):
    sent = []
    monkeypatch.setattr(fanout, "_notify", sent.append)
    with django_capture_on_commit_callbacks(execute=True):
        space = services.create_address_space(ctx=CTX, tenant=tenant, name="shop",
                                              type="brokered", plan="brokered-single-broker")
    assert sent == [space.uid]


def test_without_a_notifier_a_change_is_logged_and_left_to_the_outbox_relay(monkeypatch, caplog):
    monkeypatch.setattr(fanout, "_notify", None)
    with caplog.at_level(logging.WARNING, logger="eventlog.fanout"):
        fanout.notify_space(uuid.uuid4())
    assert [r.message for r in caplog.records] == ["fanout.unregistered"]


class FakeDataPlane:
    def address_counters(self, space):
        return AddressCounters(broker={"orders": {
            "messages": 3, "consumers": 1, "message_stats": {"publish": 5, "deliver_get": 2}}})

    def ca_cert(self, space):
        return ""


def test_the_portal_stats_come_from_the_registered_data_plane(monkeypatch, redis_server):
    monkeypatch.setattr(readings, "_registered", FakeDataPlane())
    space = SimpleNamespace(uid=uuid.uuid4())
    orders = SimpleNamespace(name="orders", address="orders", broker_object_name="orders")
    stats = address_stats(space, [orders])["orders"]
    assert (stats["messages_in"], stats["messages_out"], stats["stored"], stats["receivers"]) \
        == (5, 2, 3, 1)


def test_the_workers_data_plane_reads_the_space_s_own_endpoints(monkeypatch):
    asked = []
    unreachable = endpoints.SpaceEndpoints(
        broker=endpoints.BrokerEndpoint("http://127.0.0.1:9/api", "u", "p", "127.0.0.1", 9))
    monkeypatch.setattr(endpoints, "of", lambda space: asked.append(space) or unreachable)
    space = SimpleNamespace(uid=uuid.uuid4(), vhost="t.shop", type="brokered")
    assert WorkersReadings().address_counters(space) == AddressCounters()
    assert asked == [space]
