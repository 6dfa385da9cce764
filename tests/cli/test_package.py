"""maasctl is its own small package: installable with pip from cli/ without Django or PySpark,
importing nothing of the server, and speaking only paths the API's OpenAPI schema declares."""
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from drf_spectacular.generators import SchemaGenerator
from maasctl import kinds

CLI = Path(__file__).resolve().parents[2] / "cli"
SERVER_PACKAGES = ("django", "rest_framework", "pyspark", "celery", "maas", "tenants",
                   "config_service", "workers", "spark")


def test_its_package_metadata_names_only_client_dependencies():
    project = tomllib.loads((CLI / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[<>=!~ \[]", d)[0].lower() for d in project["dependencies"]}
    assert names == {"requests", "pyyaml", "python-qpid-proton", "paho-mqtt"}
    assert project["scripts"] == {"maasctl": "maasctl.main:main"}


def test_it_imports_nothing_of_the_server(tmp_path):
    probe = ("import sys, maasctl.main, maasctl.messaging, maasctl.login;"
             "import proton, paho.mqtt.client;"
             f"print(sorted(m for m in sys.modules if m.split('.')[0] in {SERVER_PACKAGES!r}))")
    result = subprocess.run([sys.executable, "-I", "-c", probe], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def _shape(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", path)


def test_every_api_path_it_calls_is_declared_in_the_openapi_schema():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    declared = {(_shape(path), method.upper()) for path, ops in schema["paths"].items()
                for method in ops}
    used = {("/api/v1/tenants/{}/usage/", "GET"), ("/api/v1/tenants/", "GET")}
    for kind in kinds.KINDS:
        if kind.kind == "Tenant":
            continue
        collection = "/api/v1/" + kind.list_path("{}", "{}")
        used |= {(collection, "GET"), (collection + "{}/", "GET")}
        if kind.tenant_scoped:  # plans are the operators' (maasctl reports a 405 clearly)
            used |= {(collection, "POST"), (collection + "{}/", "PUT"),
                     (collection + "{}/", "DELETE")}
    assert used - declared == set()
