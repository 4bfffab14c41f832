"""The chat app's import structure, read from the source: the services never reach the executor, no two
chat modules import each other, and nothing imports inside a function but the app's `ready()`."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHAT = ROOT / "chat"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def chat_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(CHAT.rglob("*.py")) if "migrations" not in p.parts}


def imported(path: Path, known: set[str]) -> set[str]:
    """Every module `path` imports anywhere in its body; `from a import b` counts `a.b` when that is a
    module of `known`."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known)
    return names


def test_the_chat_services_never_import_the_executor() -> None:
    modules = chat_modules()
    services = {name: path for name, path in modules.items() if name.split(".")[:2] == ["chat", "services"]}
    reached = {name: imported(path, set(modules)) for name, path in services.items()}

    executor = {
        name: sorted(m for m in names if m == "chat.executor" or m.startswith("chat.executor."))
        for name, names in reached.items()
    }

    assert sorted(services) == [
        "chat.services",
        "chat.services._common",
        "chat.services.archive",
        "chat.services.branches",
        "chat.services.owner",
        "chat.services.probes",
        "chat.services.runs",
        "chat.services.send",
    ]
    assert executor == {name: [] for name in services}


def test_no_two_chat_modules_import_each_other() -> None:
    modules = chat_modules()
    graph = {name: sorted(imported(path, set(modules)) & set(modules)) for name, path in modules.items()}
    cycles: list[list[str]] = []
    done: set[str] = set()

    def visit(name: str, trail: list[str]) -> None:
        if name in trail:
            cycles.append([*trail[trail.index(name) :], name])
            return
        if name in done:
            return
        for target in graph[name]:
            visit(target, [*trail, name])
        done.add(name)

    for name in graph:
        visit(name, [])

    assert cycles == []


def test_nothing_in_chat_imports_inside_a_function_but_the_apps_ready() -> None:
    inside: set[str] = set()
    for name, path in chat_modules().items():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
                isinstance(inner, ast.Import | ast.ImportFrom) for inner in ast.walk(node)
            ):
                inside.add(f"{name}.{node.name}")

    assert sorted(inside) == ["chat.apps.ready"]
