from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(autouse=True)
def _manual_runs_and_no_pacing(settings: Any) -> None:
    """Chat tests drive `execute_run` themselves and the offline model streams without pacing."""
    settings.OPENCOMPANY_RUN_EXECUTOR = "manual"
    settings.OPENCOMPANY_OFFLINE_PACING_MS = 0
