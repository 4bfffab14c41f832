from django.db import migrations, models

import chat.models


def fill_ids(apps, schema_editor):
    ChatThread = apps.get_model("chat", "ChatThread")
    for thread in ChatThread.objects.filter(uid__isnull=True).only("pk").iterator():
        ChatThread.objects.filter(pk=thread.pk).update(uid=chat.models.new_chat_id())


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0005_chat_admin_plural_names"),
    ]

    operations = [
        migrations.AddField(
            model_name="chatthread",
            name="uid",
            field=models.CharField(editable=False, max_length=40, null=True),
        ),
        migrations.RunPython(fill_ids, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="chatthread",
            name="uid",
            field=models.CharField(
                default=chat.models.new_chat_id, editable=False, max_length=40, unique=True
            ),
        ),
    ]
