"""`manage.py runplatform` with MAAS_ROUTER_MESH = 3 and qdrouterd: three interior routers on
config_service.routers' ports, router k connecting to routers 1..k-1 over mutual TLS with the
mesh's CA; the spaces' clients get each as a failover URL. The embedded router is not meshed:
asking for a mesh without qdrouterd is refused at start. (The mesh itself, started and used:
tests/workers/test_router_mesh.py.)"""
import json

import pytest
from django.core.management.base import CommandError

from config_service import routers
from maas.management.commands.runplatform import processes
from tests.qdrouterd import fake_binary


@pytest.fixture
def mesh_settings(settings, tmp_path, monkeypatch):
    fake_binary(tmp_path, monkeypatch)
    settings.BASE_DIR = tmp_path
    settings.MAAS_ROUTER_MESH, settings.MAAS_ROUTER_MESH_PORT_BASE = 3, 5720
    settings.MAAS_INTERNAL_TLS_DIR = str(tmp_path / "mesh-tls")
    settings.MAAS_ROUTER_HOST, settings.MAAS_ROUTER_AMQP_PORT = "127.0.0.1", 5673
    settings.MAAS_ROUTER_MANAGEMENT_URL = "amqp://127.0.0.1:5675"
    return settings


def entities(config: list, etype: str) -> dict:
    return {attrs.get("name", etype): attrs for kind, attrs in config if kind == etype}


def test_each_router_of_the_mesh_runs_interior_and_links_to_the_ones_before_it_over_tls(
        mesh_settings, tmp_path):
    procs = processes("127.0.0.1:8000")
    assert {"router", "router-2", "router-3"} <= set(procs)
    configs = [json.loads((tmp_path / "var" / name).read_text())
               for name in ("qdrouterd.json", "qdrouterd-2.json", "qdrouterd-3.json")]
    inter_router = [5720, 5734, 5744]
    for k, config in enumerate(configs):
        (router,) = entities(config, "router").values()
        assert (router["mode"], router["id"]) == ("interior", f"maas-router-{k + 1}")
        listeners = entities(config, "listener")
        assert int(listeners["amqp"]["port"]) == [5673, 5730, 5740][k]
        assert int(listeners["management"]["port"]) == [5675, 5732, 5742][k]
        mesh = listeners["inter-router"]
        assert int(mesh["port"]) == inter_router[k]
        assert (mesh["requireSsl"], mesh["authenticatePeer"], mesh["saslMechanisms"]) == (
            True, True, "EXTERNAL")
        connectors = entities(config, "connector").values()
        assert sorted(int(c["port"]) for c in connectors) == inter_router[:k]
        assert all(c["role"] == "inter-router" and c["sslProfile"] == "mesh"
                   and c["verifyHostname"] and c["saslMechanisms"] == "EXTERNAL"
                   for c in connectors)
        profile = entities(config, "sslProfile")["mesh"]
        assert profile["certFile"].endswith(f"maas-router-{k + 1}.pem")
        assert profile["caCertFile"] == str(tmp_path / "mesh-tls" / "ca.pem")
    assert routers.failover_urls("amqp", "msg.example.com") == [
        "amqp://msg.example.com:5673", "amqp://msg.example.com:5730",
        "amqp://msg.example.com:5740"]


def test_a_single_router_stays_standalone(mesh_settings, tmp_path):
    mesh_settings.MAAS_ROUTER_MESH = 1
    processes("127.0.0.1:8000")
    config = json.loads((tmp_path / "var" / "qdrouterd.json").read_text())
    assert entities(config, "router")["router"]["mode"] == "standalone"
    assert "inter-router" not in entities(config, "listener") and not entities(config, "connector")


def test_a_mesh_of_the_embedded_router_is_refused(settings, monkeypatch):
    monkeypatch.delenv("QDROUTERD", raising=False)
    settings.MAAS_ROUTER_MESH = 3
    with pytest.raises(CommandError, match="needs qdrouterd"):
        processes("127.0.0.1:8000")
