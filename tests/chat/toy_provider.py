"""A provider added the way any provider is: this one module, and its line in OPENCOMPANY_PROVIDERS.

The toy model answers every request with its configured greeting and the owner's last words."""

from __future__ import annotations

from collections.abc import AsyncIterator

from opencompany.llm.context import ContextAdapter
from opencompany.llm.fidelity import PORTABLE, stamp
from opencompany.llm.providers.base import (
    PROVIDER_NOT_CONFIGURED,
    Completed,
    ModelSettings,
    Provider,
    ProviderConfig,
    ProviderError,
    ProviderEvent,
    Request,
    TextDelta,
    Usage,
)
from opencompany.llm.registry import ProviderEntry
from opencompany.llm.wire import make_assistant, make_text, text_of

PATH = "tests.chat.toy_provider.TOY"


class ToyContext(ContextAdapter):
    runtime = "toy"


class ToyProvider:
    name = "toy"
    fidelity = PORTABLE

    def __init__(self, greeting: str) -> None:
        self.greeting = greeting

    async def stream(self, request: Request) -> AsyncIterator[ProviderEvent]:
        answer = f"{self.greeting} You said: {text_of(request.messages[-1])}"
        for word in answer.split(" "):
            yield TextDelta(word + " ")
        yield Usage(input_tokens=len(request.messages), output_tokens=len(answer.split(" ")))
        message = make_assistant([make_text(" ".join(answer.split(" ")) + " ")])
        yield Completed(stamp(message, runtime=self.name, fidelity=self.fidelity))


def _build(model: ModelSettings, config: ProviderConfig) -> Provider:
    greeting = config.option("toy_greeting")
    if not greeting:
        raise ProviderError(PROVIDER_NOT_CONFIGURED, "No greeting is configured for the toy provider.")
    return ToyProvider(str(greeting))


TOY = ProviderEntry(
    name="toy",
    display_name="Toy",
    context=ToyContext(),
    settings={"toy_greeting": "TOY_GREETING"},
    default_model="toy-1",
    models=frozenset({"toy-1"}),
    build=_build,
)
