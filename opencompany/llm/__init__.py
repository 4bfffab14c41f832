"""The provider-agnostic agent runtime: wire format, tools, providers, transcript policies, the loop.

It imports no Django app; apps plug in through the tool registry and the loop's sink.
"""

from .loop import LoopPolicies, LoopResult, ProviderSummarizer, Sink, run_agent_loop
from .providers import ModelSettings, ProviderConfig, ProviderError, Request, Usage
from .registry import get_provider
from .tools import (
    ToolContext,
    ToolSpec,
    get_tool,
    register_tool,
    registered_tools,
    tool_error,
    validate_arguments,
)
from .wire import WireError, validate_message, validate_messages

__all__ = [
    "LoopPolicies",
    "LoopResult",
    "ModelSettings",
    "ProviderConfig",
    "ProviderError",
    "ProviderSummarizer",
    "Request",
    "Sink",
    "ToolContext",
    "ToolSpec",
    "Usage",
    "WireError",
    "get_provider",
    "get_tool",
    "register_tool",
    "registered_tools",
    "run_agent_loop",
    "tool_error",
    "validate_arguments",
    "validate_message",
    "validate_messages",
]
