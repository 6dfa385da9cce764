"""Placement over several local brokers (MAAS_RABBITMQ_NODES, docs/storage.md): a new space goes
to the broker holding the fewest spaces and stays there; its vhost, users and messages live on
that broker alone, its clients and its router reach it there, and the broker watch repairs a
restart of that broker only. The second broker is a real RabbitMQ node, started by
deploy/local/rabbitmq-nodes.sh as `make run` starts it. A standard space's router on it:
test_broker_pool_router.py."""
import json
import subprocess
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest
import requests
import yaml
from django.core.exceptions import ImproperlyConfigured
from proton import Message
from proton.utils import BlockingConnection

from config_service import rebuild, services
from config_service.api.resources import endpoints as client_endpoints
from config_service.models import AddressSpace, AgentState
from eventlog.models import ConfigEvent
from tests.conftest import CTX, b64, wait_for
from tests.workers.broker_pool import api, node1_name, vhosts_on
from workers import dispatch
from workers import endpoints as space_endpoints
from workers.agents import runner
from workers.agents.storage import watch as broker_watch

# Restarts or holds a broker every test shares: run apart from the others (make test).
pytestmark = pytest.mark.serial

PASSWORD = "app-password"


def brokered(tenant, name: str):
    space = services.create_address_space(ctx=CTX, tenant=tenant, name=name, type="brokered",
                                          plan="brokered-single-broker")
    services.create_address(ctx=CTX, space=space, address="orders", type="queue",
                            plan="brokered-queue")
    services.create_messaging_user(
        ctx=CTX, space=space, username="app",
        authentication={"type": "password", "password": b64(PASSWORD)},
        authorization=[{"addresses": ["*"], "operations": ["send", "recv"]}])
    return space


def connect(port: int, space, username: str = "app") -> BlockingConnection:
    """As a tenant's client connects to a brokered space (its endpoint's port)."""
    return BlockingConnection(f"amqp://127.0.0.1:{port}", user=f"{username}@{space.vhost}",
                              password=PASSWORD, virtual_host=f"vhost:{space.vhost}", timeout=10,
                              allowed_mechs="PLAIN")


def amqp_port(space) -> int:
    messaging = next(e for e in client_endpoints(space) if e["name"] == "messaging")
    return messaging["servicePorts"][0]["port"]


def test_new_spaces_go_to_the_broker_with_the_fewest_spaces_and_the_log_keeps_it(
        tenant, settings):
    settings.MAAS_RABBITMQ_NODES = 3  # placement alone: no broker is asked here
    spaces = [services.create_address_space(ctx=CTX, tenant=tenant, name=f"p{i}",
                                            type="brokered", plan="brokered-single-broker")
              for i in range(4)]
    assert [s.broker for s in spaces] == ["", "maas1", "maas2", ""]
    payloads = [ConfigEvent.objects.get(stream_id=s.uid, type="address_space.created")
                .payload for s in spaces]
    assert [p.get("broker") for p in payloads] == [None, "maas1", "maas2", None]
    assert rebuild.rebuild(check_only=True)[1] == []  # the rebuilt rows keep their brokers

    on_maas2 = {e["name"]: e["servicePorts"][0]["port"] for e in client_endpoints(spaces[2])}
    assert on_maas2 == {"messaging": 5682, "mqtt": 1902}  # its MQTT relay
    on_shared = {e["name"]: e["servicePorts"][0]["port"] for e in client_endpoints(spaces[0])}
    assert on_shared == {"messaging": settings.RABBITMQ_AMQP_PORT,
                         "mqtt": settings.MAAS_MQTT_RELAY_PORT}

    settings.MAAS_RABBITMQ_NODES = 2  # maas2 no longer runs: its space has nowhere to go
    with pytest.raises(ImproperlyConfigured, match="maas2"):
        space_endpoints.of(AddressSpace.objects.get(uid=spaces[2].uid))
    assert space_endpoints.of(spaces[1]).broker.api_url.endswith(":15681/api")


