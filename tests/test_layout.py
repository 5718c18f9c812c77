"""The shape of the code: rooms of a readable size, no import loops, and
layers that only import downwards.

Every import counts, including those under ``TYPE_CHECKING`` and those inside
functions: a loop hidden from the interpreter is still a loop for a reader.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "queuey"
MAX_LINES = 450

#: The layers, lowest first; a module may import its own layer and those below.
#: The doors (web, sqs, admin, cli, spark) are above the core; the client
#: library talks HTTP and stands apart from the server's layers. The shipped
#: storage contract suite runs stores through the core's rules (schedules,
#: dead letters), so it sits above the core, where no service module reaches it.
LAYERS = {
    "queuey.storage.testing": 3.5,
    "queuey.model": 1,
    "queuey.storage": 2,
    "queuey.core": 3,
}
DOORS = ("queuey.web", "queuey.sqs", "queuey.admin", "queuey.cli", "queuey.spark")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


MODULES = _modules()


def _resolve(name: str, level: int, importer: str, is_package: bool) -> str:
    if level == 0:
        return name
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: -(level - 1)]
    return ".".join(base + ([name] if name else []))


def _imports(module: str, path: Path) -> set[str]:
    """Every queuey module ``module`` imports, wherever the import stands."""
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module or "", node.level, module, path.name == "__init__.py")
            # ``from package import module`` imports the module itself.
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _without_package_inits(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph without the edge from a module to its own package's
    ``__init__`` (Python runs a package's ``__init__`` before any module in it;
    that is containment, not a dependency a reader follows)."""
    return {
        name: {t for t in targets if not name.startswith(t + ".")}
        for name, targets in graph.items()
    }


def test_no_module_is_longer_than_a_reader_can_hold():
    long = {
        name: n
        for name, path in MODULES.items()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, f"modules over {MAX_LINES} lines: {long}"


def test_no_import_cycle_anywhere():
    assert _cycles(_without_package_inits(GRAPH)) == []


def _layer(name: str) -> tuple[int, str]:
    for prefix, level in LAYERS.items():
        if name == prefix or name.startswith(prefix + "."):
            return level, prefix
    for door in DOORS:
        if name == door or name.startswith(door + "."):
            return 4, door
    return 0, ""


@pytest.mark.parametrize("layer", list(LAYERS) + list(DOORS))
def test_layers_import_only_downwards(layer):
    level, _ = _layer(layer)
    upward = sorted(
        f"{name} -> {target}"
        for name, targets in GRAPH.items()
        if _layer(name)[1] == layer
        for target in targets
        if _layer(target)[0] > level
        or (_layer(target)[0] == level == 4 and _layer(target)[1] != layer)
    )
    # The admin pages and the SQS endpoint are Pyramid doors beside the REST
    # API and share its HTTP plumbing (bodies, parameters, answers); they never
    # reach the core's rules through it.
    shared_plumbing = (
        "queuey.web.bodies",
        "queuey.web.params",
        "queuey.web.responses",
        "queuey.web.resources",
        "queuey.web.security",
        "queuey.web.errors",
    )
    upward = [
        edge
        for edge in upward
        if not (
            layer in ("queuey.admin", "queuey.sqs") and edge.split(" -> ")[1] in shared_plumbing
        )
    ]
    assert upward == []


def test_the_shipped_storage_suite_imports_nothing_from_tests():
    """An out-of-tree backend runs :mod:`queuey.storage.testing` from an
    installed package, where ``tests/`` does not exist."""
    found = sorted(
        f"{path.name}: {name}"
        for path in (PACKAGE / "storage" / "testing").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in (
            [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        )
        if name == "tests" or name.startswith("tests.")
    )
    assert found == []


def test_the_checker_sees_a_loop():
    graph = defaultdict(set, {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})
    assert _cycles(graph) == [["a", "b", "c"]]


#: What the client library may import besides itself: the shared rules
#: (``queuey/*.py``), the vocabulary and the wire models. It talks HTTP; the
#: server's storage, core and doors are not installed where it runs.
CLIENT_MAY_IMPORT = ("queuey.model", "queuey.wire")


def _client_may_import(target: str) -> bool:
    if target == "queuey" or target.startswith("queuey.client"):
        return True
    if any(target == p or target.startswith(p + ".") for p in CLIENT_MAY_IMPORT):
        return True
    return target.count(".") == 1 and not (PACKAGE / target.split(".")[1]).is_dir()


def test_the_client_imports_no_server_layer():
    reached = sorted(
        f"{name} -> {target}"
        for name, targets in GRAPH.items()
        if name.startswith("queuey.client")
        for target in targets
        if not _client_may_import(target)
    )
    assert reached == []


def test_the_wire_models_import_only_the_vocabulary():
    """:mod:`queuey.wire` is shared by the service and the client, so it stands
    on what both have: the vocabulary and the shared rules."""
    reached = sorted(
        f"{name} -> {target}"
        for name, targets in GRAPH.items()
        if name.startswith("queuey.wire")
        for target in targets
        if target.startswith("queuey.client") or not _client_may_import(target)
    )
    assert reached == []
