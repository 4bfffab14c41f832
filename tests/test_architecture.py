"""The import graph: no module and no package of the project imports itself back through others, the
shared kernel (`opencompany.core`, `opencompany.llm`) imports no app, and only the named wiring modules
of the project package (settings, urls, routing, asgi, wsgi, the server) may import an app.

Every `import` counts, at module level or inside a function (a lazy import still makes two modules
depend on each other), read with `ast` from the sources without importing them.

Packages are checked level by level: inside each package, its modules and its subpackages (each taken
whole) must not import each other round. At the top, the parts are the apps, the kernel packages and
each wiring module: the project package only groups them.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from django.conf import settings

ROOT = Path(settings.BASE_DIR)
PROJECT = "opencompany"
KERNEL = ("opencompany.core", "opencompany.llm")
# The modules that put the project together, the only ones beside the kernel in the project package and
# the only ones there that may import an app.
WIRING = (
    "opencompany.asgi",
    "opencompany.routing",
    "opencompany.server",
    "opencompany.settings",
    "opencompany.urls",
    "opencompany.wsgi",
)


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
    for package in (*_apps(), PROJECT):
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
def _graph() -> dict[str, dict[str, str]]:
    """module -> {imported project module: where (the first line importing it)}."""
    graph: dict[str, dict[str, str]] = {}
    for name, path in _modules().items():
        edges: dict[str, str] = {}
        for target, line in _imported_names(name, path):
            resolved = _resolve(target)
            if resolved is not None and resolved != name:
                edges.setdefault(resolved, f"line {line}")
        graph[name] = edges
    return graph


def _part(module: str, package: str) -> str | None:
    """The part of `package` holding `module`: the child module, or the child subpackage taken whole.
    None for the package's own `__init__` and for modules outside it. The top ("") is split into the
    apps, the kernel packages and the wiring modules."""
    if not package:
        head, _, rest = module.partition(".")
        return f"{head}.{rest.partition('.')[0]}" if head == PROJECT and rest else head
    if not module.startswith(f"{package}."):
        return None
    return f"{package}.{module[len(package) + 1 :].partition('.')[0]}"


def _parts_graph(graph: dict[str, dict[str, str]], package: str) -> dict[str, dict[str, str]]:
    """part -> {imported part of the same package: where (the first module and line importing it)}."""
    parts: dict[str, dict[str, str]] = {}
    for module, edges in sorted(graph.items()):
        source = _part(module, package)
        if source is None:
            continue
        parts.setdefault(source, {})
        for target, where in sorted(edges.items()):
            destination = _part(target, package)
            if destination is not None and destination != source:
                parts[source].setdefault(destination, f"{module} {where}")
                parts.setdefault(destination, {})
    return parts


def _strongly_connected(graph: dict[str, dict[str, str]]) -> list[list[str]]:
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


def _a_cycle(graph: dict[str, dict[str, str]], component: list[str]) -> list[str]:
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


def _describe(graph: dict[str, dict[str, str]], loop: list[str]) -> str:
    return (
        " -> ".join(f"{module} ({graph[module][nxt]})" for module, nxt in itertools.pairwise(loop))
        + f" -> {loop[-1]}"
    )


def _loops(graph: dict[str, dict[str, str]]) -> list[str]:
    return [
        f"{len(component)} ({', '.join(component)}), e.g. {_describe(graph, _a_cycle(graph, component))}"
        for component in _strongly_connected(graph)
    ]


def test_the_walk_sees_every_app_and_the_kernel():
    modules = _modules()

    assert set(_apps()) == {"chat", "conversations", "memory", "graphs"}
    for package in (*_apps(), "opencompany", *KERNEL):
        assert package in modules
    assert _resolve("chat.services.chat_send") in {"chat.services", "chat.services.send"}
    assert _resolve("django.db") is None


def test_no_modules_of_the_project_import_each_other():
    loops = _loops(_graph())

    assert loops == [], "modules importing each other:\n" + "\n".join(loops)


def test_no_packages_of_the_project_import_each_other():
    graph = _graph()
    packages = sorted(name for name, path in _modules().items() if path.name == "__init__.py")

    loops = [
        f"in {package or 'the project'}: {loop}"
        for package in ("", *packages)
        for loop in _loops(_parts_graph(graph, package))
    ]

    assert loops == [], "packages importing each other:\n" + "\n".join(loops)


def test_the_project_package_holds_the_kernel_and_the_named_wiring_only():
    outside_the_kernel = {
        name
        for name in _modules()
        if name.startswith(f"{PROJECT}.") and not name.startswith(tuple(f"{k}." for k in KERNEL))
    } - set(KERNEL)

    assert outside_the_kernel == set(WIRING)


def test_the_shared_kernel_imports_no_app_and_no_wiring():
    apps = _apps()
    offending = [
        f"{name} line {line}: {target}"
        for name, path in _modules().items()
        if name.startswith(KERNEL)
        for target, line in _imported_names(name, path)
        if target.split(".")[0] in apps or _resolve(target) in WIRING
    ]

    assert offending == []


def test_only_the_named_wiring_modules_import_apps_from_the_project_package():
    apps = _apps()
    importing_apps = {
        name
        for name, path in _modules().items()
        if name.split(".")[0] == PROJECT
        for target, _line in _imported_names(name, path)
        if target.split(".")[0] in apps
    }

    assert importing_apps == {"opencompany.asgi", "opencompany.routing"}
    assert importing_apps <= set(WIRING)


def test_a_loop_between_a_module_and_a_sibling_package_is_found():
    graph = {
        "chat.tasks": {"chat.executor.run": "line 6"},
        "chat.executor.run": {"chat.models": "line 3"},
        "chat.executor.dispatch": {"chat.tasks": "line 22", "chat.executor.run": "line 4"},
        "chat.models": {},
    }

    assert _loops(graph) == []
    assert _loops(_parts_graph(graph, "chat")) == [
        "2 (chat.executor, chat.tasks), e.g. chat.executor (chat.executor.dispatch line 22) -> chat.tasks "
        "(chat.tasks line 6) -> chat.executor"
    ]
    assert _loops(_parts_graph(graph, "chat.executor")) == []


def test_the_top_splits_the_project_package_into_kernel_and_wiring():
    assert _part("opencompany.core.errors", "") == "opencompany.core"
    assert _part("opencompany.asgi", "") == "opencompany.asgi"
    assert _part("opencompany", "") == "opencompany"
    assert _part("chat.executor.run", "") == "chat"
    assert _part("chat.executor.run", "chat") == "chat.executor"
    assert _part("chat", "chat") is None
    assert _part("memory.models", "chat") is None


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


def test_an_app_importing_the_wiring_that_imports_it_is_a_loop_at_the_top():
    graph = {
        "opencompany.asgi": {"chat.watchdog": "line 18", "opencompany.core.events": "line 20"},
        "opencompany.routing": {"chat.routing": "line 5"},
        "opencompany.core.events": {},
        "chat.watchdog": {"opencompany.core.events": "line 9"},
        "chat.routing": {},
        "chat.consumers": {"opencompany.routing": "line 3"},
    }

    assert _loops(graph) == []
    assert _loops(_parts_graph(graph, "")) == [
        "2 (chat, opencompany.routing), e.g. chat (chat.consumers line 3) -> opencompany.routing "
        "(opencompany.routing line 5) -> chat"
    ]
