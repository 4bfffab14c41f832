"""A task worker whose `memory` tool hangs (test instrument for the crash test): the run is killed
while its tool call is committed but unanswered. Usage: python slow_tool_worker.py [db_worker args]."""

import dataclasses
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "opencompany.settings")

import django

django.setup()

from django.core.management import call_command  # noqa: E402

from opencompany.llm import tools  # noqa: E402

memory = tools.get_tool("memory")
assert memory is not None


def hang(context: object, arguments: dict) -> dict:
    time.sleep(300)
    return {}


tools.register_tool(dataclasses.replace(memory, execute=hang))
call_command("db_worker", *sys.argv[1:])