def test_a_space_lives_on_its_broker_alone_and_its_clients_reach_it_there(
        tenant, pool, redis_server):
    shared, second = pool
    first = brokered(tenant, f"a{uuid.uuid4().hex[:5]}")
    other = brokered(tenant, f"b{uuid.uuid4().hex[:5]}")
    assert (first.broker, other.broker) == ("", "maas1")
    try:
        for space in (first, other):
            runner.run(space.uid, "storage")
        assert first.vhost in vhosts_on(shared) and first.vhost not in vhosts_on(second)
        assert other.vhost in vhosts_on(second) and other.vhost not in vhosts_on(shared)
        queues = api(second, f"/queues/{quote(other.vhost, safe='')}?columns=name").json()
        assert {q["name"] for q in queues} == {"orders"}

        assert amqp_port(other) == second.amqp_port == 5681
        conn = connect(amqp_port(other), other)
        conn.create_sender("/exchange/orders").send(Message(body="on maas1", durable=True))
        conn.close()
        conn = connect(amqp_port(other), other)
        receiver = conn.create_receiver("/amq/queue/orders")
        assert receiver.receive(timeout=10).body == "on maas1"
        receiver.accept()
        conn.close()

        # Neither space's login opens the other's vhost: on the other broker it does not exist.
        for port, space, login_of in ((5681, other, first), (shared.amqp_port, first, other)):
            with pytest.raises(Exception):  # noqa: B017 - proton's refusal varies by stage
                conn = BlockingConnection(
                    f"amqp://127.0.0.1:{port}", user=f"app@{login_of.vhost}", password=PASSWORD,
                    virtual_host=f"vhost:{space.vhost}", timeout=10, allowed_mechs="PLAIN")
                conn.create_receiver("/amq/queue/orders").receive(timeout=3)
    finally:
        for space in (first, other):
            services.delete_address_space(ctx=CTX, space=space)
            runner.run(space.uid, "storage")
    assert other.vhost not in vhosts_on(second)


def test_the_watch_repairs_a_restart_of_one_broker_and_leaves_the_others(tenant, pool,
                                                                         redis_server):
    first = brokered(tenant, f"c{uuid.uuid4().hex[:5]}")
    other = brokered(tenant, f"d{uuid.uuid4().hex[:5]}")
    try:
        for space in (first, other):
            runner.run(space.uid, "storage")
        broker_watch.tick()  # markers on both brokers from now on
        for space in (first, other):  # what the reconciles the tick may have queued do
            dispatch.claim(space.uid, resync=True)
            runner.run(space.uid, "storage", only_if_behind=True)
        assert broker_watch.tick().restarted is False

        for command in ("stop_app", "start_app"):
            subprocess.run(["rabbitmqctl", "-q", "-n", node1_name(), command], check=True,
                           timeout=300, capture_output=True)
        ticks = []
        wait_for(lambda: ticks.append(broker_watch.tick()) or ticks[-1].restarted, 60,
                 interval=1, what="the watch to see maas1 restarted")
        assert ticks[-1].invalidated == 1 and ticks[-1].queued >= 1
        states = {s.uid: AgentState.objects.get(space_uid=s.uid, kind="storage")
                  for s in (first, other)}
        assert states[other.uid].invalidated == broker_watch.RESTORING
        assert not states[first.uid].invalidated  # its broker did not restart
    finally:
        for space in (first, other):
            services.delete_address_space(ctx=CTX, space=space)
            wait_for(lambda space=space: _applied(space), 60, interval=0.5,
                     what="the teardown on a broker starting again")


def _applied(space) -> bool:
    try:
        runner.run(space.uid, "storage")
        return True
    except runner.TransientError:
        return False


def test_prometheus_finds_the_running_pool_nodes_where_the_nodes_script_lists_them(pool):
    """deploy/monitoring/prometheus.yml reads the extra brokers' endpoints from the file that
    deploy/local/rabbitmq-nodes.sh writes after each action; each answers with metrics."""
    root = Path(__file__).resolve().parents[2]
    monitoring = root / "deploy" / "monitoring"
    config = yaml.safe_load((monitoring / "prometheus.yml").read_text())
    files = {(monitoring / f).resolve() for job in config["scrape_configs"]
             if job["job_name"] in ("maas-broker", "maas-broker-queues")
             for sd in job["file_sd_configs"] for f in sd["files"]}
    assert files == {root / "var" / "monitoring" / "rabbitmq-nodes.json"}
    subprocess.run(["bash", str(root / "deploy/local/rabbitmq-nodes.sh"), "start", "2"],
                   check=True, timeout=300)  # maas1 runs already: only the file is written
    [group] = json.loads(files.pop().read_text())
    assert "127.0.0.1:15701" in group["targets"]
    for target in group["targets"]:
        answer = requests.get(f"http://{target}/metrics", timeout=30)
        assert answer.status_code == 200 and "rabbitmq_" in answer.text
