"""Keep a message inline in its row up to a full page (PostgreSQL only).

By default PostgreSQL moves any value still over ~2 KB after compression into the TOAST table, so a
typical tool result cost extra heap and index writes there on every turn and extra index lookups
on every load. With `toast_tuple_target` at the largest value allowed, a compressed message up to
~8 KB stays in the row; larger ones still go out of line.
"""

from django.db import migrations


def keep_inline(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE conversations_conversationmessage SET (toast_tuple_target = 8160)")


def default_target(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE conversations_conversationmessage RESET (toast_tuple_target)")


class Migration(migrations.Migration):
    dependencies = [("conversations", "0002_lean_indexes")]

    operations = [
        migrations.RunPython(keep_inline, default_target)
    ]
