"""Migration operations for the database-specific full-text projections."""

from __future__ import annotations

from typing import Any

from django.db import migrations


class VendorRunSQL(migrations.RunSQL):
    """`RunSQL` applied only on one database vendor (`postgresql`, `sqlite`); a no-op elsewhere."""

    def __init__(self, vendor: str, sql: Any, reverse_sql: Any, **kwargs: Any) -> None:
        self.vendor = vendor
        super().__init__(sql, reverse_sql, **kwargs)

    def deconstruct(self) -> tuple[str, Any, dict[str, Any]]:
        _name, args, kwargs = super().deconstruct()
        kwargs["vendor"] = self.vendor
        return (self.__class__.__qualname__, args, kwargs)

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if schema_editor.connection.vendor == self.vendor:
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if schema_editor.connection.vendor == self.vendor:
            super().database_backwards(app_label, schema_editor, from_state, to_state)

    def describe(self) -> str:
        return f"Raw SQL on {self.vendor} only"
