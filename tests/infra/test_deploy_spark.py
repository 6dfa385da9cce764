"""deploy/spark and deploy/overlays/production-spark: the usage jobs on Spark executors in the
cluster. The overlay renders with `kubectl kustomize` and every manifest validates strictly
(kubernetes-validate), the executors' pod template too; the usage worker alone serves the usage
queue and drives Spark with a least-privilege Role; the driver, its executors and the workers
share one sample store; the NetworkPolicies open the ports Spark is set to use.

Needs `kubectl` on PATH, as tests/infra/test_deploy.py.
"""
import kubernetes_validate
import pytest
import yaml
from django.conf import settings

from tests.infra.test_deploy import VERSION, by, render

TARGET = "overlays/production-spark"
STORE = "/var/lib/maas/usage"


@pytest.fixture(scope="module")
def docs() -> list[dict]:
    return render(TARGET)


def spark_conf(docs) -> dict[str, str]:
    text = by(docs, "ConfigMap", "maas-spark")["data"]["spark-defaults.conf"]
    pairs = (line.split(None, 1) for line in text.splitlines()
             if line.strip() and not line.lstrip().startswith("#"))
    return {key: value.strip() for key, value in pairs}


def container(docs, name):
    (found,) = by(docs, "Deployment", name)["spec"]["template"]["spec"]["containers"]
    return found


def env(c) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in c.get("env", [])}


def queues(command: list[str]) -> set[str]:
    """The queues a `celery worker` command consumes, named as in production (default `maas`);
    all of them without -Q."""
    production = {q.replace(settings.CELERY_TASK_DEFAULT_QUEUE, "maas", 1)
                  for q in settings.CELERY_TASK_QUEUES}
    return set(command[command.index("-Q") + 1].split(",")) if "-Q" in command else production


def test_every_manifest_validates(docs):
    assert {"Deployment", "Role", "RoleBinding", "PersistentVolumeClaim"} <= {
        d["kind"] for d in docs}
    for doc in docs:
        kubernetes_validate.validate(doc, VERSION, strict=True)


def test_the_executors_pod_template_validates(docs):
    template = yaml.safe_load(by(docs, "ConfigMap", "maas-spark")["data"]["executor.yaml"])
    kubernetes_validate.validate(template, VERSION, strict=True)
    spec = template["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert [c["name"] for c in spec["containers"]] == [
        spark_conf(docs)["spark.kubernetes.executor.podTemplateContainerName"]]


def test_the_usage_worker_alone_serves_the_usage_queue(docs):
    usage = queues(container(docs, "maas-usage-worker")["command"])
    others = queues(container(docs, "maas-worker")["command"])
    every = queues([])
    assert usage | others == every and not usage & others
    routed = {route["queue"].replace(settings.CELERY_TASK_DEFAULT_QUEUE, "maas", 1)
              for task, route in settings.CELERY_TASK_ROUTES.items()
              if task in ("maas.workers.run_usage_job", "maas.workers.sample_usage")}
    assert routed == usage == {"maas-usage"}


def test_the_driver_role_is_least_privilege(docs):
    role = by(docs, "Role", "maas-spark-driver")
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"]
               for r in rule["resources"] for v in rule["verbs"]}
    assert {r for _, r, _ in granted} == {"pods", "configmaps"}
    assert {g for g, _, _ in granted} == {""}
    assert {v for _, _, v in granted} <= {"get", "list", "watch", "create", "delete",
                                          "deletecollection"}
    assert not [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    binding = by(docs, "RoleBinding", "maas-spark-driver")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "maas-spark-driver",
                                    "namespace": "maas"}]
    pod = by(docs, "Deployment", "maas-usage-worker")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "maas-spark-driver"
    executor = spark_conf(docs)["spark.kubernetes.authenticate.executor.serviceAccountName"]
    assert by(docs, "ServiceAccount", executor)["automountServiceAccountToken"] is False


def test_the_usage_worker_drives_spark_on_this_cluster(docs):
    c = container(docs, "maas-usage-worker")
    values = env(c)
    assert values["SPARK_MASTER"] == "k8s://https://kubernetes.default.svc"
    submit = values["PYSPARK_SUBMIT_ARGS"].split()
    assert submit[-1] == "pyspark-shell"
    assert {"spark.kubernetes.namespace=$(POD_NAMESPACE)", "spark.driver.host=$(POD_IP)",
            "spark.kubernetes.driver.pod.name=$(POD_NAME)"} <= set(submit)
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts["spark-conf"] == values["SPARK_CONF_DIR"]
    conf = spark_conf(docs)
    template = conf["spark.kubernetes.executor.podTemplateFile"]
    assert template == f"{values['SPARK_CONF_DIR']}/executor.yaml"
    volumes = {v["name"]: v for v in
               by(docs, "Deployment", "maas-usage-worker")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["spark-conf"]["configMap"]["name"] == "maas-spark"


def test_the_driver_its_executors_and_the_workers_share_the_sample_store(docs):
    claim = by(docs, "PersistentVolumeClaim", "maas-usage-store")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert by(docs, "ConfigMap", "maas-config")["data"]["MAAS_USAGE_STORE"] == STORE
    for name, read_only in (("maas-usage-worker", False), ("maas-worker", True)):
        pod = by(docs, "Deployment", name)["spec"]["template"]["spec"]
        (c,) = pod["containers"]
        volume = next(v for v in pod["volumes"] if v.get("persistentVolumeClaim", {}).get(
            "claimName") == "maas-usage-store")
        mount = next(m for m in c["volumeMounts"] if m["name"] == volume["name"])
        assert mount["mountPath"] == env(c).get("MAAS_USAGE_STORE", STORE) == STORE
        assert mount.get("readOnly", False) is read_only
    conf = spark_conf(docs)
    prefix = "spark.kubernetes.executor.volumes.persistentVolumeClaim.usage-store"
    assert conf[f"{prefix}.options.claimName"] == "maas-usage-store"
    assert conf[f"{prefix}.mount.path"] == STORE


def test_the_network_policies_open_the_ports_spark_uses(docs):
    conf = spark_conf(docs)
    driver_ports = {int(conf["spark.driver.port"]), int(conf["spark.blockManager.port"])}
    executor_labels = yaml.safe_load(by(docs, "ConfigMap", "maas-spark")["data"][
        "executor.yaml"])["metadata"]["labels"]
    worker = by(docs, "NetworkPolicy", "maas-usage-worker")["spec"]
    assert worker["podSelector"]["matchLabels"].items() <= by(
        docs, "Deployment", "maas-usage-worker")["spec"]["template"]["metadata"]["labels"].items()
    (rule,) = worker["ingress"]
    assert {p["port"] for p in rule["ports"]} == driver_ports
    assert [s["podSelector"]["matchLabels"].items() <= executor_labels.items()
            for s in rule["from"]] == [True]
    executors = by(docs, "NetworkPolicy", "maas-usage-executor")["spec"]
    assert executors["podSelector"]["matchLabels"].items() <= executor_labels.items()
    (rule,) = executors["ingress"]
    assert {p["port"] for p in rule["ports"]} == {int(conf["spark.blockManager.port"])}
    # The usage worker is no "worker" component: the base's no-ingress policy leaves it alone.
    no_ingress = by(docs, "NetworkPolicy", "maas-no-ingress")["spec"]["podSelector"]
    component = by(docs, "Deployment", "maas-usage-worker")["spec"]["template"]["metadata"][
        "labels"]["app.kubernetes.io/component"]
    assert all(component not in e["values"] for e in no_ingress["matchExpressions"])
