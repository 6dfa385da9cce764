"""The layers the README and docs/architecture.md draw are the ones import-linter enforces.

`make test` runs `lint-imports` on the contracts in pyproject.toml ([tool.importlinter]: the
layers, Django kept out of the data plane and Spark, no cycle between the parts of a package);
this checks that the picture a reader sees lists the same layers, top first."""
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def contract_layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = [c for c in config["contracts"] if c["type"] == "layers"]
    assert len(layers) == 1
    return [" ".join(entry.split()) for entry in layers[0]["layers"]]


def drawn_layers(markdown: str) -> list[str]:
    """The first column of the ```layers block: each line's packages, before two spaces."""
    block = re.search(r"^```layers\n(.*?)^```", markdown, re.S | re.M)
    assert block is not None, "no ```layers block"
    return [" ".join(re.split(r"\s{2,}", line.strip())[0].split())
            for line in block.group(1).splitlines() if line.strip()]


def test_docs_architecture_draws_the_contract_s_layers():
    assert drawn_layers((ROOT / "docs/architecture.md").read_text()) == contract_layers()


def test_the_readme_draws_the_contract_s_layers():
    assert drawn_layers((ROOT / "README.md").read_text()) == contract_layers()


def test_every_top_level_package_is_in_a_layer():
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests"}
    layered = {name for entry in contract_layers() for name in entry.split(" | ")}
    assert packages == layered
