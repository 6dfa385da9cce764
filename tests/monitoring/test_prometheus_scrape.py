"""A real Prometheus (Debian's) scrapes the platform with deploy/monitoring/prometheus.yml, only
its targets moved to this test's processes: the control plane (pytest-django's live server), an
embedded router process, RabbitMQ's Prometheus plugin; and every panel of both dashboards,
variables substituted as Grafana would, returns data."""
import math
import subprocess
import time
from datetime import date, timedelta

import pytest
import requests
import yaml
from django.utils import timezone
from paho.mqtt import client as mqtt

from config_service import services
from config_service.models import AgentState
from tenants.services import set_quota, throttle
from tenants.usage import UsageJobRun
from tests import broker
from tests.conftest import CTX, free_tcp_port, port_open, wait_for
from tests.router.conftest import RouterProcess
from workers.agents import runner

from .monitoring import DASHBOARDS, MONITORING, RULES, panels, substitute, tool, variables

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


class Prometheus:
    """`prometheus` on a free port with a temporary configuration and storage."""

    def __init__(self, tmp_path, targets: dict[str, str]):
        config = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
        config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
        config["rule_files"] = [str(RULES)]
        for job in config["scrape_configs"]:
            job["static_configs"] = [{"targets": [targets[job["job_name"]]]}]
        path = tmp_path / "prometheus.yml"
        path.write_text(yaml.safe_dump(config))
        self.port = free_tcp_port()
        self.url = f"http://127.0.0.1:{self.port}/api/v1"
        self.proc = subprocess.Popen(
            [tool("prometheus"), f"--config.file={path}",
             f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=(tmp_path / "prometheus.log").open("wb"))
        wait_for(lambda: self.ready() or self.proc.poll() is not None, 30,
                 what="Prometheus to be ready")
        assert self.proc.poll() is None, (tmp_path / "prometheus.log").read_text()

    def ready(self) -> bool:
        return port_open(self.port) and requests.get(
            f"http://127.0.0.1:{self.port}/-/ready", timeout=5).status_code == 200

    def api(self, path: str, **params) -> dict:
        reply = requests.get(f"{self.url}/{path}", params=params, timeout=10).json()
        assert reply["status"] == "success", reply
        return reply["data"]

    def query(self, expr: str) -> list:
        return self.api("query", query=expr)["result"]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=15)


@pytest.fixture
def platform(tenant, redis_server):
    """A tenant with a brokered space the real storage agent applied on RabbitMQ (a queue),
    a standard space whose router agent reported an error, a throttle and
    a successful usage job run."""
    brokered = services.create_address_space(ctx=CTX, tenant=tenant, name="orders",
                                             type="brokered", plan="brokered-single-broker")
    services.create_address(ctx=CTX, space=brokered, address="invoices", type="queue",
                            plan="brokered-queue")
    standard = services.create_address_space(ctx=CTX, tenant=tenant, name="shop",
                                             type="standard", plan="standard-small")
    services.create_address(ctx=CTX, space=standard, address="q", type="queue",
                            plan="standard-small-queue")
    standard.refresh_from_db()
    AgentState.objects.create(space_uid=standard.uid, kind="router", applied_at=timezone.now(),
                              applied_sequence=standard.last_sequence,
                              address_errors={"shop.q": {"message": "refused",
                                                         "permanent": False}})
    set_quota(ctx=CTX, tenant=tenant, messages_per_day=10)
    assert throttle(ctx=CTX, tenant=tenant, limits=[{"limit": "messages_per_day", "used": 11}])
    UsageJobRun.objects.create(day=date.today() - timedelta(days=1),
                               status=UsageJobRun.SUCCEEDED, finished_at=timezone.now())
    assert runner.run(brokered.uid, "storage") >= 1
    yield brokered
    services.delete_address_space(ctx=CTX, space=brokered)
    runner.run(brokered.uid, "storage")


