"""Imports run one way: the layers written in docs/architecture.md ("Layers", the same block
as the README's), spark without Django, and no import cycle, counting imports inside functions.
The checker itself is tests/layering.py; the last tests show it failing on made-up packages."""
import textwrap
from pathlib import Path

import pytest

from . import layering

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["maas", "tenants", "config_service", "workers", "spark"]
TENANT_MODELS = ("tenants.models", "tenants.migrations.*")
AUTH_SERVICE_PROTOCOL = ("workers.authservice.sasl", "workers.authservice.server")


@pytest.fixture(scope="module")
def project():
    modules = layering.modules_of(ROOT, PACKAGES)
    layers = layering.parse_layers(layering.layer_block((ROOT / "docs/architecture.md").read_text()))
    return modules, layering.imports_of(ROOT, modules), layers


def report(problems: list[str]) -> str:
    return "\n".join(["", *problems])


def test_the_readme_shows_the_layers_of_docs_architecture():
    docs = layering.layer_block((ROOT / "docs/architecture.md").read_text())
    readme = layering.layer_block((ROOT / "README.md").read_text())
    assert readme == docs, "README.md's ```layers block differs from docs/architecture.md's"


def test_no_lower_layer_imports_a_higher_one(project):
    modules, imports, layers = project
    assert layering.layer_violations(layers, imports, modules) == [], report(
        layering.layer_violations(layers, imports, modules))


def test_spark_imports_no_django_and_no_app(project):
    modules, imports, _ = project
    others = tuple(p for p in PACKAGES if p != "spark")
    problems = layering.forbidden_imports(imports, "spark.*", layering.NOT_FOR_SPARK + others,
                                          "spark imports no Django and no app")
    assert problems == [], report(problems)


def test_the_auth_service_protocol_imports_no_django(project):
    _, imports, _ = project  # the layers block already keeps every app out of it
    problems = [p for module in AUTH_SERVICE_PROTOCOL for p in layering.forbidden_imports(
        imports, module, layering.NOT_FOR_SPARK, "the auth service's protocol runs without Django")]
    assert problems == [], report(problems)


def test_tenant_models_import_neither_config_service_nor_workers(project):
    _, imports, _ = project
    problems = [p for pattern in TENANT_MODELS for p in layering.forbidden_imports(
        imports, pattern, ("config_service", "workers"), "tenant models sit below both")]
    assert problems == [], report(problems)


def test_no_module_imports_itself_back(project):
    modules, imports, _ = project
    assert layering.cycles(imports, modules) == [], report(layering.cycles(imports, modules))


# The checker on made-up packages: it must fail where the rules are broken.

BLOCK = """
# top first
app.*
app.low tenants.* # a comment
    other
base.*

independent:
app.router* | app.storage.*
"""


def make(tmp_path: Path, files: dict[str, str]) -> tuple[dict, list]:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    packages = sorted({name.split("/")[0] for name in files})
    modules = layering.modules_of(tmp_path, packages)
    return modules, layering.imports_of(tmp_path, modules)


def test_the_block_parses_into_layers_and_independent_groups():
    layers = layering.parse_layers(BLOCK)
    assert layers.layers == [["app.*"], ["app.low", "tenants.*", "other"], ["base.*"]]
    assert layers.independent == [(["app.router*"], ["app.storage.*"])]
    assert layers.index("app.low") == 1 and layers.index("app.lower") == 0
    assert layers.index("base") == 2 and layers.index("nowhere") is None


def test_an_upward_import_inside_a_function_is_named_with_its_line(tmp_path):
    modules, imports = make(tmp_path, {
        "app/__init__.py": "",
        "app/top.py": "from base import util\n",
        "app/low.py": "def f():\n    from . import top\n",
        "base/__init__.py": "",
        "base/util.py": "import os\n",
    })
    problems = layering.layer_violations(layering.parse_layers(BLOCK), imports, modules)
    assert problems == ["app/low.py:2: app.low -> app.top: a lower layer imports a higher one"]


def test_a_module_in_no_layer_is_reported(tmp_path):
    modules, imports = make(tmp_path, {"stray/__init__.py": ""})
    problems = layering.layer_violations(layering.parse_layers(BLOCK), imports, modules)
    assert problems == ["stray is in no layer of the layers block"]


def test_independent_groups_may_not_import_each_other(tmp_path):
    modules, imports = make(tmp_path, {
        "app/__init__.py": "",
        "app/router.py": "from .storage.names import user\n",
        "app/storage/__init__.py": "",
        "app/storage/names.py": "user = 1\n",
    })
    problems = layering.layer_violations(layering.parse_layers(BLOCK), imports, modules)
    assert problems == ["app/router.py:1: app.router -> app.storage.names: "
                        "app.router* and app.storage.* are independent"]


def test_a_cycle_through_a_function_level_import_is_reported(tmp_path):
    modules, imports = make(tmp_path, {
        "app/__init__.py": "",
        "app/a.py": "from . import b\n",
        "app/b.py": "import app.c\n",
        "app/c.py": "def later():\n    from app.a import thing\n",
    })
    found = layering.cycles(imports, modules)
    assert len(found) == 1
    assert found[0].startswith("import cycle: app.a -> app.b -> app.c -> app.a")
    assert "app/c.py:2: app.c -> app.a" in found[0]


def test_spark_importing_django_is_reported(tmp_path):
    _, imports = make(tmp_path, {"spark/__init__.py": "", "spark/job.py": "def f():\n"
                                 "    from django.conf import settings\n"})
    assert layering.forbidden_imports(imports, "spark.*", layering.NOT_FOR_SPARK, "no") == [
        "spark/job.py:2: spark.job -> django: no"]
