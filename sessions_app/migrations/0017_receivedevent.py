import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0016_importjob_worker_heartbeat"),
    ]

    operations = [
        migrations.CreateModel(
            name="ReceivedEvent",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("source_id", models.CharField(max_length=200)),
                ("seq", models.BigIntegerField()),
                ("source_hash", models.CharField(max_length=64)),
                (
                    "session",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.DB_CASCADE,
                        related_name="received_events",
                        to="sessions_app.session",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("session", "source_id"), name="receivedevent_session_source_uniq")
                ],
            },
        ),
    ]
