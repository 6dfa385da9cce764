"""The import-layer check of docs/architecture.md ("Layers"), as plain functions over source
files, so that tests/test_layers.py can run it on the project and on small made-up packages.

Every `import` and `from ... import` counts, also those inside functions and under
`TYPE_CHECKING`; an import of `a.b.c` is an edge to module `a.b.c` when it exists, else to its
nearest existing parent. The parent packages an import runs implicitly are not edges.

The fenced `layers` block lists the layers from top to bottom, one per line (an indented line
continues the one above; `#` starts a comment). Each entry is a module name (that module only),
`name.*` (that module and everything under it), or a pattern with `*` (fnmatch). A module
belongs to the layer of its most specific entry. After a line `independent:`, each line
`A | B` names two groups of which neither may import the other.
"""
import ast
import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path

# What spark may not import, besides every package of the project other than itself.
NOT_FOR_SPARK = ("django", "rest_framework", "drf_spectacular", "celery")


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str  # a module of the project, or the top-level name of a library
    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.importer} -> {self.imported}"


@dataclass
class Layers:
    layers: list[list[str]]  # top first
    independent: list[tuple[list[str], list[str]]] = field(default_factory=list)

    def index(self, module: str) -> int | None:
        """The layer of `module` (0 = top), by its most specific entry; None: in no layer."""
        best, found = -1, None
        for i, entries in enumerate(self.layers):
            for entry in entries:
                if matches(entry, module) and specificity(entry) > best:
                    best, found = specificity(entry), i
        return found


def matches(entry: str, module: str) -> bool:
    if entry.endswith(".*"):
        base = entry[:-2]
        return module == base or module.startswith(base + ".")
    if "*" in entry:
        return fnmatch.fnmatchcase(module, entry)
    return module == entry


def specificity(entry: str) -> int:
    """Longer literal text wins; an exact name beats a pattern of the same text."""
    literal = entry.split("*", 1)[0].rstrip(".")
    return 2 * len(literal) + (0 if "*" in entry else 1)


def layer_block(markdown: str) -> str:
    """The text of the first ```layers fenced block of a Markdown file."""
    found = re.search(r"^```layers\n(.*?)^```", markdown, re.S | re.M)
    if found is None:
        raise ValueError("no ```layers block")
    return found.group(1)


def parse_layers(block: str) -> Layers:
    lines: list[str] = []
    for raw in block.splitlines():
        text = raw.split("#", 1)[0].rstrip()
        if not text.strip():
            continue
        if raw[:1].isspace() and lines and lines[-1] != "independent:":
            lines[-1] += " " + text.strip()
        else:
            lines.append(text.strip())
    result, independent = Layers([]), False
    for text in lines:
        if text == "independent:":
            independent = True
        elif independent:
            left, _, right = text.partition("|")
            result.independent.append((left.split(), right.split()))
        else:
            result.layers.append(text.split())
    return result


def modules_of(root: Path, packages: list[str]) -> dict[str, Path]:
    """{dotted module name: file} of every .py file under the given top-level packages."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def imports_of(root: Path, modules: dict[str, Path]) -> list[Import]:
    """Every import statement of the given modules, wherever it is in the file."""
    out = []
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        rel = str(path.relative_to(root))
        for node in ast.walk(ast.parse(path.read_text(), filename=rel)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    origin = ".".join(base + ([node.module] if node.module else []))
                else:
                    origin = node.module or ""
                names = [f"{origin}.{alias.name}" for alias in node.names]
                names = [n if n in modules else origin for n in names]
            else:
                continue
            for name in dict.fromkeys(names):
                out.append(Import(module, _target(name, modules), rel, node.lineno))
    return out


def _target(name: str, modules: dict[str, Path]) -> str:
    probe = name
    while probe:
        if probe in modules:
            return probe
        probe = probe.rpartition(".")[0]
    return name.split(".")[0]  # a library


def layer_violations(layers: Layers, imports: list[Import], modules) -> list[str]:
    problems = [f"{m} is in no layer of the layers block" for m in modules
                if layers.index(m) is None]
    for imp in imports:
        if imp.imported not in modules or imp.imported == imp.importer:
            continue
        lower, upper = layers.index(imp.importer), layers.index(imp.imported)
        if lower is not None and upper is not None and upper < lower:
            problems.append(f"{imp}: a lower layer imports a higher one")
    for left, right in layers.independent:
        for imp in imports:
            a = any(matches(e, imp.importer) for e in left)
            b = any(matches(e, imp.imported) for e in right)
            c = any(matches(e, imp.importer) for e in right)
            d = any(matches(e, imp.imported) for e in left)
            if (a and b) or (c and d):
                problems.append(f"{imp}: {' '.join(left)} and {' '.join(right)} are independent")
    return problems


def forbidden_imports(imports: list[Import], importers: str, forbidden: tuple[str, ...],
                      why: str) -> list[str]:
    """Imports by modules matching `importers` of anything under the `forbidden` top names."""
    return [f"{imp}: {why}" for imp in imports
            if matches(importers, imp.importer) and imp.imported.split(".")[0] in forbidden]


def cycles(imports: list[Import], modules) -> list[str]:
    """One description per import cycle among the modules (strongly connected components)."""
    graph: dict[str, dict[str, Import]] = {m: {} for m in modules}
    for imp in imports:
        if imp.imported in modules and imp.imported != imp.importer:
            graph[imp.importer].setdefault(imp.imported, imp)
    out = []
    for component in _strongly_connected(graph):
        if len(component) > 1:
            path = _cycle_through(graph, component)
            steps = [str(graph[a][b]) for a, b in zip(path, path[1:], strict=False)]
            more = sorted(set(component) - set(path))
            out.append("import cycle: " + " -> ".join(path) + "\n    " + "\n    ".join(steps)
                       + (f"\n    (entangled with it: {', '.join(more)})" if more else ""))
    return out


def _strongly_connected(graph: dict[str, dict]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (no recursion limit on a long chain of imports)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def _cycle_through(graph: dict[str, dict], component: list[str]) -> list[str]:
    """A shortest cycle from the component's first module back to it (breadth first)."""
    start, members = component[0], set(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node]):
                if nxt not in members:
                    continue
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if nxt not in came_from:
                    came_from[nxt] = node
                    following.append(nxt)
        frontier = following
    return component  # not reached: a component of two or more has a cycle through each member
