"""Node-spec registry: what each node type declares (ports, capabilities, parameters schema).

Pure code, no Django models. Apps add their node types with `register_node_spec` (normally from
`AppConfig.ready()`); the built-in types are registered lazily on first read, so pure callers (the
normalizer, the validator, benchmarks) see them without Django being set up.

Capability discovery goes through the flags on `NodeSpec` (`requires_context`, `accepts_teammates`, …),
never through a list of type names.
"""

from __future__ import annotations

import copy
import hashlib
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from graphs.constants import (
    AGENT_NODE_TYPE,
    CHAT_TRIGGER_NODE_TYPE,
    CONTEXT_INPUT_HANDLE,
    CONTEXT_NODE_TYPE,
    CONTEXT_OUTPUT_HANDLE,
    CONTEXT_ROLE,
    INPUT,
    MAIN_INPUT_HANDLE,
    MAIN_OUTPUT_HANDLE,
    MAIN_ROLE,
    MEMORY_NODE_TYPE,
    OUTPUT,
    PORT_DIRECTIONS,
    SKILL_INPUT_HANDLE,
    SKILL_ROLE,
    TASK_INPUT_HANDLE,
    TASK_ROLE,
    TEAM_LEAD_NODE_TYPE,
    TEAMMATES_INPUT_HANDLE,
    TEAMMATES_ROLE,
    TOOL_OUTPUT_HANDLE,
    TOOLS_INPUT_HANDLE,
    TOOLS_ROLE,
    TOP_OUTPUT_HANDLE,
    PortDirection,
)
from opencompany.core.json import canonical_json
from opencompany.llm.registry import provider_names


def _empty_parameters_schema() -> dict[str, Any]:
    return {"type": "object", "properties": {}, "additionalProperties": False}


@dataclass(frozen=True)
class Port:
    """A named handle on a node; edges attach to ports by name."""

    name: str
    direction: PortDirection
    label: str
    role: str
    # False: the canvas may draw the port, but nothing runs behind it yet, so the validator refuses
    # every wire on it (`unsupported_connection`) instead of accepting a wire that would do nothing.
    supported: bool = True


@dataclass(frozen=True)
class NodeSpec:
    """Everything the server and the canvas need to know about one node type."""

    type: str
    display_name: str
    description: str
    group: tuple[str, ...]
    ports: tuple[Port, ...]
    requires_context: bool = False
    is_context_panel: bool = False
    system_managed: bool = False
    accepts_teammates: bool = False
    parameters_schema: dict[str, Any] = field(default_factory=_empty_parameters_schema)
    tool_name: str | None = None
    version: int = 1

    @cached_property
    def input_port_names(self) -> frozenset[str]:
        return frozenset(port.name for port in self.ports if port.direction == INPUT)

    @cached_property
    def output_port_names(self) -> frozenset[str]:
        return frozenset(port.name for port in self.ports if port.direction == OUTPUT)

    @cached_property
    def exported_parameters(self) -> frozenset[str]:
        """The parameters an export keeps: those the schema declares (it admits no others)."""
        return frozenset(self.parameters_schema.get("properties") or {})

    def port(self, name: str | None, direction: str) -> Port | None:
        """The port with this name and direction; an edge naming no handle attaches to the node's first
        port of that direction (its default). None when there is no such port."""
        if name is None:
            return next((port for port in self.ports if port.direction == direction), None)
        return self._ports_by_key.get((name, direction))

    @cached_property
    def _ports_by_key(self) -> dict[tuple[str, str], Port]:
        return {(port.name, port.direction): port for port in self.ports}

    def to_wire(self) -> dict[str, Any]:
        """The camelCase shape served at `GET /api/v1/node-specs`."""
        ui_hints: dict[str, bool] = {}
        if self.requires_context:
            ui_hints["requiresContext"] = True
        if self.is_context_panel:
            ui_hints["isContextPanel"] = True
        if self.system_managed:
            ui_hints["systemManaged"] = True
        if self.accepts_teammates:
            ui_hints["acceptsTeammates"] = True
        wire: dict[str, Any] = {
            "type": self.type,
            "displayName": self.display_name,
            "description": self.description,
            "group": list(self.group),
            "version": self.version,
            "inputs": self.parameters_schema,
            "handles": [_port_wire(port) for port in self.ports],
            "uiHints": ui_hints,
        }
        if self.tool_name is not None:
            wire["toolName"] = self.tool_name
        return wire


