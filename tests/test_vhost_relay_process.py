"""`manage.py runplatform` starts the vhost relay in front of RabbitMQ's AMQP only when qdrouterd
runs instead of the embedded router (`QDROUTERD` names an executable), and one in front of each
broker's MQTT always, and one for the AMQP clients of brokered spaces (both with TLS); every relay
reaches RabbitMQ's TLS listeners where the broker has them; and the embedded router's state
directory is the settings'."""
import pytest

from maas.management.commands.runplatform import processes
from tests.qdrouterd import fake_binary
from workers import endpoints


@pytest.fixture(autouse=True)
def plain_brokers(settings):
    """Brokers without TLS listeners, unless a test gives them (the last tests)."""
    settings.RABBITMQ_AMQPS_PORT = settings.RABBITMQ_MQTTS_PORT = 0


@pytest.fixture
def fake_qdrouterd(tmp_path, monkeypatch, settings):
    settings.MAAS_RUN_EMBEDDED_ROUTER = False  # no router process: only the relay is looked at
    return fake_binary(tmp_path, monkeypatch)


def test_with_qdrouterd_the_platform_runs_the_relay_in_front_of_rabbitmq(settings,
                                                                        fake_qdrouterd):
    settings.MAAS_VHOST_RELAY_HOST, settings.MAAS_VHOST_RELAY_PORT = "127.0.0.1", 5999
    settings.RABBITMQ_AMQP_HOST, settings.RABBITMQ_AMQP_PORT = "10.0.0.5", 5672
    argv = processes("127.0.0.1:8000")["vhost-relay"]
    assert argv[1:] == ["-m", "dataplane.vhost_relay", "--listen", "127.0.0.1:5999",
                        "--broker", "10.0.0.5:5672"]


def test_without_a_router_there_is_no_relay(settings, fake_qdrouterd):
    settings.MAAS_ROUTER_ENABLED = False
    assert "vhost-relay" not in processes("127.0.0.1:8000")


def test_with_the_embedded_router_there_is_no_relay(settings, monkeypatch):
    settings.MAAS_RUN_EMBEDDED_ROUTER = False
    monkeypatch.delenv("QDROUTERD", raising=False)
    assert "vhost-relay" not in processes("127.0.0.1:8000")


def test_every_broker_gets_an_mqtt_relay_whichever_router_runs(settings, monkeypatch):
    monkeypatch.delenv("QDROUTERD", raising=False)
    settings.MAAS_RABBITMQ_NODES = 2
    settings.MAAS_MQTT_RELAY_HOST, settings.MAAS_MQTT_RELAY_PORT = "127.0.0.1", 1996
    settings.RABBITMQ_AMQP_HOST, settings.RABBITMQ_MQTT_PORT = "10.0.0.5", 1884
    procs = processes("127.0.0.1:8000")
    assert procs["mqtt-relay"][1:] == ["-m", "dataplane.vhost_relay", "--protocol", "mqtt",
                                       "--listen", "127.0.0.1:1996", "--broker", "10.0.0.5:1884"]
    assert procs["mqtt-relay-maas1"][-4:] == ["--listen", "127.0.0.1:1901",
                                              "--broker", "10.0.0.5:1891"]


def test_every_broker_gets_a_brokered_amqp_relay_and_both_relays_serve_tls(settings,
                                                                           monkeypatch,
                                                                           tmp_path):
    monkeypatch.delenv("QDROUTERD", raising=False)
    settings.MAAS_RABBITMQ_NODES = 2
    settings.MAAS_ROUTER_TLS_CERT = str(tmp_path / "cert.pem")
    settings.MAAS_ROUTER_TLS_KEY = str(tmp_path / "key.pem")
    settings.MAAS_MQTT_RELAY_HOST = "127.0.0.1"
    settings.MAAS_BROKERED_AMQP_PORT, settings.MAAS_BROKERED_AMQPS_PORT = 5678, 5679
    settings.MAAS_MQTT_RELAY_TLS_PORT = 8886
    settings.RABBITMQ_AMQP_HOST, settings.RABBITMQ_AMQP_PORT = "10.0.0.5", 5672
    settings.RABBITMQ_API_URL = "http://10.0.0.5:15672/api"
    procs = processes("127.0.0.1:8000")
    tls = ["--tls-cert", settings.MAAS_ROUTER_TLS_CERT, "--tls-key", settings.MAAS_ROUTER_TLS_KEY,
           "--space-tls-dir", settings.MAAS_SPACE_TLS_DIR]
    assert procs["amqp-relay"][1:] == [
        "-m", "dataplane.vhost_relay", "--protocol", "brokered-amqp",
        "--listen", "127.0.0.1:5678", "--broker", "10.0.0.5:5672",
        "--api-url", "http://10.0.0.5:15672/api", "--tls-listen", "127.0.0.1:5679", *tls]
    assert procs["amqp-relay-maas1"][5:11] == ["--listen", "127.0.0.1:5701",
                                               "--broker", "10.0.0.5:5681",
                                               "--api-url", "http://10.0.0.5:15681/api"]
    assert procs["amqp-relay-maas1"][-8:-6] == ["--tls-listen", "127.0.0.1:5711"]
    assert procs["mqtt-relay"][-8:] == ["--tls-listen", "127.0.0.1:8886", *tls]
    assert procs["mqtt-relay-maas1"][-8:-6] == ["--tls-listen", "127.0.0.1:1911"]
    assert (tmp_path / "cert.pem").exists()  # made for them, as for the router

    settings.MAAS_BROKERED_AMQP_PORT = settings.MAAS_MQTT_RELAY_TLS_PORT = 0  # turned off
    procs = processes("127.0.0.1:8000")
    assert "amqp-relay" not in procs and "--tls-listen" not in procs["mqtt-relay"]


