"""The usage jobs bring no rows back to the Spark driver: a table that grows with the fleet
would pass through the driver's memory (at 100k addresses, 2.4 M address_hourly rows). Their
code calls no such action (here); at run time the driver's event log shows file writes only
(tests/spark/test_cluster.py)."""
import ast
from pathlib import Path

SPARK = Path(__file__).resolve().parents[2] / "spark"
TO_DRIVER = {"collect", "collectAsList", "toArrow", "toPandas", "toLocalIterator", "take",
             "takeAsList", "first", "head", "tail", "show", "toJSON", "foreach",
             "foreachPartition", "broadcast"}


def actions(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in TO_DRIVER:
                found.append(f"{path.relative_to(SPARK.parent)}:{node.lineno} {node.func.attr}")
    return found


def test_the_jobs_call_no_action_that_brings_rows_to_the_driver():
    modules = sorted(SPARK.rglob("*.py"))
    assert len(modules) > 5
    assert [hit for module in modules for hit in actions(module)] == []