@pytest.fixture
def router():
    proc = RouterProcess()
    proc.start()
    yield proc
    proc.stop()


def mqtt_login_attempt() -> None:
    """One MQTT login on RabbitMQ (refused), so its MQTT figures exist on a fresh broker."""
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="maas-monitoring-test")
    client.username_pw_set("nobody", "wrong")
    client.connect("127.0.0.1", broker.MQTT_PORT)
    client.loop_start()
    time.sleep(0.5)
    client.loop_stop()
    client.disconnect()


def series(result: list) -> list[float]:
    return [float(r["value"][1]) for r in result]


def test_every_dashboard_panel_returns_data_from_a_real_prometheus(
        tmp_path, settings, live_server, router, platform, tenant):
    settings.MAAS_METRICS_TOKEN = ""
    mqtt_login_attempt()
    prometheus = Prometheus(tmp_path, {
        "maas-control-plane": live_server.url.removeprefix("http://").replace("localhost",
                                                                              "127.0.0.1"),
        "maas-router": f"127.0.0.1:{router.metrics_port}",
        "maas-broker": f"127.0.0.1:{broker.PROMETHEUS_PORT}",
        "maas-broker-queues": f"127.0.0.1:{broker.PROMETHEUS_PORT}",
        "maas-mqtt-gateway": f"127.0.0.1:{free_tcp_port()}",  # not started here: up is 0
    })
    try:
        wait_for(lambda: len(prometheus.query('up{job=~"maas-.*"} == 1')) == 4, 30,
                 what="Prometheus to scrape the control plane, router and broker")
        # The storage agent applies a change while Prometheus watches: the latency histogram
        # and the broker's queue figures change between scrapes.
        services.create_address(ctx=CTX, space=platform, address="receipts", type="queue",
                                plan="brokered-queue")
        assert runner.run(platform.uid, "storage") >= 1
        wait_for(lambda: prometheus.query(
            f'rabbitmq_detailed_queue_messages{{vhost="{platform.vhost}", queue="receipts"}}'),
            30, what="the new queue on RabbitMQ in Prometheus")
        time.sleep(3)  # a few more scrapes, so rates have two samples after the change
        values = {"datasource": "prometheus", "tenant": tenant.slug, "space": ".*",
                  "__rate_interval": "1m"}
        empty = []
        for dashboard in DASHBOARDS:
            for title, expr in panels(dashboard):
                result = prometheus.query(substitute(expr, values))
                if not result or not any(math.isfinite(v) for v in series(result)):
                    empty.append((dashboard.stem, title, expr, result))
        assert empty == []
        tenant_vars = variables(MONITORING / "dashboards" / "maas-tenant.json")
        assert tenant.slug in prometheus.api(
            "label/namespace/values", **{"match[]": "enmasse_addresses_total"})
        assert "label_values(enmasse_addresses_total, namespace)" == tenant_vars["tenant"][
            "definition"]
        assert set(prometheus.api("label/addressspace/values", **{
            "match[]": f'enmasse_addresses_total{{namespace="{tenant.slug}"}}'})) == {
            "orders", "shop"}
        # The figures are this platform's: the throttle, the router agent's error, the space.
        assert series(prometheus.query(
            f'maas_tenant_throttled{{namespace="{tenant.slug}"}}')) == [1]
        assert series(prometheus.query(
            f'maas_agent_errors{{namespace="{tenant.slug}", agent="router"}}')) == [1]
        assert series(prometheus.query(
            f'enmasse_address_space_status_ready{{namespace="{tenant.slug}", name="orders"}}'
        )) == [1]
        assert series(prometheus.query('up{job="maas-mqtt-gateway"}')) == [0]
        # The rules are loaded, and the throttle (for: 0m) fires at once.
        wait_for(lambda: prometheus.query(
            f'ALERTS{{alertname="MaaSTenantThrottled", namespace="{tenant.slug}"}}'), 20,
            what="MaaSTenantThrottled to fire")
    finally:
        prometheus.stop()
