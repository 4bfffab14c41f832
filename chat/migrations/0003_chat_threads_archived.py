import django.db.models.deletion
from django.db import migrations, models


def home_is_workflow(apps, schema_editor):
    ChatThread = apps.get_model("chat", "ChatThread")
    ChatThread.objects.filter(home_workflow__isnull=True).update(home_workflow=models.F("workflow"))


class Migration(migrations.Migration):

    dependencies = [
        ("chat", "0002_chat_provider_probe"),
        ("graphs", "0001_graphs_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="chatthread",
            name="archived_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="chatthread",
            name="title",
            field=models.CharField(blank=True, default="", max_length=200),
        ),
        migrations.AddField(
            model_name="chatthread",
            name="home_workflow",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="chats",
                to="graphs.workflow",
            ),
        ),
        migrations.RunPython(home_is_workflow, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="chatthread",
            name="home_workflow",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE, related_name="chats", to="graphs.workflow"
            ),
        ),
        migrations.AlterField(
            model_name="chatthread",
            name="workflow",
            field=models.OneToOneField(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="chat_thread",
                to="graphs.workflow",
            ),
        ),
        migrations.AddIndex(
            model_name="chatthread",
            index=models.Index(fields=["home_workflow", "created_at"], name="chat_thread_home_created"),
        ),
        migrations.AddConstraint(
            model_name="chatthread",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(
                        ("archived_at__isnull", True),
                        ("workflow", models.F("home_workflow")),
                        ("workflow__isnull", False),
                    ),
                    models.Q(("archived_at__isnull", False), ("workflow__isnull", True)),
                    _connector="OR",
                ),
                name="chat_thread_current_or_archived",
            ),
        ),
    ]
