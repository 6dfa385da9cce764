"""`manage.py runplatform` starts the vhost relay in front of RabbitMQ's AMQP only when qdrouterd
runs instead of the embedded router (`QDROUTERD` names an executable), and one in front of each
broker's MQTT always."""
import pytest

from maas.management.commands.runplatform import processes


@pytest.fixture
def fake_qdrouterd(tmp_path, monkeypatch, settings):
    binary = tmp_path / "qdrouterd"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    monkeypatch.setenv("QDROUTERD", str(binary))
    settings.MAAS_RUN_EMBEDDED_ROUTER = False  # no router process: only the relay is looked at
    return binary


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
