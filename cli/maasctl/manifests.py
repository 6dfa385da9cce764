"""Reading manifests: multi-document YAML or JSON from files, directories or stdin (`-`), with
EnMasse's List kinds expanded into their items."""
import json
import sys
from pathlib import Path

import yaml

from . import kinds
from .errors import UsageError

SUFFIXES = (".yaml", ".yml", ".json")


def _read(source: str) -> list[tuple[str, str]]:
    """(name, text) of each file a -f argument stands for."""
    if source == "-":
        return [("<stdin>", sys.stdin.read())]
    p = Path(source)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix in SUFFIXES and f.is_file())
        return [(str(f), f.read_text()) for f in files]
    try:
        return [(source, p.read_text())]
    except OSError as exc:
        raise UsageError(f"cannot read {source}: {exc.strerror}") from None


def _documents(name: str, text: str) -> list:
    stripped = text.lstrip()
    try:
        if stripped.startswith(("{", "[")):
            doc = json.loads(text)
            return doc if isinstance(doc, list) else [doc]
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except (ValueError, yaml.YAMLError) as exc:
        raise UsageError(f"{name}: not valid YAML or JSON: {exc}") from None


def expand(doc, where: str) -> list[dict]:
    """A manifest, or the items of a List kind (AddressList, MessagingUserList, List, ...)."""
    if not isinstance(doc, dict):
        raise UsageError(f"{where}: a manifest must be an object with kind, metadata and spec")
    if doc.get("kind") in kinds.LIST_KINDS:
        items = doc.get("items")
        if not isinstance(items, list):
            raise UsageError(f"{where}: {doc['kind']} needs a list of items")
        return [m for i, item in enumerate(items) for m in expand(item, f"{where} item {i}")]
    kinds.of_manifest(doc)  # an unknown kind stops the run before anything is sent
    return [doc]


def load(sources: list[str]) -> list[dict]:
    manifests = []
    for source in sources:
        for name, text in _read(source):
            for i, doc in enumerate(_documents(name, text)):
                manifests.extend(expand(doc, f"{name} document {i + 1}"))
    if not manifests:
        raise UsageError("no objects passed to apply")
    return manifests
