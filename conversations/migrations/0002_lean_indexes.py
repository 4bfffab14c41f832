"""Drop the three indexes another index already covers (every turn paid an entry in each).

Only the indexes are dropped: the foreign keys stay as they are, so no table is rewritten or
revalidated. `_like` exists on PostgreSQL only; IF EXISTS covers SQLite.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

DROPPED = {
    # index name: (table, column)
    "conversations_agentconversation_owner_id_1f887873": ("conversations_agentconversation", "owner_id"),
    "conversations_agentconversation_workflow_id_95608053": ("conversations_agentconversation", "workflow_id"),
    "conversations_conversationmessage_conversation_id_f76b8227": (
        "conversations_conversationmessage",
        "conversation_id",
    ),
}


def _drop(vendor_like: bool) -> list[str]:
    out = [f'DROP INDEX IF EXISTS "{name}"' for name in DROPPED]
    if vendor_like:
        out.append('DROP INDEX IF EXISTS "conversations_agentconversation_workflow_id_95608053_like"')
    return out


def drop_indexes(apps, schema_editor):
    for statement in _drop(schema_editor.connection.vendor == "postgresql"):
        schema_editor.execute(statement)


def create_indexes(apps, schema_editor):
    for name, (table, column) in DROPPED.items():
        schema_editor.execute(f'CREATE INDEX IF NOT EXISTS "{name}" ON "{table}" ("{column}")')
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            'CREATE INDEX IF NOT EXISTS "conversations_agentconversation_workflow_id_95608053_like" '
            'ON "conversations_agentconversation" ("workflow_id" varchar_pattern_ops)'
        )


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0001_conversations_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="agentconversation",
                    name="owner",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="agent_conversations",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                migrations.AlterField(
                    model_name="agentconversation",
                    name="workflow_id",
                    field=models.CharField(max_length=40),
                ),
                migrations.AlterField(
                    model_name="conversationmessage",
                    name="conversation",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="messages",
                        to="conversations.agentconversation",
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(drop_indexes, create_indexes)],
        )
    ]
