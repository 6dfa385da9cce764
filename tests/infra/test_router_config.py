"""A space's router on Kubernetes: a Qpid Dispatch Router image whose configuration, in the
router's ConfigMap, is dataplane.qdrouterd.router_config in interior mode; checked against the
management schema of the qdrouterd 1.19 build `QDROUTERD` names, and started on it."""
import base64
import dataclasses
import json
import subprocess
import time

import pytest

from dataplane import qdrouterd
from tests.qdrouterd import needs_qdrouterd
from tests.router import qdrouter_schema
from tests.router.conftest import wait_port
from workers.agents.router import agent as router_agent
from workers.infra import manifests as m
from workers.infra.controller import InfraController

from . import pods, spaces
from .fake_kube import FakeKubernetes


def router_objects(space=None, cfg=spaces.CFG):
    space = space or spaces.small()
    docs = m.router_manifests(space, cfg, spaces.OWNER_UID, spaces.certificates(space))
    config_map = next(d for d in docs if d["kind"] == "ConfigMap")
    statefulset = next(d for d in docs if d["kind"] == "StatefulSet")
    return config_map, statefulset


def entities(config: list, etype: str) -> dict[str, dict]:
    return {attrs.get("name", etype): attrs for t, attrs in config if t == etype}


def test_the_routers_always_relay_logins_over_tls_to_the_auth_service():
    """The routers check the auth service against `certs.auth_ca` (the internal CA bundle, or
    an operator's own CA: test_internal_tls.py), which the router's internal Secret carries."""
    space = spaces.small()
    pem = "-----BEGIN CERTIFICATE-----\nAUTH CA\n-----END CERTIFICATE-----\n"
    certs = dataclasses.replace(spaces.certificates(space), auth_ca=pem)
    docs = m.router_manifests(space, spaces.CFG, spaces.OWNER_UID, certs)
    config = json.loads(next(d for d in docs if d["kind"] == "ConfigMap")["data"][
        m.ROUTER_CONFIG_FILE])
    (plugin,) = entities(config, "authServicePlugin").values()
    profile = entities(config, "sslProfile")[plugin["sslProfile"]]
    assert profile["caCertFile"] == f"{m.ROUTER_INTERNAL_DIR}/{m.AUTH_CA_FILE}"
    secret = next(d for d in docs if d["metadata"]["name"] == m.internal_secret_name(
        space.infra))
    assert base64.b64decode(secret["data"][m.AUTH_CA_FILE]).decode() == pem


def test_the_router_runs_qdrouterd_not_skupper_router():
    assert "qdrouterd" in m.InfraSettings().router_image
    assert "skupper" not in m.InfraSettings().router_image
    _, sts = router_objects()
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    assert container["image"] == spaces.CFG.router_image


