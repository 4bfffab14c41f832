"""The import graph: no module of the project imports itself back through other modules, and the
shared kernel (`opencompany.core`, `opencompany.llm`) imports no app.

Every `import` counts, at module level or inside a function (a lazy import still makes two modules
depend on each other), read with `ast` from the sources without importing them.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from django.conf import settings

ROOT = Path(settings.BASE_DIR)
KERNEL = ("opencompany.core", "opencompany.llm")


def _apps() -> tuple[str, ...]:
    """The project's own apps: installed apps whose package sits in this repository, the project
    package aside."""
    return tuple(
        app for app in settings.INSTALLED_APPS if "." not in app and (ROOT / app / "__init__.py").is_file()
    )


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def _modules() -> dict[str, Path]:
    """Every module of the apps and of the project package, by dotted name."""
    found: dict[str, Path] = {}
    for package in (*_apps(), "opencompany"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if "__pycache__" not in path.parts:
                found[_module_name(path)] = path
    return found


def _imported_names(name: str, path: Path) -> Iterator[tuple[str, int]]:
    """(dotted target, line) for every import in the module, relative ones resolved."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base = ".".join(base_parts[: len(base_parts) - (node.level - 1)])
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            for alias in node.names:
                # `from pkg import sub` imports the submodule when there is one, else a name of pkg.
                yield f"{source}.{alias.name}", node.lineno
                yield source, node.lineno


def _resolve(target: str) -> str | None:
    """The most specific project module a dotted import target names (None outside the project)."""
    modules = _modules()
    while target:
        if target in modules:
            return target
        target = target.rpartition(".")[0]
    return None


@cache
def _graph() -> dict[str, dict[str, int]]:
    """module -> {imported project module: first line importing it}."""
    graph: dict[str, dict[str, int]] = {}
    for name, path in _modules().items():
        edges: dict[str, int] = {}
        for target, line in _imported_names(name, path):
            resolved = _resolve(target)
            if resolved is not None and resolved != name:
                edges.setdefault(resolved, line)
        graph[name] = edges
    return graph


def _strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's components of more than one module, each sorted, in a stable order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, {})):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(components)


def _a_cycle(graph: dict[str, dict[str, int]], component: list[str]) -> list[str]:
    """One concrete loop through the component's first module (shortest by breadth-first search)."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node]):
                if nxt == start:
                    return [*paths[node], start]
                if nxt in members and nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    following.append(nxt)
        frontier = following
    return component


def _describe(graph: dict[str, dict[str, int]], loop: list[str]) -> str:
    return (
        " -> ".join(f"{module} (line {graph[module][nxt]})" for module, nxt in itertools.pairwise(loop))
        + f" -> {loop[-1]}"
    )


def test_the_walk_sees_every_app_and_the_kernel():
    modules = _modules()

    assert set(_apps()) == {"chat", "conversations", "memory", "graphs"}
    for package in (*_apps(), "opencompany", *KERNEL):
        assert package in modules
    assert _resolve("chat.services.chat_send") in {"chat.services", "chat.services.send"}
    assert _resolve("django.db") is None


def test_no_modules_of_the_project_import_each_other():
    graph = _graph()

    loops = [
        f"{len(component)} modules ({', '.join(component)}), e.g. {_describe(graph, _a_cycle(graph, component))}"
        for component in _strongly_connected(graph)
    ]

    assert loops == [], "modules importing each other:\n" + "\n".join(loops)


def test_the_shared_kernel_imports_no_app():
    apps = _apps()
    offending = [
        f"{name} line {line}: {target}"
        for name, path in _modules().items()
        if name.startswith(KERNEL)
        for target, line in _imported_names(name, path)
        if target.split(".")[0] in apps
    ]

    assert offending == []


def test_imports_inside_functions_and_relative_imports_are_read(tmp_path):
    path = tmp_path / "x.py"
    path.write_text("from . import sibling\n\n\ndef later():\n    from chat.executor import dispatch_run\n")

    found = set(_imported_names("chat.services.x", path))

    assert found == {
        ("chat.services.sibling", 1),
        ("chat.services", 1),
        ("chat.executor.dispatch_run", 5),
        ("chat.executor", 5),
    }
