import json
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from chat.services import provider_probe_record
from opencompany.llm.providers import ProviderError, probe_capabilities


class Command(BaseCommand):
    help = (
        "Probe the OpenAI-compatible server (OPENAI_COMPATIBLE_BASE_URL) for a model now and keep the "
        "answer, so runs need not probe it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("model", help="The model name the agents use on that server.")

    def handle(self, *args: Any, **options: Any) -> None:
        base_url = str(settings.OPENAI_COMPATIBLE_BASE_URL)
        if not base_url:
            raise CommandError("OPENAI_COMPATIBLE_BASE_URL is not set.")
        try:
            capabilities = async_to_sync(probe_capabilities)(
                api_key=settings.OPENAI_COMPATIBLE_API_KEY or None, base_url=base_url, model=options["model"]
            )
        except ProviderError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from exc
        row = provider_probe_record(base_url=base_url, model=options["model"], capabilities=capabilities)
        self.stdout.write(json.dumps({"model": row.model, "fidelity": row.fidelity, **row.capabilities}))