def _port_wire(port: Port) -> dict[str, Any]:
    wire: dict[str, Any] = {"name": port.name, "kind": port.direction, "label": port.label, "role": port.role}
    if not port.supported:
        wire["supported"] = False
    return wire


@dataclass(frozen=True)
class ParameterError:
    """The first reason a node's parameters fail its schema. `path` is dotted (`""` = the object itself)."""

    path: str
    message: str


_lock = threading.Lock()
_registry: dict[str, NodeSpec] = {}
_builtins_registered = False
_builtin_providers: tuple[str, ...] = ()  # the provider names the built-in agent types were built for
_payload_cache: dict[str, Any] | None = None
# type -> (spec it was compiled for, jsonschema validator, conservative fast check or None)
_validators: dict[str, tuple[NodeSpec, Draft202012Validator, Callable[[Any], bool] | None]] = {}


def _check_spec(spec: NodeSpec) -> None:
    if not spec.type or not isinstance(spec.type, str):
        raise ValueError("NodeSpec.type must be a non-empty string")
    if not isinstance(spec.group, tuple) or not all(isinstance(item, str) for item in spec.group):
        raise ValueError(f"Node type '{spec.type}': group must be a tuple of strings")
    schema = spec.parameters_schema
    Draft202012Validator.check_schema(schema)
    if schema.get("type") != "object" or schema.get("additionalProperties") is not False:
        raise ValueError(
            f"Node type '{spec.type}': parameters_schema must be an object schema with additionalProperties false"
        )
    seen: set[tuple[str, str]] = set()
    for port in spec.ports:
        if port.direction not in PORT_DIRECTIONS:
            raise ValueError(f"Node type '{spec.type}': port '{port.name}' has direction '{port.direction}'")
        key = (port.name, port.direction)
        if key in seen:
            raise ValueError(f"Node type '{spec.type}': port '{port.name}' is declared twice")
        seen.add(key)


def register_node_spec(spec: NodeSpec, *, replace: bool = False) -> None:
    """Add a node type. Registering an equal spec again is a no-op; a different spec for a taken type is
    refused, unless `replace` (the built-in agent types, when the registered providers change)."""
    global _payload_cache
    _check_spec(spec)
    with _lock:
        existing = _registry.get(spec.type)
        if existing is not None and not replace:
            if existing == spec:
                return
            raise ValueError(f"Node type '{spec.type}' is already registered with a different spec")
        _registry[spec.type] = spec
        _payload_cache = None


def _ensure_builtins() -> None:
    if not _builtins_registered or provider_names() != _builtin_providers:
        register_builtin_node_specs()


def get_node_spec(type: str) -> NodeSpec | None:
    _ensure_builtins()
    return _registry.get(type)


def all_node_specs() -> list[NodeSpec]:
    """Every registered spec, sorted by type."""
    _ensure_builtins()
    return [_registry[key] for key in sorted(_registry)]


def node_specs_payload() -> dict[str, Any]:
    """`{"hash", "specs"}`: the hash (16 hex of sha256 of the canonical specs) changes whenever a spec does.

    Returns a fresh copy each time, so callers may modify it.
    """
    global _payload_cache
    _ensure_builtins()
    cached = _payload_cache
    if cached is None:
        specs = [spec.to_wire() for spec in all_node_specs()]
        digest = hashlib.sha256(canonical_json(specs).encode("utf-8")).hexdigest()[:16]
        cached = {"hash": digest, "specs": specs}
        _payload_cache = cached
    return copy.deepcopy(cached)


# --- parameter validation -------------------------------------------------------------------------------

_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment", "deprecated"})
_PROPERTY_KEYWORDS = _ANNOTATIONS | {
    "type",
    "enum",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
}
_OBJECT_KEYWORDS = _ANNOTATIONS | {"$schema", "type", "properties", "additionalProperties", "required"}


