"""The tool registry: what a tool is, the server-side scope it runs in, and argument validation.

Apps register their tools (``memory``, ``notes``, ...) in ``AppConfig.ready()``. The model only ever
supplies ``arguments``; everything that decides *where* a tool acts (owner, workflow, generation, agent,
run) comes from :class:`ToolContext`, built by the server.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from opencompany.core import gate
from opencompany.core.errors import ApplicationError

ToolResult = dict[str, Any]


@dataclass(frozen=True)
class ToolContext:
    """The server-side scope of one tool execution. Never filled from the model's arguments.

    ``tool_call_id`` is set by the loop for each call, so a tool can derive an idempotency key
    (run id + tool call id) for its writes. ``node_id`` is the graph node that provides the tool, set by
    the binding (:func:`bind_tool`) when one agent has several nodes of one tool.
    """

    run_id: str | None = None
    workflow_id: str | None = None
    generation: int | None = None
    agent_node_id: str | None = None
    owner_id: int | str | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    tool_call_id: str | None = None
    node_id: str | None = None


ToolExecute = Callable[[ToolContext, dict[str, Any]], "ToolResult | Awaitable[ToolResult]"]


@dataclass(frozen=True, eq=False)
class ToolSpec:
    """One tool: its model-facing name, description and JSON Schema, and the callable that runs it.

    ``execute(context, arguments)`` may be a plain function (the loop runs it in a worker thread, since
    it may touch the database) or a coroutine function. It returns a JSON-able dict; an error the model
    should see is returned as :func:`tool_error`, not raised.
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    execute: ToolExecute

    def definition(self) -> dict[str, Any]:
        """The tool as a model sees it: name, description and input schema."""
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}


def bind_tool(spec: ToolSpec, *, name: str, node_id: str, description: str | None = None) -> ToolSpec:
    """The tool `spec` as offered for one graph node: under `name` (distinct among the agent's tools),
    with `description` (default: the spec's), and executed with `ToolContext.node_id = node_id`, so the
    node, never the model, decides where it acts."""
    execute = spec.execute
    if inspect.iscoroutinefunction(execute):

        async def run_async(context: ToolContext, arguments: dict[str, Any]) -> ToolResult:
            return await execute(replace(context, node_id=node_id), arguments)  # type: ignore[misc]

        bound: ToolExecute = run_async
    else:

        def run(context: ToolContext, arguments: dict[str, Any]) -> ToolResult | Awaitable[ToolResult]:
            return execute(replace(context, node_id=node_id), arguments)

        bound = run
    return ToolSpec(
        name=name,
        description=spec.description if description is None else description,
        input_schema=spec.input_schema,
        execute=bound,
    )


def tool_error(code: str, message: str) -> ToolResult:
    """The result shape for a failure the model should read and act on."""
    return {"error": {"code": code, "message": message}}


_registry: dict[str, ToolSpec] = {}
_registry_lock = threading.Lock()
_validators: dict[int, tuple[ToolSpec, Draft202012Validator]] = {}


def register_tool(spec: ToolSpec) -> ToolSpec:
    """Add (or replace, so a re-import is harmless) a tool. The schema is checked now, not on first use."""
    if not spec.name or not isinstance(spec.name, str):
        raise ValueError("a tool needs a non-empty name")
    try:
        Draft202012Validator.check_schema(spec.input_schema)
    except SchemaError as exc:
        raise ValueError(f"tool {spec.name!r} has an invalid input schema: {exc.message}") from exc
    with _registry_lock:
        _registry[spec.name] = spec
    return spec


def get_tool(name: str) -> ToolSpec | None:
    return _registry.get(name)


def registered_tools() -> dict[str, ToolSpec]:
    """A snapshot of the registry, by name."""
    with _registry_lock:
        return dict(_registry)


def _validator_for(spec: ToolSpec) -> Draft202012Validator:
    cached = _validators.get(id(spec))
    if cached is not None and cached[0] is spec:
        return cached[1]
    validator = Draft202012Validator(spec.input_schema)
    _validators[id(spec)] = (spec, validator)
    return validator


def _path_of(parts: Any) -> str:
    out = "arguments"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def validate_arguments(spec: ToolSpec, arguments: Any) -> list[str]:
    """Check the model's arguments against the tool's schema; each error names the field path.

    An empty list means valid. Errors come in a stable order (by path, then message). The input gate
    runs first: arguments nested too deeply, or holding a NUL or a lone surrogate, are refused before
    the schema's validator recurses into them.
    """
    try:
        gate.check_document(arguments, field="arguments")
    except ApplicationError as exc:
        return [gate.describe(exc)]
    validator = _validator_for(spec)
    errors = sorted(
        validator.iter_errors(arguments), key=lambda e: (list(map(str, e.absolute_path)), e.message)
    )
    return [f"{_path_of(e.absolute_path)}: {e.message}" for e in errors]


def tools_by_name(tools: Mapping[str, ToolSpec] | Sequence[ToolSpec]) -> dict[str, ToolSpec]:
    if isinstance(tools, Mapping):
        return dict(tools)
    return {t.name: t for t in tools}