def test_the_embedded_router_keeps_its_journal_where_the_settings_say(settings, monkeypatch,
                                                                       tmp_path):
    """MAAS_ROUTER_STATE_DIR (var/router-state by default): a platform on a database of its
    own gives its router a journal of its own, or the router restores another database's
    spaces (a bench run on the same names kept failing on their old credentials)."""
    monkeypatch.delenv("QDROUTERD", raising=False)
    settings.MAAS_ROUTER_STATE_DIR = str(tmp_path / "state")
    argv = processes("127.0.0.1:8000")["router"]
    assert argv[argv.index("--state-dir") + 1] == str(tmp_path / "state")


def test_a_cluster_is_one_broker_whose_relays_fail_over_between_its_nodes(settings, monkeypatch):
    """MAAS_RABBITMQ_CLUSTER=1-3: one broker `cluster` of the pool on node 1's ports, every
    node's API listed, each relay given the other nodes; with the embedded router too (its
    connectors reach the cluster through the relay)."""
    monkeypatch.delenv("QDROUTERD", raising=False)
    settings.MAAS_RABBITMQ_CLUSTER = "1-3"
    settings.MAAS_MQTT_RELAY_HOST, settings.MAAS_BROKERED_AMQP_PORT = "127.0.0.1", 5678
    settings.RABBITMQ_AMQP_HOST, settings.RABBITMQ_API_URL = "10.0.0.5", "http://10.0.0.5:15672/api"
    shared, cluster = endpoints.broker_pool()
    assert (cluster.name, cluster.cluster, shared.cluster) == ("cluster", True, False)
    assert cluster.api_url == ",".join(f"http://10.0.0.5:{p}/api" for p in (15681, 15682, 15683))
    procs = processes("127.0.0.1:8000")
    more = ["--more-broker", "10.0.0.5:5682", "--more-broker", "10.0.0.5:5683"]
    assert procs["vhost-relay-cluster"][3:] == ["--listen", f"127.0.0.1:{cluster.relay_port}",
                                                "--broker", "10.0.0.5:5681", *more]
    assert "vhost-relay" not in procs  # the shared broker: the embedded router's own connector
    assert procs["amqp-relay-cluster"][7:13] == ["--broker", "10.0.0.5:5681", *more]
    assert procs["mqtt-relay-cluster"][7:13] == [
        "--broker", "10.0.0.5:1891", "--more-broker", "10.0.0.5:1892", "--more-broker",
        "10.0.0.5:1893"]


@pytest.fixture
def internal_ca(settings, tmp_path):
    """Brokers with TLS listeners, and the internal CA that signed them."""
    settings.MAAS_INTERNAL_TLS_DIR = str(tmp_path / "internal-tls")
    settings.RABBITMQ_AMQPS_PORT, settings.RABBITMQ_MQTTS_PORT = 5671, 8884
    (tmp_path / "internal-tls").mkdir()
    (tmp_path / "internal-tls" / "ca.pem").write_text("a CA")
    return str(tmp_path / "internal-tls" / "ca.pem")


def test_relays_reach_the_brokers_tls_listeners_checking_the_internal_ca(settings, monkeypatch,
                                                                         internal_ca):
    monkeypatch.delenv("QDROUTERD", raising=False)
    settings.MAAS_RABBITMQ_NODES = 2
    settings.MAAS_MQTT_RELAY_HOST, settings.MAAS_MQTT_RELAY_PORT = "127.0.0.1", 1996
    settings.RABBITMQ_AMQP_HOST = "10.0.0.5"
    procs = processes("127.0.0.1:8000")
    assert procs["mqtt-relay"][5:11] == ["--listen", "127.0.0.1:1996", "--broker",
                                         "10.0.0.5:8884", "--broker-ca", internal_ca]
    assert procs["mqtt-relay-maas1"][7:11] == ["--broker", "10.0.0.5:8871",
                                               "--broker-ca", internal_ca]
    router = procs["router"]  # its connectors' profile for the brokers' TLS listeners
    assert router[router.index("--broker-ca") + 1] == internal_ca


def test_the_routers_relay_is_tls_for_the_embedded_router_and_plain_for_qdrouterd(
        settings, monkeypatch, tmp_path, internal_ca):
    """qdrouterd 1.19's TLS connectors crashed it (runplatform.router_facing_args): its hop to
    the relay stays plain on loopback; the relay's own hop to RabbitMQ is TLS either way."""
    settings.MAAS_RABBITMQ_CLUSTER = "1-3"
    settings.RABBITMQ_AMQP_HOST = "127.0.0.1"
    monkeypatch.delenv("QDROUTERD", raising=False)
    relay = processes("127.0.0.1:8000")["vhost-relay-cluster"]
    port = endpoints.broker_pool()[1].relay_port
    assert relay[3:7] == ["--listen", "none", "--tls-listen", f"127.0.0.1:{port}"]
    assert relay[relay.index("--broker") + 1] == "127.0.0.1:5661"
    assert relay[relay.index("--broker-ca") + 1] == internal_ca
    assert relay[relay.index("--more-broker") + 1] == "127.0.0.1:5662"

    settings.MAAS_RUN_EMBEDDED_ROUTER = False
    fake_binary(tmp_path, monkeypatch)
    relay = processes("127.0.0.1:8000")["vhost-relay-cluster"]
    assert relay[3:7] == ["--listen", f"127.0.0.1:{port}", "--broker", "127.0.0.1:5661"]
