"""deploy/: the Kustomize base and overlays render with `kubectl kustomize`, and every static
manifest and every rendered one validates against the Kubernetes OpenAPI schemas of a
current release (`kubernetes-validate`, strict: unknown fields are errors).

Needs `kubectl` on PATH (Debian's kubernetes-client; `deploy/local/services.sh` installs it).
"""
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from django.conf import settings

from workers.infra import kube
from workers.infra import manifests as m

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
TARGETS = ["base", "overlays/dev", "overlays/production"]
VERSION = kubernetes_validate.latest_version()


def render(target: str) -> list[dict]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is missing: apt-get install kubernetes-client"
    result = subprocess.run([kubectl, "kustomize", str(DEPLOY / target)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert docs, f"kubectl kustomize {target} rendered no document"
    return docs


def listed(directory: Path) -> set[tuple[str, str]]:
    """(kind, name) of every object a kustomization names: its resource files, its bases'
    (recursively) and its generated Secrets and ConfigMaps."""
    k = yaml.safe_load((directory / "kustomization.yaml").read_text())
    out = set()
    for entry in k.get("bases", []) + k.get("resources", []):
        path = directory / entry
        if path.is_dir():
            out |= listed(path)
        else:
            out |= {(d["kind"], d["metadata"]["name"])
                    for d in yaml.safe_load_all(path.read_text()) if d}
    out |= {("Secret", g["name"]) for g in k.get("secretGenerator", [])}
    out |= {("ConfigMap", g["name"]) for g in k.get("configMapGenerator", [])}
    return out


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict]]:
    return {target: render(target) for target in TARGETS}


def by(docs, kind, name):
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def static_files():
    for path in sorted(DEPLOY.rglob("*.yaml")):
        if path.name == "kustomization.yaml" or "overlays" in path.parts:
            continue  # overlays hold patches: validated once rendered
        yield path


@pytest.mark.parametrize("path", list(static_files()), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_static_manifests_validate(path):
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, VERSION, strict=True)


def test_there_are_static_manifests_to_validate():
    names = {p.name for p in static_files()}
    assert {"web.yaml", "worker.yaml", "beat.yaml", "migrate.yaml", "rbac.yaml",
            "authservice.yaml"} <= names


@pytest.mark.parametrize("target", TARGETS)
def test_rendered_manifests_validate(rendered, target):
    expected = listed(DEPLOY / target)
    assert ("Deployment", "maas-web") in expected  # the listing itself found the base
    assert expected <= {(d["kind"], d["metadata"]["name"]) for d in rendered[target]}
    for doc in rendered[target]:
        kubernetes_validate.validate(doc, VERSION, strict=True)


