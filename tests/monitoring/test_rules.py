"""deploy/monitoring is valid: promtool checks the rules and the one-machine configuration and
runs the rules' unit tests, every alert has a test that fires it, the Kubernetes variant scrapes
the same jobs, its ConfigMaps render and validate, and the dashboards are well formed."""
import json
import subprocess

import kubernetes_validate
import pytest
import yaml

from .monitoring import (
    DASHBOARDS,
    MONITORING,
    RULE_TESTS,
    RULES,
    alerts,
    alerts_with_tests,
    panels,
    tool,
    variables,
)


def promtool(*args) -> subprocess.CompletedProcess:
    return subprocess.run([tool("promtool"), *args], capture_output=True, text=True,
                          timeout=120, cwd=RULES.parent)


def test_promtool_accepts_the_rules():
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerts()) + 3} rules found" in result.stdout


def test_the_rules_pass_their_unit_tests():
    result = promtool("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_has_a_unit_test_that_fires_it():
    assert alerts() >= {"MaaSAddressSpaceNotReady", "MaaSAddressesNotReady",
                        "MaaSOutboxBacklogGrowing", "MaaSAgentErrors", "MaaSRouterDown",
                        "MaaSBrokerDown", "MaaSTenantThrottled", "MaaSUsageJobFailed"}
    assert alerts_with_tests() == alerts()


def test_promtool_accepts_the_one_machine_configuration():
    result = promtool("check", "config", str(MONITORING / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def jobs(name: str) -> dict:
    config = yaml.safe_load((MONITORING / name).read_text())
    return {job["job_name"]: job for job in config["scrape_configs"]}


def test_the_kubernetes_variant_scrapes_the_same_jobs_and_loads_the_same_rules():
    local, cluster = jobs("prometheus.yml"), jobs("prometheus-kubernetes.yml")
    assert set(cluster) == set(local) == {
        "maas-control-plane", "maas-router", "maas-broker", "maas-broker-queues",
        "maas-mqtt-gateway"}
    for name, job in cluster.items():
        assert job.get("metrics_path") == local[name].get("metrics_path")
        assert job.get("params") == local[name].get("params")
        assert job["kubernetes_sd_configs"][0]["role"] == "pod"
    assert "credentials_file" in cluster["maas-control-plane"]["authorization"]
    rule_files = yaml.safe_load((MONITORING / "prometheus-kubernetes.yml").read_text())[
        "rule_files"]
    assert rule_files == ["/etc/prometheus/maas/maas.rules.yml"]


def test_the_configmaps_render_and_validate():
    result = subprocess.run([tool("kubectl"), "kustomize", str(MONITORING)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    version = kubernetes_validate.latest_version()
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)
    maps = {d["metadata"]["name"]: d for d in docs}
    assert set(maps) == {"maas-prometheus", "maas-grafana-dashboards"}
    assert maps["maas-prometheus"]["data"]["maas.rules.yml"] == RULES.read_text()
    assert set(maps["maas-grafana-dashboards"]["data"]) == {p.name for p in DASHBOARDS}
    assert maps["maas-grafana-dashboards"]["metadata"]["labels"]["grafana_dashboard"] == "1"


@pytest.mark.parametrize("dashboard", DASHBOARDS, ids=lambda p: p.stem)
def test_each_dashboard_has_titled_panels_with_queries_on_the_datasource_variable(dashboard):
    board = json.loads(dashboard.read_text())
    assert board["uid"] and board["title"].startswith("MaaS")
    assert variables(dashboard)["datasource"]["type"] == "datasource"
    assert len(panels(dashboard)) >= 8
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for p in board["panels"]:
        assert p["title"] and p["datasource"]["uid"] == "${datasource}"
        assert all(t["expr"] for t in p["targets"])