def test_the_config_map_holds_the_qdrouterd_configuration_the_image_reads():
    config_map, sts = router_objects()
    pod = sts["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    # The image's launch script reads QDROUTERD_CONF (a file) of type QDROUTERD_CONF_TYPE.
    assert env["QDROUTERD_CONF_TYPE"] == "json"
    directory, _, filename = env["QDROUTERD_CONF"].rpartition("/")
    mounts = {v["name"]: v["mountPath"] for v in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["config"] == directory
    assert volumes["config"]["configMap"]["name"] == config_map["metadata"]["name"]
    assert json.loads(config_map["data"][filename]) == m.router_config(spaces.small(),
                                                                       spaces.CFG)
    # It writes the expanded copy to /tmp: writable although the root file system is not.
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert mounts["tmp"] == "/tmp" and "emptyDir" in volumes["tmp"]
    # The certificate files the sslProfile names are the TLS Secret's.
    profile = entities(m.router_config(spaces.small(), spaces.CFG), "sslProfile")["tls"]
    assert profile["certFile"] == f"{mounts['certs']}/tls.crt"
    assert profile["privateKeyFile"] == f"{mounts['certs']}/tls.key"
    assert volumes["certs"]["secret"]["secretName"] == m.tls_secret_name(spaces.small().infra)


def test_tenant_listeners_are_multi_tenant_and_relay_sasl_to_the_auth_service():
    space = spaces.small()
    config = m.router_config(space, spaces.CFG)
    (plugin,) = entities(config, "authServicePlugin").values()
    assert (plugin["host"], plugin["port"]) == ("maas-authservice.maas.svc", "5676")
    listeners = entities(config, "listener")
    for name, port in (("amqp", m.ROUTER_AMQP_PORT), ("amqps", m.ROUTER_AMQPS_PORT)):
        listener = listeners[name]
        assert listener["port"] == str(port)
        assert listener["multiTenant"] is True
        assert listener["saslPlugin"] == plugin["name"]
        assert listener["authenticatePeer"] is True
        # One space per router: its vhost, whatever hostname a client sends.
        assert listener["policyVhost"] == space.vhost
    assert listeners["amqps"]["requireSsl"] is True
    (policy,) = entities(config, "policy").values()
    assert policy["enableVhostPolicy"] is True


def test_management_is_the_router_admins_through_the_auth_service():
    config = m.router_config(spaces.small(), spaces.CFG)
    management = entities(config, "listener")["management"]
    assert management["port"] == str(m.ROUTER_MANAGEMENT_PORT)
    assert management["saslPlugin"] == qdrouterd.AUTH_PLUGIN
    # The agents' kept connections outlive a quiet spell (qdrouterd's default drops at 16 s).
    assert int(management["idleTimeoutSeconds"]) > router_agent.POOL_IDLE_SECONDS > 16
    vhost = next(a for t, a in config if t == "vhost" and a["hostname"] == management[
        "policyVhost"])
    assert [g["users"] for g in vhost["groups"].values()] == [spaces.CFG.router_admin_user]
    # The space's agent logs in as that admin (its password file comes from maas-config).
    agent = m.agent_manifest(spaces.small(), spaces.CFG, spaces.OWNER_UID)
    env = {e["name"]: e.get("value") for e in
           agent["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["MAAS_ROUTER_ADMIN_USER"] == spaces.CFG.router_admin_user


def test_interior_mode_inter_router_and_http_listeners_match_the_pod():
    config = m.router_config(spaces.small(), spaces.CFG)
    (router,) = entities(config, "router").values()
    assert router["mode"] == "interior" and router["id"] == "${HOSTNAME}"
    listeners = entities(config, "listener")
    assert listeners["inter-router"]["role"] == "inter-router"
    assert listeners["inter-router"]["port"] == str(m.ROUTER_INTER_ROUTER_PORT)
    http = listeners["metrics"]
    assert http["http"] and http["healthz"] and http["metrics"]
    _, sts = router_objects()
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert str(ports[container["readinessProbe"]["httpGet"]["port"]]) == http["port"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert {str(p) for p in ports.values()} == {a["port"] for a in listeners.values()}


def test_the_auth_service_host_can_be_set():
    cfg = m.InfraSettings(auth_service_host="auth.example.com", auth_service_port=15676)
    (plugin,) = entities(m.router_config(spaces.small(), cfg), "authServicePlugin").values()
    assert (plugin["host"], plugin["port"]) == ("auth.example.com", "15676")
    namespaced = m.InfraSettings(namespace="messaging")
    assert namespaced.auth_service == ("maas-authservice.messaging.svc", m.AUTH_SERVICE_PORT)


def test_the_brokers_give_the_routers_connectors_the_spaces_vhost():
    """qdrouterd's connector cannot send RabbitMQ's `vhost:NAME` hostname."""
    space = spaces.small()
    conf = m.broker_config(space, spaces.CFG, space.brokers[0])["rabbitmq.conf"]
    assert f"amqp1_0.default_vhost = {space.vhost}\n" in conf


def test_one_machine_keeps_a_standalone_router_that_takes_the_vhost_from_the_hostname():
    where = qdrouterd.Listeners(host="127.0.0.1", amqp_port=1, management_host="127.0.0.1",
                                management_port=2, admin_user="admin", auth_host="127.0.0.1",
                                auth_port=3)
    config = qdrouterd.router_config("local", where)
    assert entities(config, "router")["router"]["mode"] == "standalone"
    listeners = entities(config, "listener")
    assert set(listeners) == {"amqp", "management"}
    assert "policyVhost" not in listeners["amqp"]
    with pytest.raises(ValueError):
        qdrouterd.router_config("local", qdrouterd.Listeners(
            host="127.0.0.1", amqp_port=1, management_host="127.0.0.1", management_port=2,
            admin_user="admin", auth_host="127.0.0.1", auth_port=3, inter_router_port=4))


@needs_qdrouterd
def test_every_configured_entity_and_attribute_exists_in_qdrouterd():
    schema = qdrouter_schema.load(qdrouterd.binary())
    for space in (spaces.small(), spaces.medium()):
        for etype, attrs in m.router_config(space, spaces.CFG):
            allowed = qdrouter_schema.creatable(schema, etype)
            assert set(attrs) <= allowed, (etype, set(attrs) - allowed)
            for group in attrs.get("groups", {}).values() if etype == "vhost" else ():
                keys = qdrouter_schema.attributes(schema, "vhostUserGroupSettings")
                assert set(group) <= keys, set(group) - keys


@needs_qdrouterd
def test_qdrouterd_starts_on_the_config_map(tmp_path):
    """The configuration and certificates the controller applied (its ConfigMap and Secrets,
    written where the pod mounts them), with free local ports and the id the image would
    expand, run qdrouterd 1.19: every listener comes up with its TLS profile."""
    kube = FakeKubernetes()
    controller = InfraController(kube, None, spaces.CFG, lambda purpose, infra: "x")
    controller.reconcile(spaces.medium())
    pod = pods.router_pod(kube, spaces.medium(), tmp_path)
    log = tmp_path / "qdrouterd.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(qdrouterd.command(pod.config), stdout=out, stderr=out)
    try:
        # A build without libwebsockets has no HTTP listener (the image has one).
        for name, port in pod.ports.items():
            if name != "metrics" or "HTTP support is not available" not in log.read_text():
                try:
                    wait_port(port, timeout=10)
                except RuntimeError:
                    pytest.fail(f"listener {name} did not come up: {log.read_text()[-3000:]}")
        time.sleep(0.3)
        assert proc.poll() is None, log.read_text()[-3000:]
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_infra_controller_reads_the_auth_service_s_ca_where_the_secret_put_it(settings,
                                                                                 tmp_path):
    from workers.infra.backend import infra_settings

    ca = tmp_path / "ca.crt"
    settings.MAAS_INFRA_AUTH_SERVICE_CA = str(ca)
    assert infra_settings().auth_service_ca == ""  # none: the controller's choice
    ca.write_text("PEM")
    assert infra_settings().auth_service_ca == "PEM"