def _compile_property(schema: Mapping[str, Any]) -> Callable[[Any], bool] | None:
    """A check that returns True only for values jsonschema certainly accepts; None = no fast path."""
    if not set(schema) <= _PROPERTY_KEYWORDS:
        return None
    kind = schema.get("type")
    enum = schema.get("enum")
    bounds = [schema.get(key) for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")]
    lo, hi, xlo, xhi = bounds
    min_len, max_len = schema.get("minLength"), schema.get("maxLength")
    if kind == "string":
        if any(bound is not None for bound in bounds):
            return None
        if enum is not None and not all(isinstance(item, str) for item in enum):
            return None
        allowed = frozenset(enum) if enum is not None else None
        min_n = min_len if isinstance(min_len, int) else 0
        max_n = max_len if isinstance(max_len, int) else math.inf

        def check_string(value: Any) -> bool:
            return (
                isinstance(value, str)
                and min_n <= len(value) <= max_n
                and (allowed is None or value in allowed)
            )

        return check_string
    if kind in ("number", "integer"):
        if enum is not None or min_len is not None or max_len is not None:
            return None
        if not all(bound is None or type(bound) in (int, float) for bound in bounds):
            return None
        numeric: tuple[type, ...] = (int,) if kind == "integer" else (int, float)

        def check_number(value: Any) -> bool:
            # Integral floats (5.0) and non-finite floats are left to jsonschema.
            if type(value) not in numeric or (type(value) is float and not math.isfinite(value)):
                return False
            return (
                (lo is None or value >= lo)
                and (hi is None or value <= hi)
                and (xlo is None or value > xlo)
                and (xhi is None or value < xhi)
            )

        return check_number
    if kind == "boolean" and enum is None and all(bound is None for bound in bounds):
        return lambda value: type(value) is bool
    return None


def _compile_fast_check(schema: Mapping[str, Any]) -> Callable[[Any], bool] | None:
    """Compile the flat object schemas node parameters use into plain Python checks.

    Running jsonschema on every node would dominate the validation of large graphs. The compiled
    check is conservative: True means jsonschema would accept too; False means "ask jsonschema", which
    stays the authority for every rejection and its message.
    """
    if not set(schema) <= _OBJECT_KEYWORDS or schema.get("type") != "object":
        return None
    if schema.get("additionalProperties") is not False:
        return None
    checks: dict[str, Callable[[Any], bool]] = {}
    for name, prop in (schema.get("properties") or {}).items():
        if not isinstance(prop, Mapping):
            return None
        check = _compile_property(prop)
        if check is None:
            return None
        checks[name] = check
    required = tuple(schema.get("required") or ())

    def check_object(value: Any) -> bool:
        if type(value) is not dict:
            return False
        for key, item in value.items():
            check = checks.get(key)
            if check is None or not check(item):
                return False
        return all(key in value for key in required)

    return check_object


def _validator_for(spec: NodeSpec) -> tuple[Draft202012Validator, Callable[[Any], bool] | None]:
    cached = _validators.get(spec.type)
    if cached is not None and cached[0] is spec:
        return cached[1], cached[2]
    validator = Draft202012Validator(spec.parameters_schema)
    fast = _compile_fast_check(spec.parameters_schema)
    _validators[spec.type] = (spec, validator, fast)
    return validator, fast


def _error_path(error: Any) -> str:
    parts = [str(part) for part in error.absolute_path]
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(error.schema.get("properties") or {})
        unexpected = sorted(str(key) for key in error.instance if key not in allowed)
        if unexpected:
            parts.append(unexpected[0])
    return ".".join(parts)


def parameter_error(spec: NodeSpec, parameters: Any) -> ParameterError | None:
    """None if `parameters` satisfy the spec's schema, else the most relevant error (jsonschema's best match)."""
    validator, fast = _validator_for(spec)
    if fast is not None and fast(parameters):
        return None
    error = best_match(validator.iter_errors(parameters))
    if error is None:
        return None
    return ParameterError(path=_error_path(error), message=error.message)


# --- built-in node types --------------------------------------------------------------------------------


def _agent_parameters(providers: tuple[str, ...]) -> dict[str, Any]:
    """An agent's parameters; `provider` is one of the registered runtimes (OPENCOMPANY_PROVIDERS): a
    model provider, or an agent program run as the agent's runtime."""
    return {
        **_AGENT_PARAMETERS,
        "properties": {
            **_AGENT_PARAMETERS["properties"],
            "provider": {"type": "string", "enum": list(providers), "default": "offline"},
        },
    }


_AGENT_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "system_prompt": {"type": "string", "maxLength": 100_000},
        "provider": {"type": "string"},  # its choices: `_agent_parameters`
        "model": {"type": "string", "maxLength": 200},
        "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        "max_output_tokens": {"type": "integer", "minimum": 1, "maximum": 200_000},
        "context_window": {"type": "integer", "minimum": 1024, "maximum": 10_000_000},
        # Extended thinking (Anthropic, Gemini): the token budget; below max_output_tokens.
        "thinking_budget": {"type": "integer", "minimum": 1024, "maximum": 200_000},
        # An OpenAI reasoning model's effort (Responses API).
        "reasoning_effort": {"type": "string", "enum": ["minimal", "low", "medium", "high"]},
        "compaction_ratio": {"type": "number", "minimum": 0.05, "maximum": 0.99},
        "tool_result_max_chars": {"type": "integer", "minimum": 0, "maximum": 10_000_000},
    },
}

