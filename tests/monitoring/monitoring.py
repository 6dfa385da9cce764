"""deploy/monitoring as the tests read it: the rules, the Prometheus configuration and the
dashboards' panels with their expressions."""
import json
import shutil
from pathlib import Path

import yaml

MONITORING = Path(__file__).resolve().parents[2] / "deploy" / "monitoring"
RULES = MONITORING / "rules" / "maas.rules.yml"
RULE_TESTS = MONITORING / "rules" / "maas.rules.test.yml"
DASHBOARDS = sorted((MONITORING / "dashboards").glob("*.json"))


def tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is missing: apt-get install prometheus (deploy/local/services.sh)"
    return path


def alerts() -> set[str]:
    return {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]
            if "alert" in r}


def alerts_with_tests() -> set[str]:
    return {t["alertname"] for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]
            for t in case.get("alert_rule_test", [])
            if t.get("exp_alerts")}  # a test that only says "not yet" tests nothing alone


def panels(dashboard: Path) -> list[tuple[str, str]]:
    """(panel title, expression) of every query of the dashboard."""
    board = json.loads(dashboard.read_text())
    return [(p["title"], t["expr"]) for p in board["panels"] for t in p.get("targets", [])]


def variables(dashboard: Path) -> dict:
    return {v["name"]: v for v in json.loads(dashboard.read_text())["templating"]["list"]}


def substitute(expr: str, values: dict) -> str:
    """The expression as Grafana sends it: variables replaced, longest names first."""
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace(f"${name}", values[name])
    return expr
