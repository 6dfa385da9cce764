"""qdrouterd's management schema (qdrouter.json) of the build `QDROUTERD` names, for tests that
check what the project writes against the real router's entity types and attributes.

The schema is looked for beside the build: `<prefix>/share/doc/qpid-dispatch/qdrouter.json`,
where the prefix is the parent of the directory holding `QDROUTERD` (`/opt/qdr/bin/qdrouterd`
-> `/opt/qdr`), then `qpid_dispatch/management/qdrouter.json` under the PYTHONPATH entries of
the test process and of the wrapper script `QDROUTERD` may be. Nothing of qdrouterd is in this
repository.
"""
import json
import os
import re
from functools import cache
from pathlib import Path

PREFIX = "org.apache.qpid.dispatch."


class SchemaMissing(Exception):
    """QDROUTERD is set, but no qdrouter.json could be found for it."""


def _candidates(exe: Path) -> list[Path]:
    prefix = exe.parent.parent
    found = [prefix / "share" / "doc" / "qpid-dispatch" / "qdrouter.json"]
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    try:  # a wrapper script that sets PYTHONPATH before it execs the router
        text = exe.read_text(errors="replace")[:4000] if exe.stat().st_size < 100_000 else ""
    except OSError:
        text = ""
    for match in re.finditer(r"PYTHONPATH=([^\s$;\"']+)", text):
        paths += match.group(1).split(os.pathsep)
    paths += [str(prefix / "lib" / "qpid-dispatch" / "python")]
    found += [Path(p) / "qpid_dispatch" / "management" / "qdrouter.json" for p in paths if p]
    return found


@cache
def load(qdrouterd: str) -> dict:
    """The schema of the build at `qdrouterd`: {"entityTypes": {short name: ...}, ...}."""
    exe = Path(qdrouterd)
    for path in _candidates(exe):
        if path.is_file():
            return json.loads(path.read_text())
    raise SchemaMissing(f"no qdrouter.json found for {qdrouterd} (looked in "
                        f"{', '.join(str(p) for p in _candidates(exe))})")


def short(entity_type: str) -> str:
    return entity_type.removeprefix(PREFIX)


def attributes(schema: dict, entity_type: str) -> set[str] | None:
    """Every attribute of the type, inherited ones included (`name`, `identity`, `type` come
    from `entity`); None if the router has no such type."""
    lineage = _lineage(schema, short(entity_type))
    return None if lineage is None else {a for t in lineage for a in t.get("attributes", {})}


def operations(schema: dict, entity_type: str) -> set[str] | None:
    """The operations the type allows, inherited ones included (READ from
    configurationEntity); None if the router has no such type."""
    lineage = _lineage(schema, short(entity_type))
    return None if lineage is None else {o for t in lineage for o in t.get("operations") or ()}


def creatable(schema: dict, entity_type: str) -> set[str]:
    """Attributes a configuration file or a CREATE may set (`create: true`, or `name`)."""
    name = short(entity_type)
    if name not in schema["entityTypes"]:
        name = f"router.config.{name}"  # a configuration file's `linkRoute`, `address`, ...
    return {"name"} | {a for t in _lineage(schema, name) or ()
                       for a, d in t.get("attributes", {}).items() if d.get("create")}


def _lineage(schema: dict, name: str) -> list[dict] | None:
    """The type and every type it extends, or None if the router has no such type."""
    types = schema["entityTypes"]
    if name not in types:
        return None
    out = []
    while name:
        out.append(types[name])
        name = types[name].get("extends")
    return out