@pytest.mark.parametrize("target", ["overlays/dev", "overlays/production"])
def test_overlays_run_the_whole_control_plane(rendered, target):
    docs = rendered[target]
    ns = {d["metadata"].get("namespace") for d in docs if d["kind"] != "Namespace"}
    assert len(ns) == 1 and None not in ns
    web = by(docs, "Deployment", "maas-web")["spec"]["template"]["spec"]["containers"][0]
    assert web["command"][:2] == ["gunicorn", "maas.wsgi"]
    assert web["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert web["readinessProbe"]["httpGet"]["path"] == "/readyz"
    worker = by(docs, "Deployment", "maas-worker")["spec"]["template"]["spec"]
    assert worker["containers"][0]["command"][:4] == ["celery", "-A", "maas", "worker"]
    assert worker["serviceAccountName"] == "maas-infra-controller"
    beat = by(docs, "Deployment", "maas-beat")["spec"]["template"]["spec"]["containers"][0]
    assert beat["command"][:4] == ["celery", "-A", "maas", "beat"]
    job = by(docs, "Job", "maas-migrate")["spec"]["template"]["spec"]["containers"][0]
    assert job["command"] == ["python", "manage.py", "migrate", "--noinput"]
    assert by(docs, "Deployment", "maas-redis")
    assert {d["metadata"]["name"] for d in docs if d["kind"] == "PodDisruptionBudget"} >= {
        "maas-web", "maas-worker"}
    assert len([d for d in docs if d["kind"] == "NetworkPolicy"]) >= 3
    for d in docs:
        if d["kind"] in ("Deployment", "StatefulSet", "Job"):
            for c in d["spec"]["template"]["spec"]["containers"]:
                assert c["resources"]["requests"] and c["resources"]["limits"], d["metadata"]


def test_dev_bundles_postgres_and_rabbitmq_and_production_uses_external_ones(rendered):
    dev = {(d["kind"], d["metadata"]["name"]) for d in rendered["overlays/dev"]}
    prod = {(d["kind"], d["metadata"]["name"]) for d in rendered["overlays/production"]}
    assert {("StatefulSet", "maas-postgres"), ("StatefulSet", "maas-rabbitmq"),
            ("Secret", "maas-secrets")} <= dev
    assert not {("StatefulSet", "maas-postgres"), ("StatefulSet", "maas-rabbitmq"),
                ("Secret", "maas-secrets")} & prod  # the operator creates maas-secrets


def test_the_dev_secret_holds_every_file_the_config_names(rendered):
    """A *_FILE naming a key the Secret lacks stops every pod at start-up."""
    docs = rendered["overlays/dev"]
    config = by(docs, "ConfigMap", "maas-config")["data"]
    secret = by(docs, "Secret", "maas-secrets")
    keys = set(secret.get("data", {})) | set(secret.get("stringData", {}))
    named = {value.removeprefix("/etc/maas/secrets/") for name, value in config.items()
             if name.endswith("_FILE") and value.startswith("/etc/maas/secrets/")}
    assert "metrics-token" in named
    assert named <= keys, named - keys


@pytest.mark.parametrize("target", TARGETS)
def test_secrets_are_read_through_file_variables(rendered, target):
    config = by(rendered[target], "ConfigMap", "maas-config")["data"]
    for name, value in config.items():
        if any(w in name for w in ("PASSWORD", "SECRET", "TOKEN", "DATABASE_URL")):
            assert name.endswith("_FILE") and value.startswith("/etc/maas/secrets/"), name
    for required in ("MAAS_OIDC_ISSUER", "MAAS_OIDC_CLIENT_ID", "MAAS_OIDC_CLIENT_SECRET_FILE",
                     "MAAS_SECRET_KEY_FILE", "DATABASE_URL_FILE", "MAAS_INFRA_BACKEND",
                     "MAAS_METRICS_TOKEN_FILE"):
        assert required in config
    for d in rendered[target]:
        if d["kind"] in ("Deployment", "StatefulSet", "Job"):
            for c in d["spec"]["template"]["spec"]["containers"]:
                for e in c.get("env", []):
                    if "PASS" in e["name"] and not e["name"].endswith("_FILE"):
                        assert "value" not in e, (d["metadata"]["name"], e["name"])


def test_the_infra_controller_role_is_least_privilege_and_covers_what_it_owns(rendered):
    docs = rendered["overlays/production"]
    role = by(docs, "Role", "maas-infra-controller")
    granted = set()
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
        assert set(rule["verbs"]) <= {"get", "list", "watch", "create", "patch", "delete"}
        granted |= {(g, r) for g in rule["apiGroups"] for r in rule["resources"]}
    needed = {("" if "/" not in av else av.split("/")[0], kube.PLURALS[kind])
              for av, kind in m.OWNED_KINDS}
    assert granted == needed
    assert not [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    binding = by(docs, "RoleBinding", "maas-infra-controller")
    assert binding["subjects"][0]["namespace"] == "maas"
    # Every other pod runs without an API token.
    for d in docs:
        if d["kind"] in ("Deployment", "StatefulSet", "Job") and d["metadata"]["name"] != \
                "maas-worker":
            assert d["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


@pytest.mark.parametrize("target", ["overlays/dev", "overlays/production"])
def test_the_auth_service_runs_where_the_space_routers_look_for_it(rendered, target):
    docs = rendered[target]
    namespace = by(docs, "Deployment", "maas-authservice")["metadata"]["namespace"]
    pod = by(docs, "Deployment", "maas-authservice")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    tls = "/etc/maas/authservice-tls"
    # TLS only: no --tls-optional, and the pod waits for its Secret (the internal CA's
    # certificate, which the migrations Job makes, or the operator's own)
    assert container["command"] == ["python", "manage.py", "run_authservice",
                                    "--host", "0.0.0.0", "--port", str(m.AUTH_SERVICE_PORT),
                                    "--tls-cert", f"{tls}/tls.crt", "--tls-key", f"{tls}/tls.key"]
    assert container["envFrom"] == [{"configMapRef": {"name": "maas-config"}}]
    mounts = {v["name"]: v["mountPath"] for v in container["volumeMounts"]}
    volumes = {v["name"]: v.get("secret", {}) for v in pod["volumes"]}
    assert mounts["tls"] == tls and volumes["tls"] == {"secretName": "maas-authservice-tls"}
    # The infra controller reads which CA certifies it through the API; nothing names a file
    config = by(docs, "ConfigMap", "maas-config")["data"]
    assert "MAAS_INFRA_AUTH_SERVICE_CA" not in config
    assert pod["automountServiceAccountToken"] is False
    service = by(docs, "Service", m.AUTH_SERVICE_NAME)
    assert [p["port"] for p in service["spec"]["ports"]] == [m.AUTH_SERVICE_PORT]
    assert service["spec"]["selector"].items() <= pod_labels(docs, "maas-authservice").items()
    # The infra controller's default (MAAS_INFRA_NAMESPACE is the worker's namespace).
    cfg = m.InfraSettings(namespace=namespace)
    assert cfg.auth_service == (f"{m.AUTH_SERVICE_NAME}.{namespace}.svc", m.AUTH_SERVICE_PORT)


def pod_labels(docs, deployment: str) -> dict:
    return by(docs, "Deployment", deployment)["spec"]["template"]["metadata"]["labels"]


def test_only_the_space_routers_reach_the_auth_service(rendered):
    docs = rendered["overlays/production"]
    policy = by(docs, "NetworkPolicy", "maas-authservice")["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels(
        docs, "maas-authservice").items()
    (rule,) = policy["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": m.AUTH_SERVICE_PORT}]
    (peer,) = rule["from"]
    space = m.space_infra("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "acme", "shop", "p", [])
    wanted = peer["podSelector"]["matchLabels"].items()
    assert wanted <= m.labels(space, "router").items()
    for other in ("agent", "broker"):
        assert not wanted <= m.labels(space, other).items()


@pytest.mark.parametrize("target", TARGETS)
def test_the_router_image_is_qdrouterd_everywhere(rendered, target):
    config = by(rendered[target], "ConfigMap", "maas-config")["data"]
    assert config["MAAS_ROUTER_IMAGE"] == m.InfraSettings().router_image
    assert settings.MAAS_ROUTER_IMAGE == m.InfraSettings().router_image
    assert "qdrouterd" in config["MAAS_ROUTER_IMAGE"]


@pytest.mark.parametrize("target", ["overlays/dev", "overlays/production"])
def test_the_mqtt_gateway_runs_stateless_replicas_behind_one_service(rendered, target):
    docs = rendered[target]
    deployment = by(docs, "Deployment", "maas-mqtt-gateway")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"][:3] == ["python", "manage.py", "run_mqtt_gateway"]
    assert container["envFrom"] == [{"configMapRef": {"name": "maas-config"}}]
    assert pod["automountServiceAccountToken"] is False
    # MQTTS from an optional Secret: without one the pod still starts (plain MQTT only)
    tls = next(v for v in pod["volumes"] if v["name"] == "tls")
    assert tls["secret"] == {"secretName": "maas-mqtt-gateway-tls", "optional": True}
    service = by(docs, "Service", "maas-mqtt-gateway")
    assert [(p["name"], p["port"]) for p in service["spec"]["ports"]] == [
        ("mqtt", settings.MAAS_MQTT_GATEWAY_PORT), ("mqtts", settings.MAAS_MQTT_GATEWAY_TLS_PORT)]
    assert service["spec"]["selector"].items() <= pod_labels(docs, "maas-mqtt-gateway").items()
    policy = by(docs, "NetworkPolicy", "maas-mqtt-gateway")["spec"]
    assert [p["port"] for p in policy["ingress"][0]["ports"]] == [
        settings.MAAS_MQTT_GATEWAY_PORT, settings.MAAS_MQTT_GATEWAY_TLS_PORT]
    assert by(docs, "PodDisruptionBudget", "maas-mqtt-gateway")["spec"]["minAvailable"] == 1
    assert deployment["spec"]["replicas"] == (1 if target == "overlays/dev" else 2)


@pytest.mark.django_db(transaction=True)  # the gateway's reads close their connection
def test_the_mqtt_gateway_finds_a_space_s_own_router_on_kubernetes(settings, tenant):
    from config_service import services
    from maas.bindings import GatewayStore
    from tests.conftest import CTX

    space = services.create_address_space(ctx=CTX, tenant=tenant, name="iot", type="standard",
                                          plan="standard-medium")
    local = ("127.0.0.1", 5673)
    router_of = GatewayStore().router_of
    assert router_of(space.vhost, local) == local
    settings.MAAS_INFRA_BACKEND = "kubernetes"
    settings.MAAS_INFRA_NAMESPACE = "maas-spaces"
    host, port = router_of(space.vhost, local)
    assert host == f"router-{m.infra_id(str(space.uid))}-internal.maas-spaces.svc"
    assert port == m.ROUTER_INTERNAL_PORT
    # the routers' headless Service the infra controller renders for the space has that name
    # and port, and their internal certificate names it
    infra = m.space_infra(space.uid, tenant.slug, "iot", space.plan, [])
    cfg = m.InfraSettings(namespace="maas-spaces")
    cert = m.Certificate("c", "k")
    router_service = next(d for d in m.router_manifests(infra, cfg, "uid",
                                                        m.Certificates(cert, cert, cert))
                          if d["kind"] == "Service" and "internal" in d["metadata"]["name"])
    assert m.service_host(router_service["metadata"]["name"], cfg) == host
    assert port in [p["port"] for p in router_service["spec"]["ports"]]
    assert host in m.internal_hosts(infra.infra, cfg)
    assert router_of("acme.nowhere", local) == local



def test_brokered_clients_reach_rabbitmq_only_through_the_relays(rendered):
    docs = rendered["overlays/dev"]
    pod = by(docs, "StatefulSet", "maas-rabbitmq")["spec"]["template"]["spec"]
    rabbit, amqp, relay = pod["containers"]
    conf = by(docs, "ConfigMap", "maas-rabbitmq")["data"]["rabbitmq.conf"]
    assert "mqtt.listeners.tcp.default = 127.0.0.1:1882" in conf  # the pod's loopback only
    assert "listeners.tcp.default = 127.0.0.1:5682" in conf
    assert {p["name"] for p in rabbit["ports"]} == {"management"}
    tls = ["--tls-cert", "/etc/maas/broker-tls/tls.crt", "--tls-key",
           "/etc/maas/broker-tls/tls.key"]
    # manage.py: a space's own certificate is looked up in the database (docs/api.md)
    assert relay["command"] == ["python", "manage.py", "run_vhost_relay", "--protocol", "mqtt",
                                "--listen", "0.0.0.0:1883", "--broker", "127.0.0.1:1882",
                                "--tls-listen", "0.0.0.0:8883", *tls]
    assert amqp["command"] == ["python", "manage.py", "run_vhost_relay", "--protocol",
                               "brokered-amqp", "--listen", "0.0.0.0:5672",
                               "--broker", "127.0.0.1:5682",
                               "--api-url", "http://127.0.0.1:15672/api",
                               "--tls-listen", "0.0.0.0:5671", *tls]
    assert [p["name"] for p in relay["ports"]] == ["mqtt", "mqtts"]
    assert [p["name"] for p in amqp["ports"]] == ["amqp", "amqps"]
    for container in (amqp, relay):  # the database's address and password, as the gateway
        assert container["envFrom"] == [{"configMapRef": {"name": "maas-config"}}]
        assert {m["name"] for m in container["volumeMounts"]} == {"secrets", "tls", "tmp"}
    tls_secret = next(v for v in pod["volumes"] if v["name"] == "tls")["secret"]
    assert tls_secret == {"secretName": "maas-broker-tls", "optional": True}
    service = by(docs, "Service", "maas-rabbitmq")["spec"]
    for name, port in (("amqp", 5672), ("amqps", 5671), ("mqtt", 1883), ("mqtts", 8883)):
        assert {"name": name, "port": port, "targetPort": name, "protocol": "TCP"} \
            in service["ports"]
    # what the API gives brokered spaces' clients is the relays' ports
    config = by(docs, "ConfigMap", "maas-config")["data"]
    assert (config["MAAS_MQTT_RELAY_PORT"], config["MAAS_MQTT_RELAY_TLS_PORT"],
            config["MAAS_BROKERED_AMQP_PORT"], config["MAAS_BROKERED_AMQPS_PORT"]) == (
        "1883", "8883", "5672", "5671")
    assert config["MAAS_SPACE_TLS_DIR"] == ""  # no files: the listeners look hosts up


def test_the_migrations_job_makes_the_internal_ca_with_a_token_of_its_own(rendered):
    """`manage.py internal_ca` in an init container, with a projected token of the
    ServiceAccount maas-internal-ca, whose Role reaches two Secrets only; the migrations run
    without a token."""
    docs = rendered["overlays/production"]
    pod = by(docs, "Job", "maas-migrate")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == "maas-internal-ca"
    (init,) = pod["initContainers"]
    (migrate,) = pod["containers"]
    assert init["command"] == ["python", "manage.py", "internal_ca"]
    token = "/var/run/secrets/kubernetes.io/serviceaccount"
    assert token in {v["mountPath"] for v in init["volumeMounts"]}
    assert token not in {v["mountPath"] for v in migrate["volumeMounts"]}
    env = {e["name"]: e for e in init["env"]}
    assert env["MAAS_INFRA_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == \
        "metadata.namespace"
    role = by(docs, "Role", "maas-internal-ca")
    granted = set()
    for rule in role["rules"]:
        assert rule["apiGroups"] == [""] and rule["resources"] == ["secrets"]
        for verb in rule["verbs"]:
            granted.add((verb, tuple(rule.get("resourceNames", ()))))
    assert granted == {("create", ()), ("get", ("maas-internal-ca", "maas-authservice-tls")),
                       ("patch", ("maas-internal-ca", "maas-authservice-tls"))}
    binding = by(docs, "RoleBinding", "maas-internal-ca")
    assert binding["subjects"][0]["name"] == "maas-internal-ca"


@pytest.mark.parametrize("target", ["overlays/dev", "overlays/production"])
def test_the_worker_and_the_gateway_mount_the_internal_ca_bundle_only(rendered, target):
    docs = rendered[target]
    config = by(docs, "ConfigMap", "maas-config")["data"]
    for name in ("maas-worker", "maas-mqtt-gateway"):
        pod = by(docs, "Deployment", name)["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        volume = next(v for v in pod["volumes"] if v["name"] == "internal-ca")
        # the bundle as ca.pem where MAAS_INTERNAL_TLS_DIR says; never the CA's key; no
        # `optional`: the pods wait for the migrations Job to make it
        assert volume["secret"] == {"secretName": "maas-internal-ca",
                                    "items": [{"key": "ca.crt", "path": "ca.pem"}]}
        mount = next(v for v in container["volumeMounts"] if v["name"] == "internal-ca")
        assert mount["mountPath"] == config["MAAS_INTERNAL_TLS_DIR"]
    gateway = by(docs, "Deployment", "maas-mqtt-gateway")["spec"]["template"]["spec"]
    command = gateway["containers"][0]["command"]
    assert command[command.index("--router-ca") + 1] == \
        f"{config['MAAS_INTERNAL_TLS_DIR']}/ca.pem"
