"""Hostile request bodies shared by the security tests and tests/bench/bench_hostile_input.py."""
import json


def yaml_alias_bomb(levels: int, space: str = "bomb") -> str:
    """An AddressSpace manifest with a "billion laughs" under `spec`: `levels` anchored lists,
    each of nine aliases of the one before (9**levels strings once expanded)."""
    lines = ["apiVersion: enmasse.io/v1beta1", "kind: AddressSpace",
             f"metadata: {{name: {space}}}", "spec:", "  type: brokered",
             "  plan: brokered-single-broker", "  a: &a [" + ",".join(["lol"] * 9) + "]"]
    for level in range(1, levels):
        name, previous = chr(ord("a") + level), chr(ord("a") + level - 1)
        lines.append(f"  {name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def deep_json(levels: int) -> str:
    """An Address manifest whose spec.x is `levels` nested lists."""
    return '{"spec": {"address": "deep", "x": ' + "[" * levels + "]" * levels + "}}"


def deep_yaml(levels: int) -> str:
    return "spec:\n  address: deep\n  x: " + "[" * levels + "]" * levels + "\n"


def huge_json(size: int) -> str:
    """A syntactically valid Address manifest of about `size` bytes."""
    return json.dumps({"spec": {"address": "huge", "padding": "x" * size}})