_AGENT_PORTS: tuple[Port, ...] = (
    Port(MAIN_INPUT_HANDLE, INPUT, "Input", MAIN_ROLE),
    Port(TOOLS_INPUT_HANDLE, INPUT, "Tools", TOOLS_ROLE),
    Port(CONTEXT_INPUT_HANDLE, INPUT, "Context", CONTEXT_ROLE),
    Port(SKILL_INPUT_HANDLE, INPUT, "Skills", SKILL_ROLE, supported=False),
    Port(TASK_INPUT_HANDLE, INPUT, "Task", TASK_ROLE, supported=False),
    Port(MAIN_OUTPUT_HANDLE, OUTPUT, "Output", MAIN_ROLE),
    Port(TOP_OUTPUT_HANDLE, OUTPUT, "Output", MAIN_ROLE),
)


def _builtin_specs(providers: tuple[str, ...]) -> list[NodeSpec]:
    agent_parameters = _agent_parameters(providers)
    return [
        NodeSpec(
            type=CHAT_TRIGGER_NODE_TYPE,
            display_name="Chat Trigger",
            description="Starts the workflow when the owner sends a chat message.",
            group=("trigger",),
            ports=(Port(MAIN_OUTPUT_HANDLE, OUTPUT, "Message", MAIN_ROLE),),
        ),
        NodeSpec(
            type=AGENT_NODE_TYPE,
            display_name="AI Agent",
            description="A language-model agent; continues its Context conversation every time it fires.",
            group=("agent",),
            ports=_AGENT_PORTS,
            requires_context=True,
            parameters_schema=agent_parameters,
        ),
        NodeSpec(
            type=TEAM_LEAD_NODE_TYPE,
            display_name="Team Lead",
            description=(
                "An agent that can delegate work to teammate agents: each teammate is a tool of the lead "
                "(`ask_<label>`) and answers from its own Context."
            ),
            group=("agent",),
            ports=(*_AGENT_PORTS, Port(TEAMMATES_INPUT_HANDLE, INPUT, "Teammates", TEAMMATES_ROLE)),
            requires_context=True,
            accepts_teammates=True,
            parameters_schema=agent_parameters,
        ),
        NodeSpec(
            type=CONTEXT_NODE_TYPE,
            display_name="Context",
            description="The durable conversation of the agent it is connected to.",
            group=("memory",),
            ports=(Port(CONTEXT_OUTPUT_HANDLE, OUTPUT, "Context", CONTEXT_ROLE),),
            is_context_panel=True,
            system_managed=True,
            version=2,
        ),
        NodeSpec(
            type=MEMORY_NODE_TYPE,
            display_name="Memory",
            description=(
                "Facts the agent chooses to remember and recall, offered as a `memory` tool; each Memory "
                "node on an agent is its own tool (`memory`, `memory_2`, …) with its own items."
            ),
            group=("tool", "memory"),
            ports=(Port(TOOL_OUTPUT_HANDLE, OUTPUT, "Memory", TOOLS_ROLE),),
            tool_name="memory",
            parameters_schema={
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "reset_policy": {"type": "string", "enum": ["preserve", "clear"], "default": "preserve"},
                },
            },
        ),
    ]


def register_builtin_node_specs() -> None:
    """Register the built-in node types (idempotent); the agent types again when the registered
    providers changed."""
    global _builtins_registered, _builtin_providers
    providers = provider_names()
    for spec in _builtin_specs(providers):
        register_node_spec(spec, replace=spec.type in (AGENT_NODE_TYPE, TEAM_LEAD_NODE_TYPE))
    _builtin_providers = providers
    _builtins_registered = True
